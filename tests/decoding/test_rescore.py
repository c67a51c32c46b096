"""System combination (issue 28): the model rescores the baseline's n-best list; its log
probabilities against evaluate's teacher-forced NLL, the weight's ends against each ranking."""
from __future__ import annotations

from dataclasses import replace

import pytest

from seqcore.artifacts.baseline import BaselineRecord
from seqcore.artifacts.predictions import PredictionRow
from seqcore.config import ConfigError, config_from_dict
from seqcore.data.examples import Example
from seqcore.decoding.rescore import (
    Candidate, candidates, model_log_probs, pick, rescore, scored_candidates)
from seqcore.metrics.teacher import teacher_forced_stats
from seqcore.tasks.parallel.decode import baseline_rows
from seqcore.tasks import ignored_settings, task_checked
from seqcore.tokenizer import Tokenizer
from tests.factories import IDS, tiny_model, trained_tokenizer

PHONES = ["K AE T", "K AA T", "K AE D", "G AE T", "K EH T", "B AE T", "T AE K"]


@pytest.fixture(scope="module")
def tgt_tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return trained_tokenizer(PHONES * 3, tmp_path_factory.mktemp("tok") / "tgt.model", "word", 13)


def row(rid: str, best: tuple[str, float], rest: list[tuple[str, float]]) -> PredictionRow:
    return PredictionRow(rid, rid, "cat", "K AE T", best[0], [], best[0].split(), best[1],
                         best[1], len(best[0].split()), True,
                         [{"hypothesis": h, "tokens": [], "score": s, "norm_score": s,
                           "eos": True} for h, s in rest])


def test_the_combined_score_is_log_linear_in_the_baseline_weight() -> None:
    c = Candidate("K AE T", [4, 5, 6], baseline=-2.0, model=-6.0)
    assert (c.score(0.0), c.score(1.0), c.score(0.25)) == (-6.0, -2.0, -5.0)


def test_candidates_are_the_baseline_list_then_the_model_outputs_it_lacks(
        tgt_tok: Tokenizer) -> None:
    base = row("w", ("K AE T", -1.0), [("K AA T", -3.0), ("", -0.5), ("K AE D", -4.5),
                                        ("K EH T", None)])  # no output, no path: no candidate
    model = row("w", ("G AE T", -0.5), [("K AE T", -0.7), ("B AE T", -0.9)])
    got = candidates(model, base, tgt_tok, IDS.unk)
    assert [(c.text, c.baseline) for c in got] == [
        ("K AE T", -1.0), ("K AA T", -3.0), ("K AE D", -4.5),
        ("G AE T", -4.5), ("B AE T", -4.5)]  # the model's own outputs: the list's lowest score
    empty = row("w", ("", -0.5), [])  # a baseline row with no candidate: the floor is 0
    assert [(c.text, c.baseline) for c in candidates(model, empty, tgt_tok, IDS.unk)] == [
        ("G AE T", 0.0), ("K AE T", 0.0), ("B AE T", 0.0)]


def test_a_candidate_with_an_unknown_phoneme_is_not_scored(tgt_tok: Tokenizer) -> None:
    base = row("w", ("K AE T", -1.0), [("ZH OY", -2.0)])
    assert [c.text for c in candidates(base, base, tgt_tok, IDS.unk)] == ["K AE T"]


def test_model_log_probs_are_minus_the_teacher_forced_nll(tgt_tok: Tokenizer) -> None:
    model = tiny_model(vocab=tgt_tok.vocab_size)
    pairs = [([5, 6, 7], tgt_tok.encode(p)) for p in PHONES]
    got = model_log_probs(model, pairs, IDS, batch_size=3)
    ref = teacher_forced_stats(model, [Example(str(i), "", "", "", s, t, True)
                                       for i, (s, t) in enumerate(pairs)], IDS, 4)
    assert got == pytest.approx([-ref[str(i)].nll for i in range(len(pairs))], abs=1e-5)


def test_each_candidate_gets_its_own_model_log_probability_and_keeps_its_baseline_score(
        tgt_tok: Tokenizer) -> None:
    model = tiny_model(vocab=tgt_tok.vocab_size)
    ex = Example("w", "w", "cat", "K AE T", [5, 6, 7], [], True)
    base = {"w": row("w", ("K AE T", -1.0), [("ZH OY", -2.0), ("K AA T", -3.0)])}
    [got] = scored_candidates(model, [ex], [row("w", ("T AE K", -0.1), [])], base, tgt_tok,
                              IDS, 2)
    texts = ["K AE T", "K AA T", "T AE K"]  # "ZH OY" holds UNK: not scored
    logp = model_log_probs(model, [(ex.src, tgt_tok.encode(t)) for t in texts], IDS, 8)
    assert got == [Candidate(t, tgt_tok.encode(t), b, lp)
                   for t, b, lp in zip(texts, (-1.0, -3.0, -3.0), logp, strict=True)]


def test_the_picked_row_is_the_best_candidate_with_its_scores_and_the_rest_as_its_n_best(
        tgt_tok: Tokenizer) -> None:
    kat, kaat, bat = (tgt_tok.encode(t) for t in ("K AE T", "K AA T", "B AE T"))
    cands = [Candidate("K AA T", kaat, -1.0, -6.0), Candidate("K AE T", kat, -2.0, -2.0),
             Candidate("B AE T", bat, -3.0, -4.0)]
    # weight 0.5: -3.5, -2.0, -3.5; K AE T first, the tie in list order; per token with EOS
    own = replace(row("w", ("T AE", -0.1), []), eos=False)  # cut at 2 tokens, no EOS
    assert pick(own, cands, 0.5, tgt_tok) == replace(
        own, hypothesis="K AE T", tokens=kat, pieces=["▁K", "▁AE", "▁T"], score=-2.0,
        norm_score=-0.5, length=3, eos=True,
        nbest=[{"hypothesis": "K AA T", "tokens": kaat, "score": -3.5, "norm_score": -0.875,
                "eos": True},
               {"hypothesis": "B AE T", "tokens": bat, "score": -3.5, "norm_score": -0.875,
                "eos": True}])
    assert pick(own, [], 0.5, tgt_tok) is own  # nothing scored: the model's own row


@pytest.mark.parametrize("weight", [0.0, 1.0])
def test_the_ends_of_the_weight_are_each_system_s_own_ranking(
        tgt_tok: Tokenizer, weight: float) -> None:
    model = tiny_model(vocab=tgt_tok.vocab_size)
    examples = [Example(str(i), str(i), "cat", "K AE T", [5, 6, 7 + i], [], True) for i in range(3)]
    base = {e.id: row(e.id, ("K AA T", -1.0), [("K AE T", -2.0), ("B AE T", -3.0)])
            for e in examples}
    model_rows = [row(e.id, ("T AE K", -0.1), []) for e in examples]
    out = rescore(model, examples, model_rows, base, tgt_tok, IDS, weight, batch_size=2)
    texts = ["K AA T", "K AE T", "B AE T", "T AE K"]
    for e, r in zip(examples, out, strict=True):
        logp = model_log_probs(model, [(e.src, tgt_tok.encode(t)) for t in texts], IDS, 8)
        want = "K AA T" if weight == 1.0 else texts[max(range(4), key=lambda i: logp[i])]
        assert r.hypothesis == want and r.eos and len(r.nbest) == 3
        assert r.tokens == tgt_tok.encode(want) and r.reference == "K AE T"
        scores = [r.score] + [h["score"] for h in r.nbest]
        assert scores == sorted(scores, reverse=True)


def test_rescoring_data_the_baseline_skipped_is_ignored_with_a_note(tmp_path) -> None:
    folder = tmp_path / "baseline"
    BaselineRecord("none", skipped="baseline.kind is auto and 3 of 3 train sources contain "
                   "whitespace").save(folder)
    rows, note = baseline_rows(config_from_dict({
        "task": "parallel", "data": {"source": "tsv", "path": "x.tsv"},
        "paths": {"raw": "data/raw/x.tsv", "baseline": str(folder)}}))
    assert rows is None and note == (
        "decode.rescore = 'baseline' is ignored: the baseline stage skipped this data "
        "(baseline.kind is auto and 3 of 3 train sources contain whitespace)")


def test_rescoring_without_a_baseline_is_refused_and_ignored_for_an_lm() -> None:
    with pytest.raises(ConfigError, match="decode.rescore = 'baseline': needs the baseline's"):
        task_checked(config_from_dict({"baseline": {"kind": "none"},
                                       "decode": {"rescore": "baseline"}}), "params")
    lm = config_from_dict({"task": "lm", "model": {"family": "gru"},
                           "decode": {"rescore": "baseline"}})
    assert ignored_settings(lm) == ["decode.rescore = 'baseline' is ignored: task lm decodes "
                                    "nothing"]
