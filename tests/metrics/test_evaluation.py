"""The evaluation as a whole: recomputation from the predictions file alone, buckets, groups,
teacher-forced statistics, report and plots."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import pytest
import sacrebleu
import torch

from seqcore.artifacts.predictions import PredictionRow, Predictions
from seqcore.artifacts.train_log import StepLog, TrainLog
from seqcore.config import config_from_dict, flatten
from seqcore.data.examples import Example
from seqcore.g2p import ARPABET, is_illegal_phoneme
from seqcore.metrics.evaluation import (
    Evaluation, evaluate_predictions, failure_rate_table, hypothesis_unk_rate,
    length_edges, prediction_metrics, teacher_metrics)
from seqcore.metrics.failures import KINDS
from seqcore.metrics.recompute import eval_spec, recompute_metrics
from seqcore.metrics.report import render_report
from seqcore.metrics.teacher import TeacherStats, teacher_forced_stats
from seqcore.training.feeds import teacher_forced_nll
from tests.factories import IDS, STATS, g2p, make_rows, row, spec, tiny_model


# -- an independent, straightforward implementation ------------------------------------------
def align(a: Sequence[str], b: Sequence[str]) -> tuple[int, int]:
    """(fewest edits, most matches of a fewest-edit alignment) of a against b."""
    @lru_cache(maxsize=None)
    def d(i: int, j: int) -> tuple[int, int]:  # (edits, -matches) of a[:i] vs b[:j]
        if i == 0 or j == 0:
            return (i + j, 0)
        same = a[i - 1] == b[j - 1]
        return min((d(i - 1, j)[0] + 1, d(i - 1, j)[1]), (d(i, j - 1)[0] + 1, d(i, j - 1)[1]),
                   (d(i - 1, j - 1)[0] + (not same), d(i - 1, j - 1)[1] - same))
    return d(len(a), len(b))[0], -d(len(a), len(b))[1]


def looped(t: list[str], n: int, k: int) -> bool:
    return any(t[s : s + size * k] == t[s : s + size] * k
               for size in range(1, n + 1) for s in range(len(t) - size * k + 1))


def independent(rows: list[PredictionRow], n: int, k: int) -> dict:
    hyp = [r.hypothesis.split() for r in rows]
    ref = [r.reference.split() for r in rows]
    refs = {r.group: [x.reference.split() for x in rows if x.group == r.group] for r in rows}
    num = len(rows)
    unk = sum(p == "\x1f<unk>" for r in rows for p in r.pieces)
    fr = [(align(h + ["$"] * r.eos, f + ["$"])[1], len(f) + 1) for h, f, r in zip(hyp, ref, rows)]
    kinds = {"empty": [not h for h in hyp], "truncated": [not r.eos for r in rows],
             "repeated": [looped(h, n, k) for h in hyp],
             "illegal": [any(p.startswith("<") for p in r.pieces) or any(
                 t not in ARPABET for t in h) for r, h in zip(rows, hyp)]}
    closest = [min((align(h, c)[0], c != f, " ".join(c), len(c)) for c in refs[r.group])
               for h, f, r in zip(hyp, ref, rows)]  # fewest edits, then own, then text order
    rep = grams = 0
    for h, f in zip(hyp, ref):
        hg = [tuple(h[i : i + n]) for i in range(len(h) - n + 1)]
        fg = [tuple(f[i : i + n]) for i in range(len(f) - n + 1)]
        rep += sum(max(0, hg.count(g) - max(fg.count(g), 1)) for g in set(hg))
        grams += len(hg)
    ratios = [len(h) / max(len(f), 1) for h, f in zip(hyp, ref)]
    hyps_txt, refs_txt = [r.hypothesis for r in rows], [[r.reference for r in rows]]
    bleu, chrf, ter = (corpus(hyps_txt, refs_txt).score for corpus in (
        sacrebleu.corpus_bleu, sacrebleu.corpus_chrf, sacrebleu.corpus_ter))
    exact, v = sum(h == f for h, f in zip(hyp, ref)), sacrebleu.__version__
    return {
        "examples": num, "exact_match": exact / num, "word_error_rate": 1 - exact / num,
        "exact_match_multi_ref": sum(h in refs[r.group] for h, r in zip(hyp, rows)) / num,
        "token_error_rate": sum(align(h, f)[0] for h, f in zip(hyp, ref)) / sum(map(len, ref)),
        "token_error_rate_multi_ref": sum(c[0] for c in closest) / sum(c[3] for c in closest),
        "char_error_rate": sum(align(r.hypothesis, r.reference)[0] for r in rows)
        / sum(len(r.reference) for r in rows),
        "fr_token_accuracy": sum(m for m, _ in fr) / sum(t for _, t in fr),
        "fr_accuracy_tokens": sum(t for _, t in fr),
        "bleu": bleu, "chrf": chrf, "ter": ter,
        "bleu_signature": f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{v}",
        "chrf_signature": f"nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{v}",
        "ter_signature": f"nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:{v}",
        "failures": {kind: {"count": sum(v), "rate": sum(v) / num} for kind, v in kinds.items()}
        | {"repeated_ngrams": {"count": rep, "ngrams": grams, "rate": rep / grams}},
        "length_ratio": {"mean": sum(ratios) / num, "median": sorted(ratios)[num // 2],
                         "below_0.5": sum(x < 0.5 for x in ratios) / num,
                         "above_1.5": sum(x > 1.5 for x in ratios) / num},
        "hypothesis_unk": {"unk_tokens": unk, "tokens": sum(len(r.pieces) for r in rows),
                           "unk_rate": unk / sum(len(r.pieces) for r in rows),
                           "rows_with_unk": sum("\x1f<unk>" in r.pieces for r in rows)},
    }


def test_every_metric_is_recomputed_from_the_predictions_file_alone(tmp_path: Path) -> None:
    cfg, path = config_from_dict({}), tmp_path / "test.jsonl"
    Predictions(make_rows()).save(path)
    # through JSON, as metrics.json holds it
    got = flatten(json.loads(json.dumps(recompute_metrics(path, cfg, is_illegal_phoneme))))
    want = flatten(independent(make_rows(), cfg.evaluate.repeat_ngram, cfg.evaluate.repeat_times))
    assert set(got) == set(want)  # a new metric needs its independent recomputation here
    for key, value in want.items():
        assert got[key] == (pytest.approx(value) if isinstance(value, float) else value), key


def test_hand_checked_figures_of_the_fixture() -> None:
    m = prediction_metrics(evaluate_predictions(make_rows(), g2p()))
    assert m["exact_match"] == pytest.approx(2 / 9)  # rows 2 and 3
    assert m["exact_match_multi_ref"] == pytest.approx(3 / 9)  # row 1 matches its variant
    assert m["failures"]["truncated"]["count"] == 1 and m["failures"]["empty"]["count"] == 1
    assert m["failures"]["repeated"]["count"] == 2  # rows 5 (AH B x4) and 9 (K K K)
    assert m["failures"]["illegal"]["count"] == 2  # <unk> piece (row 6), QQ (row 7)


def test_bucket_counts_add_up_and_each_bucket_is_scored_on_its_own_rows() -> None:
    ev = evaluate_predictions(make_rows(), g2p({"bucket_edges": [4, 6, 8, 10]}))
    assert [b["bucket"] for b in ev.buckets] == ["1-4", ">10"]
    assert [b["count"] for b in ev.buckets] == [8, 1]
    assert ev.buckets[0]["exact_match"] == pytest.approx(2 / 8)
    assert ev.buckets[1]["token_error_rate"] == pytest.approx(3 / 11)  # 3 deletions of 11


def test_group_table_only_when_asked_and_one_row_per_group() -> None:
    rows = make_rows()
    assert evaluate_predictions(rows, g2p()).groups == []
    ev = evaluate_predictions(rows, g2p({"group_by": "group"}))
    either = next(g for g in ev.groups if g["group"] == "either")
    assert len(ev.groups) == len({r.group for r in rows})
    assert (either["count"], either["exact_match"], either["exact_match_multi_ref"]) == (2, 0.5, 1)


def test_teacher_forced_stats_sum_to_the_training_nll_and_do_not_depend_on_batching() -> None:
    model = tiny_model(vocab=12, tgt_vocab=10, enc_layers=1, dec_layers=1, max_len=16)
    g = torch.Generator().manual_seed(3)
    examples = [Example(str(i), "g", "s", "t", torch.randint(4, 12, (2 + i,), generator=g)
                        .tolist(), torch.randint(4, 10, (1 + i % 4,), generator=g).tolist(),
                        True) for i in range(6)]
    stats = teacher_forced_stats(model, examples, IDS, batch_size=4)
    total, count = teacher_forced_nll(model, examples, IDS, 4)
    assert sum(s.nll for s in stats.values()) == pytest.approx(total, rel=1e-5)
    assert sum(s.tokens for s in stats.values()) == count == sum(len(e.tgt) + 1 for e in examples)
    for ex in examples:  # one at a time: no padding; argmax hits counted by hand
        one = stats[ex.id]
        with torch.no_grad():
            logits = model(torch.tensor([ex.src]), torch.ones(1, len(ex.src), dtype=bool),
                                torch.tensor([[IDS.bos] + ex.tgt]))[0]
        labels = torch.tensor(ex.tgt + [IDS.eos])
        assert one.correct == int((logits.argmax(-1) == labels).sum())
        assert one.nll == pytest.approx(float(torch.nn.functional.cross_entropy(
            logits, labels, reduction="sum")), rel=1e-5)


def test_exposure_bias_gap_is_teacher_forced_minus_free_running_accuracy() -> None:
    rows = make_rows()
    teacher = {r.id: TeacherStats(nll=1.0, tokens=len(r.reference.split()) + 1,
                                  correct=len(r.reference.split()) + 1) for r in rows}
    ev = evaluate_predictions(rows, g2p(), teacher)
    assert ev.headline["tf_token_accuracy"] == 1.0
    assert ev.headline["exposure_bias_gap"] == pytest.approx(1 - ev.headline["fr_token_accuracy"])
    for b in ev.buckets:
        assert b["exposure_bias_gap"] == pytest.approx(1 - b["fr_token_accuracy"])
        assert b["perplexity"] == pytest.approx(math.exp(b["count"] / b["ppl_denominator_tokens"]))


@pytest.mark.parametrize(("lengths", "edges"), [
    (list(range(1, 11)), (2, 4, 6, 8)),  # ten lengths: 2 per quintile
    ([3, 3, 3], ()),  # one length: one bucket ("all")
    ([1] * 90 + [20] * 10, (1,)),  # ties: each edge once, none at the longest
    ([5] * 59 + [12] * 41, (5,)),
    ([], ()),
    # ceil(L k / 5) - 1 for k = 1..4 indexes the sorted lengths; edges below the longest
    pytest.param([4], (), id="one_two_or_four_references-one"),  # one bucket
    pytest.param([1, 2], (1,), id="one_two_or_four_references-two"),  # the shorter is an edge
    pytest.param([2, 3, 3, 7], (2, 3), id="one_two_or_four_references-four"),  # second longest
])
def test_auto_bucket_edges_are_the_length_quintiles_below_the_longest(
        lengths: list[int], edges: tuple[int, ...]) -> None:
    assert length_edges(lengths) == edges


def test_auto_buckets_fit_the_data_where_fixed_edges_put_most_rows_in_one() -> None:
    # A lexicon of long targets (the issue's: 59 % of test words above 10 symbols).
    rows = [PredictionRow(f"r{n}", f"g{n}", "w", " ".join(["AA"] * n), "AA", [0], ["AA"],
                          -1.0, -1.0, 1, True, []) for n in range(6, 26)]
    fixed, auto = (evaluate_predictions(rows, eval_spec(config_from_dict(params), None))
                   for params in ({"evaluate": {"bucket_edges": [4, 6, 8, 10]}}, {}))
    assert max(b["count"] for b in fixed.buckets) == 15  # >10
    assert [b["bucket"] for b in auto.buckets] == ["1-9", "10-13", "14-17", "18-21", ">21"]
    assert [b["count"] for b in auto.buckets] == [4, 4, 4, 4, 4]
    assert sum(b["count"] for b in auto.buckets) == len(rows)


def test_report_shows_headline_buckets_failures_with_examples_and_settings() -> None:
    ev = evaluate_predictions(make_rows(), g2p({"bucket_edges": [4, 6, 8, 10]}))
    metrics = {"split": "test", "signature": "task:g2p|data:abc|version:1"} | prediction_metrics(ev)
    text = render_report(metrics, ev, {"strategy": "greedy", "max_len": 32},
                         g2p().rules.describe(), {"t": "x.png"}, [])
    for needle in ("## Headline", "## By reference length", "| 1-4 | 8 |", "## Failure modes",
                   "`src4` → `∅` (`D AO G`)", "\"strategy\": \"greedy\"", "| data | abc |",
                   "3 times back to back", "![t](x.png)"):
        assert needle in text, needle


def test_plots_are_png_files_and_the_same_data_gives_the_same_bytes(tmp_path: Path) -> None:
    from seqcore.metrics import plots  # noqa: PLC0415 (matplotlib only where plots are drawn)

    ev = evaluate_predictions(make_rows(), g2p())
    log = tmp_path / "log.csv"
    TrainLog((StepLog(1, 0, 1e-3, 3.0, 10, 1.0, 0, math.nan, 0.0),
              StepLog(2, 0, 1e-3, 2.0, 10, 1.0, 0, 2.5, 0.0))).save(log)
    for name in ("a", "b"):
        plots.training_curve_png(log, tmp_path / name / "curve.png")
        plots.bucket_png(ev.buckets, tmp_path / name / "buckets.png")
        plots.failure_png(failure_rate_table(ev), tmp_path / name / "failures.png")
    for png in ("curve.png", "buckets.png", "failures.png"):
        data = (tmp_path / "a" / png).read_bytes()
        assert data.startswith(b"\x89PNG") and data == (tmp_path / "b" / png).read_bytes()


def test_bucket_rows_hold_sacrebleu_scores_and_teacher_columns_and_group_rows_no_corpus_scores(
        ) -> None:
    rows = make_rows()  # references of 1 to 4 tokens, and one of 11 (id 8)
    # half a nat per label (reference tokens + EOS), the first label right
    teacher = {r.id: TeacherStats(0.5 * (len(r.reference.split()) + 1),
                                  len(r.reference.split()) + 1, 1) for r in rows}
    ev = evaluate_predictions(rows, spec(edges=(4,), group_by="group"), teacher)
    scores = {"exact_match", "exact_match_multi_ref", "word_error_rate", "token_error_rate",
              "token_error_rate_multi_ref", "char_error_rate", "fr_token_accuracy"}
    forced = {"tf_token_accuracy", "exposure_bias_gap", "token_nll", "perplexity",
              "ppl_denominator_tokens"}
    for bucket, ids in zip(ev.buckets, [[r.id for r in rows if r.id != "8"], ["8"]]):
        mine = [r for r in rows if r.id in ids]
        assert set(bucket) == {"bucket", "count", "bleu", "chrf", "ter"} | scores | forced
        hyps, refs = [r.hypothesis for r in mine], [[r.reference for r in mine]]
        assert bucket["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, refs).score)
        assert bucket["ter"] == pytest.approx(sacrebleu.corpus_ter(hyps, refs).score)
        tokens = sum(len(r.reference.split()) + 1 for r in mine)
        assert bucket["ppl_denominator_tokens"] == tokens
        assert bucket["token_nll"] == pytest.approx(0.5)
        assert bucket["tf_token_accuracy"] == pytest.approx(len(mine) / tokens)
    assert all(set(g) == {"group", "count"} | scores | forced for g in ev.groups)
    assert ev.headline["tf_accuracy_tokens"] == sum(len(r.reference.split()) + 1 for r in rows)


def test_an_evaluation_keeps_each_row_s_statistics_in_row_order() -> None:
    rows = make_rows()
    stats = evaluate_predictions(rows, spec()).stats
    assert [s.n for s in stats] == [1] * 9
    assert [s.exact for s in stats] == [0, 1, 1, 0, 0, 0, 0, 0, 0]
    assert [s.exact_multi for s in stats] == [1, 1, 1, 0, 0, 0, 0, 0, 0]  # "either" twice
    assert [s.ref_tokens for s in stats] == [3, 3, 3, 3, 4, 4, 3, 11, 1]


def test_hypotheses_without_tokens_have_an_unk_rate_of_0_as_the_coverage_counts_do() -> None:
    # UnkStats.rate's rule: no token, nothing uncovered
    out = hypothesis_unk_rate([row("1", "K", ""), row("2", "K AE", "")])
    assert out == {"unk_tokens": 0, "tokens": 0, "unk_rate": 0.0, "rows_with_unk": 0}


# --- the teacher-forced summary and metrics.json's model part -------------------------------
def test_teacher_metrics_prefix_each_split_s_summary_and_copy_the_decoded_split_s_gap() -> None:
    dev, test = STATS[:1], STATS[1:]
    with_gap = Evaluation({"tf_token_accuracy": 0.75, "tf_accuracy_tokens": 4,
                           "exposure_bias_gap": 0.25, "word_error_rate": 0.5}, [], [], {})
    out = teacher_metrics({"dev": dev, "test": test}, with_gap)
    assert out == pytest.approx({
        "dev_token_nll": 0.5, "dev_perplexity": math.exp(0.5), "dev_ppl_denominator_tokens": 4,
        "dev_sequence_mean_nll": 0.5, "dev_sequences": 1, "dev_tf_token_accuracy": 0.75,
        "test_token_nll": 1.5, "test_perplexity": math.exp(1.5),
        "test_ppl_denominator_tokens": 2, "test_sequence_mean_nll": 1.5, "test_sequences": 1,
        "test_tf_token_accuracy": 0.5,
        "tf_token_accuracy": 0.75, "tf_accuracy_tokens": 4, "exposure_bias_gap": 0.25})
    without = Evaluation({"word_error_rate": 0.5}, [], [], {})
    assert set(teacher_metrics({"dev": dev}, without)) == {
        "dev_token_nll", "dev_perplexity", "dev_ppl_denominator_tokens",
        "dev_sequence_mean_nll", "dev_sequences", "dev_tf_token_accuracy"}


def test_the_failure_rate_plot_has_a_row_per_kind_then_repeats_and_length_ratio_tails() -> None:
    failures = {k: {"count": i, "rate": i / 10, "examples": []} for i, k in enumerate(KINDS)}
    failures["repeated_ngrams"] = {"count": 7, "ngrams": 20, "rate": 0.35}
    failures["length_ratio"] = {"mean": 1.0, "median": 1.0, "below_0.5": 0.1, "above_1.5": 0.2}
    assert failure_rate_table(Evaluation({}, [], [], failures)) == [
        {"mode": m, "count": c, "rate": r} for m, c, r in [
            ("empty", 0, 0.0), ("truncated", 1, 0.1), ("repeated", 2, 0.2), ("illegal", 3, 0.3),
            ("repeated_ngrams", 7, 0.35), ("length_ratio<0.5", "", 0.1),
            ("length_ratio>1.5", "", 0.2)]]
