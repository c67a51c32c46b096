"""The Phonetisaurus baseline (issue 28): the real tools on small lexicons, what training
leaves out and why, one line for a failing tool, ``auto``, and the baseline's predictions
scored by exactly the model's evaluation code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline import evaluate
from seqcore.artifacts.baseline import BaselineRecord
from seqcore.artifacts.predictions import Predictions
from seqcore.baselines import phonetisaurus as ps
from seqcore.config import BaselineConfig, ConfigError, config_from_dict, load_config
from seqcore.data.examples import Example
from seqcore.tasks.parallel.baseline import skip_reason
from seqcore.tasks import task_checked
from tests.pipeline_helpers import merge, run_stage

#: A lexicon small enough to read: consonant-vowel-consonant words of two vowels.
WORDS = [("cat", "K AE T"), ("bat", "B AE T"), ("cab", "K AE B"), ("tab", "T AE B"),
         ("tack", "T AE K"), ("back", "B AE K"), ("knack", "N AE K"), ("kit", "K IH T"),
         ("bit", "B IH T"), ("tick", "T IH K")]
LOW_ORDER = BaselineConfig(order=3)  # order 8 needs more rows than this (see below)


def lexicon(pairs: list[tuple[str, str]]) -> list[ps.LexiconRow]:
    return [ps.LexiconRow(f"r{i}", w, t) for i, (w, t) in enumerate(pairs)]


def test_unseen_words_are_composed_from_the_aligned_letters(tmp_path: Path) -> None:
    trained = ps.train(lexicon(WORDS), tmp_path, LOW_ORDER)
    assert trained.rejected == [] and trained.rows == len(WORDS)
    got = ps.convert(trained.fst, ["bick", "kat", "cat", "cat"])
    # "bick" was never seen: b->B, i->IH, ck->K, each learnt from other words
    assert {w: c[0].target for w, c in got.items()} == {"bick": "B IH K", "kat": "K AE T",
                                                         "cat": "K AE T"}
    assert all(len(c) == 1 and c[0].log_prob < 0 for c in got.values())


def test_the_nbest_list_is_distinct_pronunciations_best_first(tmp_path: Path) -> None:
    trained = ps.train(lexicon(WORDS), tmp_path, LOW_ORDER)
    (got,) = ps.convert(trained.fst, ["bick"], nbest=5).values()
    targets = [c.target for c in got]
    assert targets[0] == "B IH K" and 1 < len(targets) <= 5
    assert len(set(targets)) == len(targets)  # two alignments of one spelling count once
    assert [c.log_prob for c in got] == sorted((c.log_prob for c in got), reverse=True)


def test_conversion_in_chunks_gives_the_one_process_answer(tmp_path: Path) -> None:
    trained = ps.train(lexicon(WORDS), tmp_path, LOW_ORDER)
    words = [w for w, _ in WORDS] + ["bick", "zzz", "kat"]
    one = ps.convert(trained.fst, words, nbest=3, processes=1)
    assert len(one) == len(set(words))
    for n in (2, 3, len(words) + 5):  # more processes than words: one word each
        assert ps.convert(trained.fst, words, nbest=3, processes=n) == one


def test_a_word_of_unseen_letters_gets_an_empty_pronunciation(tmp_path: Path) -> None:
    trained = ps.train(lexicon(WORDS), tmp_path, LOW_ORDER)
    # evaluate counts it as empty
    assert [c.target for c in ps.convert(trained.fst, ["zzz"])["zzz"]] == [""]


def test_training_twice_gives_the_same_model_bytes(tmp_path: Path) -> None:
    one = ps.train(lexicon(WORDS), tmp_path / "one", LOW_ORDER)
    two = ps.train(lexicon(WORDS), tmp_path / "two", LOW_ORDER)
    assert one.fst.read_bytes() == two.fst.read_bytes()
    assert one.lexicon_sha256 == two.lexicon_sha256


def test_rows_the_aligner_cannot_take_are_listed_by_reason_not_dropped(tmp_path: Path) -> None:
    rows = lexicon(WORDS + [("x", "EH K S"), ("a_b", "AH B")])
    trained = ps.train(rows, tmp_path, LOW_ORDER)
    assert [(r.source, r.reason) for r in trained.rejected] == [
        ("x", "target longer than baseline.seq2_max x source (baseline.seq1_del is false)"),
        ("a_b", "uses one of the aligner's reserved symbols } | _")]
    # the aligner itself dropped "x" without a word: the corpus holds every other row
    corpus = ps.aligned_pairs((tmp_path / "corpus").read_text())
    assert sum(corpus.values()) == len(WORDS) and ("x", "EH K S") not in corpus


@pytest.mark.parametrize(("source", "target", "settings", "why"), [
    ("x", "EH K S", BaselineConfig(), "target longer"),  # 3 symbols > 2 x 1 letter
    ("ox", "AA K S", BaselineConfig(), None),  # 3 <= 2 x 2
    ("x", "EH K S", BaselineConfig(seq1_del=True), None),  # a symbol may take no letter
    ("ough", "OW", BaselineConfig(seq2_del=False), "source longer"),  # 4 letters > 2 x 1
    ("ough", "OW", BaselineConfig(), None),  # letters may map to nothing
])
def test_alignment_limit_follows_chunk_sizes_and_deletions(
        source: str, target: str, settings: BaselineConfig, why: str | None) -> None:
    got = ps.alignment_limit(source, target, settings)
    assert (got is None) if why is None else got.startswith(why)


def test_a_tool_killed_by_a_signal_is_one_line_naming_it_and_the_signal(tmp_path: Path) -> None:
    # MITLM's estimate-ngram segfaults on an order-8 model of ten words
    with pytest.raises(ps.BaselineError) as err:
        ps.train(lexicon(WORDS), tmp_path, BaselineConfig(order=8))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("baseline: estimate-ngram was killed by signal 11")
    assert "lower it, or set baseline.kind: none" in message


def test_a_tool_failing_with_a_status_is_one_line_naming_it_and_the_status(tmp_path: Path) -> None:
    absent = tmp_path / "absent.tsv"
    with pytest.raises(ps.BaselineError) as err:
        ps.run_tool("phonetisaurus-align", [f"--input={absent}", f"--ofile={tmp_path / 'c'}"])
    assert str(err.value) == ("baseline: phonetisaurus-align failed with exit status 255 (last "
                              f"message: 'Failed to open input file: {absent}')")


def test_a_tool_that_succeeds_without_writing_its_output_is_a_failure(tmp_path: Path) -> None:
    # phonetisaurus-arpa2wfst exits 0 on a missing ARPA file; train checks each output
    empty = tmp_path / "empty.arpa"
    empty.touch()
    with pytest.raises(ps.BaselineError, match="estimate-ngram wrote an empty "):
        ps.require_output(empty, "estimate-ngram")


def test_training_on_rows_none_of_which_align_stops(tmp_path: Path) -> None:
    with pytest.raises(ps.BaselineError, match="aligned none of the 2 train rows"):
        ps.train(lexicon([("x", "EH K S"), ("q", "K Y UW W")]), tmp_path, LOW_ORDER)


def test_auto_trains_for_g2p_and_for_word_pairs_and_skips_sentences() -> None:
    words, sentences = [[Example(s, s, s, "A B", [1], [1], True) for s in sources]
                        for sources in (["cat", "dog"], ["the cat", "dog"])]
    user = {"task": "parallel", "data": {"source": "tsv", "path": "x.tsv"},
            "paths": {"raw": "data/raw/x.tsv"}}
    assert skip_reason(config_from_dict({"task": "g2p"}), sentences) is None
    assert skip_reason(config_from_dict(user), words) is None
    why = skip_reason(config_from_dict(user), sentences)
    assert why is not None and "1 of 2 train sources contain whitespace" in why
    forced = config_from_dict(user | {"baseline": {"kind": "phonetisaurus"}})
    assert skip_reason(forced, sentences) is None
    assert skip_reason(config_from_dict({"baseline": {"kind": "none"},
                                         "decode": {"rescore": "none"}}), words) == \
        "baseline.kind is none"


def test_phonetisaurus_for_an_lm_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        task_checked(config_from_dict({"task": "lm", "model": {"family": "gru"},
                                       "baseline": {"kind": "phonetisaurus"}}), "params")
    assert "baseline.kind" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.e2e
def test_the_baseline_is_scored_by_the_same_code_as_the_model(
        audit_result: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Give the model the baseline's hypotheses: evaluate's model-side figures must then be the
    # baseline's, and the difference zero with p = 1. A separate scoring path for the
    # baseline (another tokenisation of the phonemes, another reference set) would show here.
    repo = shutil.copytree(audit_result[0], tmp_path / "copy", symlinks=True)
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    base, versus = metrics["baseline"], metrics["vs_baseline"]
    assert BaselineRecord.load(repo / "baseline").present
    baseline_rows = {r.id: r for r in Predictions.load(repo / "baseline/test.jsonl").rows}
    model_path = repo / "predictions/test.jsonl"
    model_rows = Predictions.load(model_path).rows
    assert [r.id for r in model_rows] == list(baseline_rows)  # the same rows, same order
    assert any(r.hypothesis != baseline_rows[r.id].hypothesis for r in model_rows)
    Predictions([type(r)(**{**r.__dict__, "hypothesis": baseline_rows[r.id].hypothesis,
                            "pieces": baseline_rows[r.id].pieces})
                 for r in model_rows]).save(model_path)
    monkeypatch.chdir(repo)
    same = evaluate.run(load_config("params.yaml")).metrics
    for key in ("word_error_rate", "token_error_rate", "token_error_rate_multi_ref",
                "exact_match", "exact_match_multi_ref", "char_error_rate", "bleu", "chrf", "ter"):
        assert same[key] == base[key], key
    assert same["interval"]["word_error_rate"] == base["interval"]["word_error_rate"]
    assert all(v["delta"] == 0 and v["p_bootstrap"] == 1 for v in same["vs_baseline"].values())
    assert versus["word_error_rate"]["delta"] == metrics["word_error_rate"] - \
        base["word_error_rate"]


def user_data(work: Path, rows: list[str]) -> None:
    """The user's TSV in data/external/, fetched, prepared and tokenized (all rows train)."""
    (work / "data/external").mkdir(parents=True, exist_ok=True)
    (work / "data/external/user.tsv").write_text("".join(r + "\n" for r in rows))
    for stage in ("fetch", "prepare", "tokenizer"):
        res = run_stage(work, stage, SPLITS)
        assert res.returncode == 0, res.stderr


SPLITS = {"data": {"dev_fraction": 0.2, "test_fraction": 0.2, "min_split_rows": 1},
          "sequence": {"max_src_len": 32, "max_tgt_len": 32, "overlong": "drop"},
          # the UNK guard is the tokenizer's business: these rows are about the baseline
          "tokenizer": {"max_unk_rate": 1.0}, "baseline": {"order": 3}}


@pytest.mark.slow
def test_unalignable_rows_above_the_reject_rate_stop_the_stage_after_listing_them(
        tmp_path: Path) -> None:
    # 100 word pairs; every tenth is a one-letter word read as three symbols (an acronym
    # letter), which no alignment with 2-symbol chunks and no letter deletion can cover
    letters = "dfghjmpqrs"
    rows = [f"{letters[i // 10]}\tEH K S" if i % 10 == 0 else
            f"ab{'c' * (i % 4)}{i}\tAE B {'K ' * (i % 4)}N{i % 9}" for i in range(100)]
    user_data(tmp_path, rows)
    res = run_stage(tmp_path, "baseline", SPLITS)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("[baseline] baseline: ") and "could not be aligned, above " \
        "data.max_reject_rate (0.05); see reports/baseline_rejects.tsv (first: target longer " \
        "than baseline.seq2_max x source" in last, last
    rejects = (tmp_path / "reports/baseline_rejects.tsv").read_text().splitlines()[1:]
    # every one listed, with its text (source TAB target, the TAB escaped)
    assert rejects and all(r.split("\t")[4][0] in letters and r.endswith("\\tEH K S")
                           for r in rejects)
    res = run_stage(tmp_path, "baseline", merge(SPLITS, {"data": {"max_reject_rate": 0.2}}))
    assert res.returncode == 0, res.stderr
    record = BaselineRecord.load(tmp_path / "baseline")
    assert record.present and sum((record.rejected or {}).values()) == len(rejects)


@pytest.mark.slow
def test_sentence_pairs_under_auto_skip_the_baseline_saying_why(tmp_path: Path) -> None:
    user_data(tmp_path, [f"the cat {i}\tle chat {i}" for i in range(30)])
    res = run_stage(tmp_path, "baseline", SPLITS)
    assert res.returncode == 0, res.stderr
    assert "[baseline] skipped: baseline.kind is auto and " in res.stderr
    assert not BaselineRecord.load(tmp_path / "baseline").present
    assert not (tmp_path / "baseline/test.jsonl").exists()
