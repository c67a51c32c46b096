"""Known answers that the second tranche of generated mutants found missing (issue 32:
``make mutate-generated`` over decoding, batching, bootstrap, sequences and the ledger; the
survivors left are explained in docs/rules.md).

Each test pins a value a consistent bug would change: a metric of summed statistics, the
p-values' edge cases, the beam pool's n-th best, the nucleus filter's range, a batch moved
to another device, and the ledger's comparison of two training states.
"""

from __future__ import annotations

import hashlib
import math
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seqcore.blobs import save_blob
from seqcore.contract import IGNORE_INDEX
from seqcore.data.batching import BucketSampler, epoch_batches
from seqcore.data.examples import Example
from seqcore.decoding import beam
from seqcore.decoding.beam import BeamSettings, _Pool
from seqcore.decoding.greedy import greedy
from seqcore.decoding.processors import no_repeat_ngram, temperature, top_p
from seqcore.decoding.sampling import draw_uniforms, example_seed
from seqcore.decoding.search import (
    Hypothesis,
    Masking,
    check_inputs,
    length_caps,
    mask_scores,
)
from seqcore.ledger import (
    escape_probability,
    first_difference,
    ledger_segments,
    state_difference,
)
from seqcore.metrics.bootstrap import (
    COLUMNS,
    METRICS,
    NANO,
    Resampling,
    group_sums,
    intervals,
    paired,
    row_matrix,
)
from seqcore.sequences import Batch, TeacherForcing, make_batch
from seqcore.tasks.lm.streams import StreamBatcher, StreamState
from tests.factories import IDS, tiny_model


def summed(**values: int) -> np.ndarray:
    """One row of summed statistics (COLUMNS), zero where not given."""
    return np.array([values.get(c, 0) for c in COLUMNS], dtype=np.int64)


# --- the metrics of summed statistics -------------------------------------------------------

def test_each_headline_metric_of_summed_statistics_has_its_known_value() -> None:
    s = summed(n=4, exact=1, exact_multi=2, token_edits=3, ref_tokens=10, token_edits_multi=2,
               ref_tokens_multi=10, char_edits=5, ref_chars=20,
               nll_nano=round(5 * math.log(2) * NANO), nll_tokens=5)
    got = {name: float(f(s)) for name, f in METRICS.items()}
    assert got == pytest.approx({
        "word_error_rate": 0.75, "word_error_rate_multi_ref": 0.5, "exact_match": 0.25,
        "exact_match_multi_ref": 0.5, "token_error_rate": 0.3, "token_error_rate_multi_ref": 0.2,
        "char_error_rate": 0.25, "perplexity": 2.0}, rel=1e-9)


def test_metrics_of_no_rows_are_nan_and_an_overflowing_perplexity_is_inf_without_warnings(
        ) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's divide, invalid and overflow warnings
        assert all(math.isnan(float(f(summed()))) for f in METRICS.values())
        assert math.isinf(float(METRICS["perplexity"](summed(nll_nano=10**6 * NANO,
                                                             nll_tokens=1))))
        assert math.isinf(float(METRICS["token_error_rate"](summed(token_edits=3))))
        assert math.isinf(float(METRICS["perplexity"](summed(nll_nano=5))))  # 5 / 0 tokens


# --- paired comparisons: the edges ----------------------------------------------------------

A = np.array([summed(n=1, exact=1), summed(n=1, exact=0), summed(n=1, exact=1)])
B = np.array([summed(n=1, exact=1), summed(n=1, exact=1), summed(n=1, exact=1)])
#: Four words on which A and B differ, three ways in B's favour: a swap of two opposite
#: words cancels the difference, so how many trials are as extreme depends on the draws.
A4 = np.array([summed(n=1, exact=e) for e in (0, 0, 0, 1)])
B4 = np.array([summed(n=1, exact=e) for e in (1, 1, 1, 0)])


def test_without_resamples_a_comparison_has_its_figures_and_nan_intervals_and_p_values() -> None:
    out = paired(A, B, Resampling(samples=0), ["word_error_rate"])["word_error_rate"]
    assert (out.a, out.b, out.delta) == pytest.approx((1 / 3, 0.0, -1 / 3))
    assert all(math.isnan(x) for x in (out.low, out.high, out.p_bootstrap, out.p_randomization))


def test_an_undefined_metric_does_not_end_the_comparison_of_the_others() -> None:
    # perplexity first: no teacher-forced statistics, so its difference is NaN
    out = paired(A, B, Resampling(samples=200), ["perplexity", "word_error_rate"])
    assert math.isnan(out["perplexity"].delta) and math.isnan(out["perplexity"].p_bootstrap)
    assert math.isfinite(out["word_error_rate"].p_randomization)


def test_the_randomization_draws_its_swaps_from_the_seed_after_the_bootstraps() -> None:
    # approximate randomization: word i of A and B swapped where the PCG64(seed + 1) draw
    # is 1 (the bootstrap's own resamples use PCG64(seed)); p = (1 + as extreme) / (1 + S)
    r = Resampling(samples=300, seed=7)
    swaps = np.random.Generator(np.random.PCG64(8)).integers(0, 2, size=(300, 4))
    wer = METRICS["word_error_rate"]
    extreme = sum(abs(float(wer((B4 - (B4 - A4) * s[:, None]).sum(0)))
                      - float(wer((A4 + (B4 - A4) * s[:, None]).sum(0)))) >= 0.5 - 1e-12
                  for s in swaps)
    out = paired(A4, B4, r, ["word_error_rate"])
    assert set(out) == {"word_error_rate"}  # the metrics asked for, no others
    assert out["word_error_rate"].delta == -0.5
    assert out["word_error_rate"].p_randomization == (1 + extreme) / 301
    assert 0.5 < (1 + extreme) / 301 < 0.8  # the cancelling swaps are not as extreme (10/16)


def test_rows_without_teacher_forced_statistics_have_no_perplexity() -> None:
    stats = [SimpleNamespace(**{c: 1 for c in COLUMNS[:9]})] * 2
    m = row_matrix(stats)
    assert m.dtype == np.int64 and m[:, 9:].tolist() == [[0, 0], [0, 0]]
    assert math.isnan(float(METRICS["perplexity"](m.sum(0))))
    sums = group_sums(m, ["b", "a"])
    assert sums.dtype == np.int64 and sums.tolist() == [list(m[1]), list(m[0])]


def test_one_resample_gives_an_interval_of_that_resample() -> None:
    out = intervals(A, Resampling(samples=1, seed=3), ["word_error_rate"])["word_error_rate"]
    assert out["low"] == out["high"] and 0 <= out["low"] <= 1


# --- the beam's pool of finished hypotheses -------------------------------------------------

def hyp(norm: float) -> Hypothesis:
    return Hypothesis([4], norm * 2, norm, True)


def test_the_pool_s_nth_best_is_the_nth_highest_normalised_score() -> None:
    pool = _Pool([hyp(-0.5), hyp(-0.1), hyp(-0.3)])
    assert [pool.nth_best(n) for n in (1, 2, 3)] == [-0.1, -0.3, -0.5]
    assert pool.nth_best(4) == float("-inf")


def test_an_empty_pool_s_best_is_one_empty_truncated_hypothesis_scoring_minus_inf() -> None:
    assert _Pool([]).best(2) == [Hypothesis([], float("-inf"), float("-inf"), False)]
    pool = _Pool([hyp(-0.5), hyp(-0.1), hyp(-0.1)])
    assert [h.norm_score for h in pool.best(2)] == [-0.1, -0.1]


# --- the nucleus filter's range -------------------------------------------------------------

def test_top_p_stops_at_the_token_whose_mass_reaches_p_exactly() -> None:
    scores = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    assert torch.softmax(scores, -1)[0, 0] == 0.5  # the mass is exact in float32
    kept = ~torch.isinf(top_p(scores, 0.5))
    assert kept.tolist() == [[True, False, False]]


@pytest.mark.parametrize("p", [0.0, -0.1, 1.5, 2.0])
def test_top_p_outside_0_to_1_is_refused_naming_the_range_and_the_value(p: float) -> None:
    with pytest.raises(ValueError, match=rf"^top_p must be in \(0, 1\], got {p}$"):
        top_p(torch.zeros(1, 3), p)


# --- a batch on another device ----------------------------------------------------------------

def test_a_batch_moved_to_another_device_moves_every_tensor_and_keeps_its_shapes() -> None:
    tf = TeacherForcing(torch.ones(2, 3, dtype=torch.long), torch.full((2, 3), 5),
                        torch.ones(2, 3, dtype=torch.bool))
    batch = Batch(torch.arange(8).view(2, 4), torch.ones(2, 4, dtype=torch.bool), tf)
    assert batch.to(torch.device("cpu")) is batch
    moved = batch.to(torch.device("meta"))  # a device without storage, on any machine
    tensors = [moved.src, moved.src_mask, moved.tf.inputs, moved.tf.labels, moved.tf.mask]
    assert all(t.device.type == "meta" for t in tensors)
    assert [tuple(t.shape) for t in tensors] == [(2, 4), (2, 4), (2, 3), (2, 3), (2, 3)]
    assert [t.dtype for t in tensors] == [torch.long, torch.bool, torch.long, torch.long,
                                          torch.bool]


# --- the ledger --------------------------------------------------------------------------------

def test_a_ledger_of_the_first_and_last_states_is_one_segment(tmp_path: Path) -> None:
    for step in (0, 40):
        save_blob(tmp_path / f"ckpt-{step:08d}.pt", {"step": step})
    assert [s.label() for s in ledger_segments(tmp_path)] == ["segment 1 (steps 0->40)"]
    (tmp_path / "ckpt-00000040.pt").unlink()
    with pytest.raises(ValueError, match="one state only: no segment to replay"):
        ledger_segments(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no ledger states \(ckpt-XXXXXXXX.pt\); train "
                       r"the result again with this version \(`dvc repro`\)$"):
        ledger_segments(tmp_path / "none")
    (tmp_path / "ckpt-00000000.pt").rename(tmp_path / "ckpt-00000005.pt")
    with pytest.raises(ValueError, match=r"starts at step 5, not at the state before the first "
                       r"step: the training before it cannot be checked$"):
        ledger_segments(tmp_path)


def test_replaying_only_the_last_segment_misses_every_other_faked_one() -> None:
    assert escape_probability(30, 29, 1) == 1.0 == escape_probability(30, 3, 1)
    assert escape_probability(30, 30, 3) == 0.0  # the last faked as well: always caught


def test_values_of_different_kinds_and_one_sided_nan_are_differences() -> None:
    assert first_difference({"w": 1}, [1]) == ": ledger {'w': 1}, replay [1]"
    assert first_difference([1], torch.ones(1)) == ": ledger [1], replay tensor([1.])"
    assert first_difference({"x": [math.nan]}, {"x": [1.0]}) == "['x'][0]: ledger nan, replay 1.0"
    assert first_difference({"a": 1}, {"a": 1, "b": 2}) == "['b']: only in the replay"
    # below the top level keys are compared in sorted order, whatever order they were put in
    assert first_difference({"s": {"b": 1, "a": 1}}, {"s": {"b": 2, "a": 2}}).startswith(
        "['s']['a']")
    assert first_difference(torch.tensor([1, 2, 3]), torch.tensor([1, 5, 3])) == (
        ": 1 of 3 elements differ (first at flat index 1: ledger 2, replay 5)")
    nan_vs_number = first_difference(torch.tensor([1.0, math.nan]), torch.tensor([2.0, 3.0]))
    assert nan_vs_number.startswith(": 2 of 2 elements differ")
    assert first_difference(torch.tensor([math.nan]), torch.tensor([1.0])) is not None


def test_a_state_equal_to_a_ledger_file_is_no_difference_and_a_changed_one_is_named(
        tmp_path: Path) -> None:
    state = {"model": {"w": torch.tensor([1.0, 2.0])}, "history": [[1, 0.5]], "rng": (3, 4)}
    path = tmp_path / "ckpt-00000010.pt"
    save_blob(path, state)
    assert state_difference(path, state) is None
    changed = {**state, "model": {"w": torch.tensor([1.0, 2.5])}}
    assert state_difference(path, changed) == (
        "['model']['w']: 1 of 2 elements differ (first at flat index 1: ledger 2.0, replay 2.5)")
    # equal values written another way (a list where the file has a tuple): the bytes differ
    assert state_difference(path, {**state, "rng": [3, 4]}).startswith("the bytes")


# --- the search's inputs, caps and masking --------------------------------------------------

def test_the_search_refuses_a_training_model_a_non_bool_mask_and_mismatched_shapes() -> None:
    model = tiny_model(enc_layers=1, dec_layers=1)
    src = torch.ones(2, 4, dtype=torch.long)
    with pytest.raises(RuntimeError, match=r"^decode with model.eval\(\): dropout must be off$"):
        check_inputs(model.train(), src, torch.ones(2, 4, dtype=torch.bool))
    model.eval()
    for mask in (torch.ones(2, 4, dtype=torch.long), torch.ones(2, 5, dtype=torch.bool)):
        with pytest.raises(ValueError, match=r"^expected \(B,S\) src and bool mask, got "):
            check_inputs(model, src, mask)


def test_length_caps_need_one_cap_of_at_least_1_per_example() -> None:
    caps = length_caps([3, 1], 2, torch.device("cpu"))
    assert caps.tolist() == [3, 1] and caps.dtype == torch.long
    assert length_caps([], 0, torch.device("cpu")).tolist() == []
    for bad in ([3, 3, 3], [3, 0]):
        with pytest.raises(ValueError, match=rf"^need 2 caps >= 1, got {re.escape(str(bad))}$"):
            length_caps(bad, 2, torch.device("cpu"))


def test_masking_bans_its_tokens_in_every_row() -> None:
    logp = torch.zeros(2, 6)
    out = mask_scores(logp, torch.zeros(2, 0, dtype=torch.long), Masking(banned=(1, 4)), eos=3)
    assert torch.isinf(out[:, [1, 4]]).all() and (out[:, [0, 2, 3, 5]] == 0).all()


def test_greedy_hypotheses_are_unnormalised_their_norm_score_is_their_score() -> None:
    model = tiny_model(enc_layers=1, dec_layers=1).eval()
    src = torch.randint(4, 10, (3, 5), generator=torch.Generator().manual_seed(0))
    out = greedy(model, src, torch.ones_like(src, dtype=torch.bool), IDS, 4)
    assert [h.norm_score for h in out] == [h.score for h in out]
    assert all(math.isfinite(h.score) for h in out)


# --- batches, streams and samplers ----------------------------------------------------------

def test_a_truncated_target_in_a_batch_keeps_no_eos_label() -> None:
    kept = Example("a", "a", "", "", [5, 6], [7, 8], True)
    cut = Example("b", "b", "", "", [5, 6], [7, 8], False)
    labels = make_batch([kept, cut], IDS).tf.labels.tolist()
    assert labels == [[7, 8, IDS.eos], [7, 8, IGNORE_INDEX]]


def test_no_repeat_bans_the_token_that_would_repeat_the_only_generated_ngram() -> None:
    out = no_repeat_ngram(torch.zeros(1, 8), torch.tensor([[5, 5]]), 2)  # t == n == 2
    assert torch.isinf(out[0, 5]) and int(torch.isinf(out).sum()) == 1


def test_a_temperature_of_0_or_less_is_refused_naming_the_value() -> None:
    with pytest.raises(ValueError, match=r"^temperature must be > 0, got 0$"):
        temperature(torch.zeros(1, 3), 0)


def test_an_example_s_seed_is_the_first_8_bytes_of_sha256_little_endian_and_63_bits() -> None:
    digest = hashlib.sha256(b"12\x00word-7").digest()
    assert example_seed(12, "word-7") == int.from_bytes(digest[:8], "little") % 2**63
    assert example_seed(12, "word-7") == 8680977643365419885  # the same on any machine


def test_uniforms_follow_each_example_s_id_not_its_row() -> None:
    one = draw_uniforms(3, ["x", "y"], [2, 3])
    swapped = draw_uniforms(3, ["y", "x"], [3, 2])
    assert torch.equal(one[0, :2], swapped[1, :2]) and torch.equal(one[1], swapped[0])
    assert not torch.equal(one[0, :2], one[1, :2])  # two ids, two streams
    assert one[0, 2] == 0  # past the cap
    assert draw_uniforms(3, [], []).shape == (0, 0)
    with pytest.raises(ValueError):
        draw_uniforms(3, ["x", "y"], [2])


def test_a_bucket_width_of_1_groups_exactly_equal_lengths() -> None:
    lengths = [2, 3, 2, 3, 2, 3, 2, 3]  # one bucket of width 2, two of width 1
    for epoch in range(3):
        batches = epoch_batches(lengths, 4, 1, seed=9, epoch=epoch)
        assert sorted(len({lengths[i] for i in b}) for b in batches) == [1, 1]


def test_a_sampler_needs_examples_and_a_rank_inside_its_world() -> None:
    with pytest.raises(ValueError, match="^no training examples$"):
        BucketSampler([], 4, 1, 0)
    with pytest.raises(ValueError, match="^rank 2 outside world of 2$"):
        BucketSampler([1, 2], 1, 1, 0, rank=2, world=2)


def test_streams_deal_every_document_once_per_epoch_in_the_epoch_s_seeded_order() -> None:
    docs = [[4], [5], [6]]
    streams = StreamBatcher(docs, 1, 8, seed=2, cycle=True, ids=(0, 2, 3))
    assert streams.state.slots == ((-1, 0),)  # an empty slot before the first segment
    dealt = []
    for _ in range(9):
        streams.next()
        dealt.append((streams.state.epoch, streams.owners()[0]))
    want = [(e, d) for e in range(3) for d in torch.randperm(
        3, generator=torch.Generator().manual_seed(2 * 1_000_003 + e)).tolist()]
    assert dealt == want
    once = StreamBatcher(docs, 2, 8, seed=2, cycle=False, ids=(0, 2, 3))
    assert [once.next() is None for _ in range(3)] == [False, False, True]
    with pytest.raises(ValueError, match="^no documents$"):
        StreamBatcher([], 1, 8, seed=2, cycle=True, ids=(0, 2, 3))
    with pytest.raises(ValueError, match="^1 stream slots stored, 2 configured$"):
        once.load(StreamState(slots=((-1, 0),)))


def test_a_one_position_segment_reads_bos_and_predicts_the_first_token() -> None:
    streams = StreamBatcher([[7, 8]], 1, 1, seed=0, cycle=False, ids=(0, 2, 3))
    first = streams.next()
    assert first.inputs.tolist() == [[2]] and first.labels.tolist() == [[7]]


# --- beam search's early stop -----------------------------------------------------------------

@pytest.mark.parametrize("norm", ["gnmt", "avg", "none"])
def test_beam_search_stopping_early_returns_what_searching_to_the_cap_returns(
        norm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The early stop (beam._done) ends an example once no live hypothesis can beat its n-th
    # best finished one; a bound that is too tight would stop before a better one finishes.
    # Searching to the cap (the stop switched off) is the reference.
    settings = BeamSettings(beam_size=3, n_best=2, length_norm=norm, alpha=0.6)
    runs = []
    for stop in (True, False):
        if not stop:
            monkeypatch.setattr(beam, "_done", lambda pools, examples, live, *rest: torch.zeros(
                live.shape[0], dtype=torch.bool))
        out = []
        for seed in range(6):
            model = tiny_model(enc_layers=1, dec_layers=1, seed=seed).eval()
            src = torch.randint(4, 10, (4, 5), generator=torch.Generator().manual_seed(seed))
            found = beam.beam_search(model, src, torch.ones_like(src, dtype=torch.bool), IDS,
                                     [3, 5, 8, 8], settings)
            out.append([[(h.tokens, round(h.norm_score, 5)) for h in hyps] for hyps in found])
        runs.append(out)
    assert runs[0] == runs[1]


# -- found by the third tranche of generated mutants (issue 32) -------------------------------

def test_the_paired_failure_rates_have_their_known_values() -> None:
    # A: 4 words, 2 decoded empty, 1 truncated; B: none failing. Each rate is the failing
    # rows over all rows (column 0), and B - A is the paired difference.
    from seqcore.artifacts.predictions import PredictionRow  # noqa: PLC0415
    from seqcore.metrics.bootstrap import Resampling  # noqa: PLC0415
    from seqcore.metrics.comparison import compare_rows  # noqa: PLC0415
    from seqcore.metrics.evaluation import EvalSpec  # noqa: PLC0415
    from seqcore.metrics.failures import FailureRules  # noqa: PLC0415

    def row(i: int, hyp: str, eos: bool = True) -> PredictionRow:
        return PredictionRow(f"{i:05d}", f"w{i}", f"cat{i}", "K AE T", hyp, [0] * len(hyp.split()),
                             hyp.split(), -1.0, -1.0, len(hyp.split()), eos, [])

    a = [row(0, ""), row(1, ""), row(2, "K AE", eos=False), row(3, "K AE T")]
    b = [row(i, "K AE T") for i in range(4)]
    spec = EvalSpec((), FailureRules(2, 3, 1), "group", None, Resampling(0, 0, 0.95))
    failures = compare_rows(a, b, spec, Resampling(0, 0, 0.95))["failures"]
    assert (failures["empty"]["a"], failures["empty"]["b"]) == (0.5, 0.0)
    assert (failures["truncated"]["a"], failures["truncated"]["b"]) == (0.25, 0.0)
    assert failures["empty"]["delta"] == -0.5 and failures["repeated"]["a"] == 0.0


def test_each_logged_step_names_the_epoch_its_cursor_stood_in_when_the_step_began(
        tmp_path: Path) -> None:
    # 12 pairs, 4 a batch, 3 batches an epoch: the cursor moves to the next epoch when a step
    # draws past the last batch, so the step that starts an epoch logs the one before it
    # (docs/training.md; the committed logs were written so)
    from tests.factories import s2s_loop  # noqa: PLC0415

    loop = s2s_loop(tmp_path, 7)
    loop.resume()
    logged: list[int] = []
    loop.run(lambda entry, tokens_per_s: logged.append(entry.epoch))
    assert logged == [0, 0, 0, 0, 1, 1, 1]
