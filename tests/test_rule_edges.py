"""Known answers at the edges that generated mutants found untested (issue 32).

`make mutate-generated` (mutmut over pyproject's [tool.mutmut] modules) showed edits that no
fast test noticed: an edit distance whose first column costs nothing, a cosine schedule that
stops half-way when decay lasts one step, a causal mask that hides the diagonal, a sequence
mean that counts rows without labels, an audit that calls NaN equal to a number. Each test
below pins one of these rules with values derived by hand or by an independent brute force;
docs/rules.md lists the mutants left alive and why each is equivalent.
"""

from __future__ import annotations

import functools
import itertools
import math
from pathlib import Path

import pytest
import torch

from seqcore.audit import (
    MISMATCH, NOT_RUN, OK, WARNING, AuditReport, lock_param_diffs, lookup, number_diffs,
    same_value_diffs, stage_out_diffs, tokenizer_file_diffs)
from seqcore.contract import IGNORE_INDEX, attention_mask, masked_softmax, shift_targets
from seqcore.losses import sequence_loss
from seqcore.metrics.edit import aligned_matches, levenshtein
from seqcore.metrics.failures import FailureRules, failure_modes, has_loop, ngrams
from seqcore.training.schedule import learning_rate
from tests.factories import CONTRACT, IDS, make_rows


# -- edit distance ------------------------------------------------------------------------

def brute_alignments(hyp: tuple[str, ...], ref: tuple[str, ...]) -> list[tuple[int, int]]:
    """(edits, matches) of every alignment of hyp with ref, by plain recursion."""

    @functools.cache
    def walk(i: int, j: int) -> tuple[tuple[int, int], ...]:
        if i == len(hyp) and j == len(ref):
            return ((0, 0),)
        out = []
        if i < len(hyp):  # delete hyp[i]
            out += [(e + 1, m) for e, m in walk(i + 1, j)]
        if j < len(ref):  # insert ref[j]
            out += [(e + 1, m) for e, m in walk(i, j + 1)]
        if i < len(hyp) and j < len(ref):  # match or substitute
            same = hyp[i] == ref[j]
            out += [(e + (not same), m + same) for e, m in walk(i + 1, j + 1)]
        return tuple(out)

    return list(walk(0, 0))


#: every sequence of up to 3 tokens over three symbols and of 4 over two: (a a b, b c c) is
#: the shortest pair where a first column one edit too cheap changes the matches
SHORT = [s for n in range(4) for s in itertools.product("abc", repeat=n)] + list(
    itertools.product("ab", repeat=4))


def test_levenshtein_and_aligned_matches_agree_with_a_brute_force_on_every_short_pair() -> None:
    for hyp, ref in itertools.product(SHORT, SHORT):
        found = brute_alignments(hyp, ref)
        fewest = min(e for e, _ in found)
        assert levenshtein(hyp, ref) == fewest, (hyp, ref)
        assert aligned_matches(hyp, ref) == max(m for e, m in found if e == fewest), (hyp, ref)


# -- schedules ----------------------------------------------------------------------------

def test_cosine_decay_of_one_step_ends_at_zero_and_stays_there() -> None:
    # warmup 4, total 5: step 5 is the whole decay (progress 1): lr 0; and past the end too
    assert learning_rate(4, "cosine", 1.0, 4, 5, 64) == 1.0
    assert learning_rate(5, "cosine", 1.0, 4, 5, 64) == pytest.approx(0.0, abs=1e-15)
    assert learning_rate(9, "cosine", 1.0, 4, 5, 64) == pytest.approx(0.0, abs=1e-15)
    # half-way through a 4-step decay: 0.5 * (1 + cos(pi / 2)) = 0.5
    assert learning_rate(6, "cosine", 1.0, 4, 8, 64) == pytest.approx(0.5)


# -- masks and teacher forcing ------------------------------------------------------------

def test_a_causal_mask_lets_query_t_see_the_keys_up_to_t_plus_its_offset() -> None:
    keys = torch.ones(1, 3, dtype=torch.bool)
    plain = attention_mask(keys, queries=3, causal=True)[0, 0]
    assert plain.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    shifted = attention_mask(keys, queries=2, causal=True, offset=1)[0, 0]
    assert shifted.tolist() == [[True, True, False], [True, True, True]]


def test_teacher_forcing_refuses_an_eos_flag_list_of_another_length() -> None:
    with pytest.raises(ValueError):
        shift_targets([[5, 6], [7]], IDS, has_eos=[True])
    empty = shift_targets([], IDS)  # no targets: (0, 0) tensors, not an error
    assert empty.inputs.shape == empty.labels.shape == (0, 0)


def test_attention_weights_refuse_a_mask_that_is_not_boolean() -> None:
    with pytest.raises(TypeError, match=r"allowed must be bool \(True = may attend\), got "
                       r"torch.float32"):
        masked_softmax(torch.zeros(1, 2), torch.ones(1, 2))


# -- the loss -----------------------------------------------------------------------------

def test_the_loss_refuses_smoothing_of_one_and_labels_of_another_shape() -> None:
    logits, labels = torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\), got 1"):
        sequence_loss(logits, labels, "token-mean", 1.0, ())
    with pytest.raises(ValueError, match=r"labels \(B,T\) expected"):
        sequence_loss(logits, labels[:, :2], "token-mean", 0.0, ())


def test_a_row_without_labels_counts_in_no_sequence_mean() -> None:
    # uniform logits over 4 ids: each labelled token costs log 4; the second row has none
    logits = torch.zeros(2, 2, 4)
    labels = torch.tensor([[1, 2], [IGNORE_INDEX, IGNORE_INDEX]])
    out = sequence_loss(logits, labels, "sequence-mean", 0.0, ())
    assert out.sequences == 1 and out.tokens == 2
    assert out.total.item() == pytest.approx(math.log(4))


# -- failure modes ------------------------------------------------------------------------

def test_length_ratios_count_strictly_below_half_and_strictly_above_one_and_a_half() -> None:
    rules = FailureRules(repeat_ngram=2, repeat_times=3, examples=1)
    rows = make_rows([(str(i), str(i), ref, hyp, True, None) for i, (ref, hyp) in enumerate(
        [("a b", "a"), ("a b", "a b c"), ("a b", "a b"), ("a b c", "a")])])
    got = failure_modes(rows, rules, None)["length_ratio"]  # ratios 0.5, 1.5, 1, 1/3
    assert got["below_0.5"] == 0.25 and got["above_1.5"] == 0.0
    assert got["median"] == 0.75
    none = failure_modes([], rules, None)["length_ratio"]
    assert math.isnan(none["median"])


def test_ngrams_are_counted_at_every_start() -> None:
    assert ngrams(["a", "b", "a", "b"], 2) == {("a", "b"): 2, ("b", "a"): 1}
    assert ngrams(["a"], 2) == {}


def test_a_loop_at_the_very_end_of_the_output_is_found() -> None:
    assert has_loop(["x", "a", "a", "a"], n=1, times=3)
    assert has_loop(["x", "a", "b", "a", "b", "a", "b"], n=2, times=3)
    assert not has_loop(["x", "a", "b", "a", "b", "a"], n=2, times=3)


# -- the audit's comparisons --------------------------------------------------------------

def test_numbers_compare_equal_only_within_the_stated_tolerance_and_nan_only_to_nan() -> None:
    sides = ("file", "run")
    assert number_diffs("m", sides, {"a": math.nan}, {"a": math.nan}) == []
    assert number_diffs("m", sides, {"a": math.nan}, {"a": 1.0}) == [
        "m: a: file has nan, run has 1.0"]
    assert number_diffs("m", sides, {"a": 1.0}, {"a": math.nan}) != []
    assert number_diffs("m", sides, {"a": 0.0}, {"a": 1e-13}) == []  # absolute 1e-12 near 0
    assert number_diffs("m", sides, {"a": 1.0}, {"a": 1.05}, rel_tol=0.1) == []
    assert number_diffs("m", sides, {"a": 1.0}, {"a": 1.05}) != []
    assert number_diffs("m", sides, {"a": 1.0}, {}) == ["m: a: file has 1.0, run has nothing"]


def test_rebuilt_outs_name_the_first_divergent_stage_and_a_missing_out() -> None:
    lock = {"stages": {"a": {"outs": [{"path": "x", "md5": "1"}]},
                       "b": {"outs": [{"path": "y", "md5": "2"}, {"path": "z", "md5": "3"}]}}}
    assert stage_out_diffs(["a", "b"], lock, lock) == []
    rebuilt = {"stages": {"a": {"outs": [{"path": "x", "md5": "1"}]},
                          "b": {"outs": [{"path": "y", "md5": "9"}]}}}
    assert stage_out_diffs(["a", "b"], lock, rebuilt) == [
        "first divergent stage: b", "b: y: rebuilt md5 9, dvc.lock records 2",
        "b: z: rebuilt md5 missing, dvc.lock records 3"]
    assert stage_out_diffs(["a", "b"], lock, {})[0] == "first divergent stage: a"
    # a stage without outs, or one the lock does not hold, has nothing to compare
    assert stage_out_diffs(["v", "a"], {"stages": {"v": {"cmd": "x"}, **lock["stages"]}},
                           lock) == []
    assert stage_out_diffs(["a"], {}, lock) == []


def test_lock_params_are_looked_up_by_dotted_key_and_a_missing_one_differs() -> None:
    params = {"train": {"lr": 0.5, "opt": {"beta": 0.9}}}
    assert lookup(params, "train.opt.beta") == 0.9
    assert lookup(params, "train.lr.x") is None and lookup(params, "model") is None
    lock = {"stages": {"train": {"params": {"params.yaml": {"train.lr": 0.5,
                                                             "train.steps": 3}}}}}
    assert lock_param_diffs(lock, params) == [
        "train: train.steps: params.yaml has None, dvc.lock records 3 (changed without "
        "`dvc repro`)"]
    # a lock without stages, a stage without params or without params.yaml: nothing to compare
    assert lock_param_diffs({}, params) == []
    assert lock_param_diffs({"stages": {"a": {}, "b": {"params": {}}}}, params) == []


def test_the_audit_report_fails_on_a_mismatch_or_a_check_not_run_and_only_warns_else() -> None:
    report = AuditReport(only=("a", "b", "c", "d"))
    report.add("a", [])
    report.warn("b", ["env differs"])
    report.seconds["a"] = 1.25
    assert report.ok and report.wants("a") and not report.wants("e")
    assert report.verdict() == "PASSED with warnings (b) [only: a, b, c, d]"
    report.add("c", ["x: differs\n--- a\n+++ b"])
    report.not_run("d", "no model")
    report.add("d", [])  # a check not run stays NOT RUN
    assert report.status == {"a": OK, "b": WARNING, "c": MISMATCH, "d": NOT_RUN}
    assert report.failed() == ["c", "d"] and not report.ok
    assert report.render().splitlines() == [
        "ok       a (1.2 s)", "WARNING  b", "         - env differs", "MISMATCH c",
        "         - x: differs", "           --- a", "           +++ b", "NOT RUN  d",
        "         - no model",
        "audit: FAILED (c, d) with warnings (b) [only: a, b, c, d]"]
    strict = AuditReport()
    strict.warn("e", ["env differs"], strict=True)
    assert strict.failed() == ["e"] and strict.verdict() == "FAILED (e)"
    two = AuditReport()
    two.warn("e", ["x"])
    two.warn("f", ["y"])
    assert two.verdict() == "PASSED with warnings (e, f)"


def test_every_place_must_hold_the_first_places_value() -> None:
    assert same_value_diffs("sig", {}) == []
    assert same_value_diffs("sig", {"lock": "a", "model": "a", "run": "b"}) == [
        "sig: run has 'b' but lock has 'a'"]


def test_each_tokenizer_model_must_hash_to_its_contract_and_a_missing_one_is_named(
        tmp_path: Path) -> None:
    (tmp_path / "src.model").write_bytes(b"src")
    hashes = {tmp_path / "src.model": CONTRACT.src.sha256}
    assert tokenizer_file_diffs(tmp_path, CONTRACT, hashes.__getitem__) == [
        f"tokenizer tgt: file {tmp_path / 'tgt.model'} has sha256 missing, tokenizer contract "
        f"records {CONTRACT.tgt.sha256}"]
    (tmp_path / "tgt.model").write_bytes(b"tgt")
    hashes[tmp_path / "tgt.model"] = "f" * 64
    assert tokenizer_file_diffs(tmp_path, CONTRACT, hashes.__getitem__) == [
        f"tokenizer tgt: file {tmp_path / 'tgt.model'} has sha256 {'f' * 64}, tokenizer "
        f"contract records {CONTRACT.tgt.sha256}"]
