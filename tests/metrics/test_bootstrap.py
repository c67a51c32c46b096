"""Intervals and paired significance (seqcore.metrics.bootstrap; issue 27): known answers,
group resampling, determinism; the lm task's perplexity intervals over documents."""
from __future__ import annotations

import json
import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from seqcore.artifacts.base import json_text
from seqcore.metrics.bootstrap import (
    COLUMNS, METRICS, NANO, Resampling, document_interval, group_sums, intervals, nll_matrix,
    paired, resample_counts, row_matrix)
from seqcore.metrics.evaluation import evaluate_predictions
from seqcore.metrics.scores import error_stats
from seqcore.metrics.teacher import TeacherStats
from seqcore.nulls import null_undefined
from tests.factories import g2p, make_rows

R = Resampling(1000, 12345, 0.95)


def system(right: list[bool]) -> np.ndarray:
    """Per-group sums of a system that is right (exact) on word i when right[i]."""
    stats = [error_stats("A B" if ok else "A C", "A B") for ok in right]
    return group_sums(row_matrix(stats), [f"w{i:05d}" for i in range(len(right))])


def percentile(values: list[float], q: float) -> float:
    """numpy's default (linear) percentile, by hand."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    return ordered[lo] + (ordered[min(lo + 1, len(ordered) - 1)] - ordered[lo]) * (pos - lo)


def test_two_identical_systems_differ_by_zero_with_p_one() -> None:
    a = system(list(np.random.default_rng(0).random(500) < 0.7))
    res = paired(a, a.copy(), R)
    for name in ("word_error_rate", "token_error_rate", "char_error_rate", "exact_match"):
        r = res[name]
        assert (r.delta, r.low, r.high, r.p_bootstrap, r.p_randomization) == (0, 0, 0, 1, 1), name


def test_a_system_right_on_60_percent_more_of_2000_words_is_significant() -> None:
    a = system([i < 1000 for i in range(2000)])  # right on 1,000 words
    b = system([i < 1600 for i in range(2000)])  # right on 1,600: 60 % more
    r = paired(a, b, R)["word_error_rate"]
    assert r.a == 0.5 and r.b == pytest.approx(0.2) and r.delta == pytest.approx(-0.3)
    assert r.high < 0 and r.p_bootstrap < 0.001 and r.p_randomization < 0.001
    assert r.p_bootstrap == r.p_randomization == 1 / 1001  # the +1 correction: never 0


def test_a_small_difference_on_few_words_is_not_significant() -> None:
    a = system([i % 10 < 7 for i in range(100)])
    b = system([i % 10 < 7 or i == 99 for i in range(100)])  # one more word right
    r = paired(a, b, R)["word_error_rate"]
    assert r.delta == pytest.approx(-0.01) and r.p_bootstrap > 0.2 and r.p_randomization > 0.2
    assert r.low < 0 <= r.high  # zero is inside: B is never worse, but not surely better


def test_the_interval_matches_a_hand_computation_with_the_same_seed() -> None:
    right = [True, False, True, True, False]  # 5 words, WER 0.4
    r = Resampling(7, 3, 0.5)
    got = intervals(system(right), r, ["word_error_rate"])["word_error_rate"]
    # By hand: draw each resample's word counts from the same generator, expand the words,
    # count the errors, then the 25th/75th percentiles by linear interpolation.
    counts = np.random.Generator(np.random.PCG64(3)).multinomial(5, [0.2] * 5, size=7)
    wers = [sum(c for c, ok in zip(row, right) if not ok) / 5 for row in counts]
    assert got == {"low": pytest.approx(percentile(wers, 0.25)),
                   "high": pytest.approx(percentile(wers, 0.75))}
    assert counts.sum(1).tolist() == [5] * 7 and (resample_counts(5, r) == counts).all()


def test_resampling_words_gives_a_wider_interval_than_resampling_rows() -> None:
    # 300 words of 3 pronunciations each, right or wrong together: a word's rows are one
    # trial, not three; resampling rows understates the uncertainty.
    right = list(np.random.default_rng(1).random(300) < 0.6)
    m = row_matrix([error_stats("A B" if ok else "A C", "A B") for ok in right for _ in range(3)])
    by_word = intervals(group_sums(m, [f"w{i // 3}" for i in range(900)]), R)
    by_row = intervals(group_sums(m, [f"r{i:04d}" for i in range(900)]), R)
    width = {k: v["high"] - v["low"] for k, v in (("word", by_word["word_error_rate"]),
                                                   ("row", by_row["word_error_rate"]))}
    assert width["word"] > 1.4 * width["row"], width  # about sqrt(3) wider


def test_the_same_seed_gives_the_same_numbers_another_seed_only_monte_carlo_noise() -> None:
    sums = system(list(np.random.default_rng(2).random(2000) < 0.7))
    first, again = intervals(sums, R), intervals(sums, R)
    assert first == again
    other = intervals(sums, Resampling(1000, 999, 0.95))
    assert other != first
    for name in ("word_error_rate", "exact_match"):
        assert abs(other[name]["low"] - first[name]["low"]) < 0.01, name
        assert abs(other[name]["high"] - first[name]["high"]) < 0.01, name


def test_every_headline_interval_holds_its_point_estimate_perplexity_included() -> None:
    rows = make_rows()
    teacher = {r.id: TeacherStats(nll=1.0 + i % 3, tokens=3, correct=1) for i, r in enumerate(rows)}
    spec, off = (g2p({"bootstrap_samples": n}) for n in (200, 0))
    ev = evaluate_predictions(rows, spec, teacher)
    assert set(ev.intervals) == {"word_error_rate", "word_error_rate_multi_ref", "exact_match",
                                 "exact_match_multi_ref", "token_error_rate",
                                 "token_error_rate_multi_ref", "char_error_rate", "perplexity"}
    point = dict(ev.headline, word_error_rate_multi_ref=1 - ev.headline["exact_match_multi_ref"],
                 perplexity=math.exp(sum(t.nll for t in teacher.values())
                                     / sum(t.tokens for t in teacher.values())))
    for name, bounds in ev.intervals.items():
        assert bounds["low"] <= point[name] <= bounds["high"], (name, bounds, point[name])
    assert evaluate_predictions(rows, off, teacher).intervals == {}
    assert "perplexity" not in evaluate_predictions(rows, spec).intervals  # no teacher: none


def test_resampled_sums_are_exact_integers_nll_in_nano_nats() -> None:
    m = row_matrix([error_stats("A", "A")] * 2, [(0.1, 2), (0.2, 3)])
    assert m.dtype == np.int64 and m[:, COLUMNS.index("nll_nano")].tolist() == [
        100_000_000, 200_000_000]
    assert R.signature("group") == "ci:95|bs:1000|rs:12345|by:group"


# -- the lm task: perplexity intervals over documents --------------------------------------------
def test_the_document_interval_of_perplexity_matches_a_hand_computation_with_the_same_seed(
) -> None:
    docs = [(2.0, 4), (9.0, 3), (1.5, 5)]  # (NLL in nats, tokens) of three documents
    got = document_interval(docs, Resampling(7, 3, 0.5))
    # By hand: each resample draws the three documents with the generator's counts; its
    # perplexity is exp(sum of the drawn documents' NLL / sum of their tokens).
    counts = np.random.Generator(np.random.PCG64(3)).multinomial(3, [1 / 3] * 3, size=7)
    ppl = [math.exp(sum(c * n for c, (n, _) in zip(row, docs))
                    / sum(c * t for c, (_, t) in zip(row, docs))) for row in counts]
    assert got == {"low": pytest.approx(percentile(ppl, 0.25), rel=1e-12),
                   "high": pytest.approx(percentile(ppl, 0.75), rel=1e-12)}
    assert len(set(ppl)) > 2  # the draws differ: a real test of the percentiles
    assert nll_matrix(docs)[:, COLUMNS.index("nll_nano")].tolist() == [
        2_000_000_000, 9_000_000_000, 1_500_000_000]


def test_resampling_documents_gives_a_wider_interval_than_resampling_tokens() -> None:
    # 40 documents of 50 tokens: one at 4 nats per token, the rest at 1. A document's tokens
    # share its text and carried state (here: perfectly correlated), so it is one trial, not
    # 50; resampling tokens as if independent understates the uncertainty about 7-fold.
    docs = [(4.0 * 50 if d == 0 else 1.0 * 50, 50) for d in range(40)]
    by_doc = document_interval(docs, R)
    tokens = [(n / t, 1) for n, t in docs for _ in range(t)]
    by_token = intervals(group_sums(nll_matrix(tokens), [f"t{i:05d}" for i in range(2000)]),
                         R, ["perplexity"])["perplexity"]
    point = math.exp(sum(n for n, _ in docs) / sum(t for _, t in docs))
    for b in (by_doc, by_token):
        assert b["low"] <= point <= b["high"], (b, point)
    width = {k: b["high"] - b["low"] for k, b in (("document", by_doc), ("token", by_token))}
    assert width["document"] > 3 * width["token"], width


def test_the_document_interval_is_the_same_bytes_for_the_same_seed() -> None:
    rng = np.random.default_rng(3)
    docs = [(float(rng.uniform(10, 90)), int(rng.integers(20, 60))) for _ in range(30)]
    first = json.dumps(document_interval(docs, R))
    assert json.dumps(document_interval(docs, R)) == first
    assert json.dumps(document_interval(docs, Resampling(1000, 999, 0.95))) != first


def test_no_documents_give_null_bounds_and_one_document_a_degenerate_interval() -> None:
    none = document_interval([], R)
    assert math.isnan(none["low"]) and math.isnan(none["high"])
    written = json.loads(json_text(null_undefined({"interval": {"dev_ppl_carried": none}})))
    bounds = written["interval"]["dev_ppl_carried"]
    assert bounds["low"] is None and bounds["high"] is None and bounds["low_null_reason"]
    one = document_interval([(6.0, 4)], R)
    assert one["low"] == one["high"] == pytest.approx(math.exp(6.0 / 4), rel=1e-12)
    assert math.isnan(document_interval([(6.0, 4)], Resampling(0, 1, 0.95))["low"])
    inf = document_interval([(math.inf, 4), (1.0, 2)], R)  # the perplexity is undefined too
    assert math.isnan(inf["low"]) and math.isnan(inf["high"])
    assert Resampling().signature("document") == "ci:95|bs:1000|rs:12345|by:document"


# -- the metrics of summed statistics, and paired comparisons' edges (issue 32) -----------------
def summed(**values: int) -> np.ndarray:
    """One row of summed statistics (COLUMNS), zero where not given."""
    return np.array([values.get(c, 0) for c in COLUMNS], dtype=np.int64)


def test_each_headline_metric_of_summed_statistics_has_its_known_value() -> None:
    s = summed(n=4, exact=1, exact_multi=2, token_edits=3, ref_tokens=10, token_edits_multi=2,
               ref_tokens_multi=10, char_edits=5, ref_chars=20,
               nll_nano=round(5 * math.log(2) * NANO), nll_tokens=5)
    got = {name: float(f(s)) for name, f in METRICS.items()}
    assert got == pytest.approx({
        "word_error_rate": 0.75, "word_error_rate_multi_ref": 0.5, "exact_match": 0.25,
        "exact_match_multi_ref": 0.5, "token_error_rate": 0.3, "token_error_rate_multi_ref": 0.2,
        "char_error_rate": 0.25, "perplexity": 2.0}, rel=1e-9)


def test_metrics_of_no_rows_are_nan_and_an_overflowing_perplexity_is_inf_without_warnings() -> None:
    with warnings.catch_warnings(action="error"):  # numpy's divide, invalid and overflow warnings
        assert all(math.isnan(float(f(summed()))) for f in METRICS.values())
        assert math.isinf(float(METRICS["perplexity"](summed(nll_nano=10**6 * NANO, nll_tokens=1))))
        assert math.isinf(float(METRICS["token_error_rate"](summed(token_edits=3))))
        assert math.isinf(float(METRICS["perplexity"](summed(nll_nano=5))))  # 5 / 0 tokens


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
    swaps = np.random.Generator(np.random.PCG64(8)).integers(0, 2, size=(300, 4))
    wer = METRICS["word_error_rate"]
    extreme = sum(abs(float(wer((B4 - (B4 - A4) * s[:, None]).sum(0)))
                      - float(wer((A4 + (B4 - A4) * s[:, None]).sum(0)))) >= 0.5 - 1e-12
                  for s in swaps)
    out = paired(A4, B4, Resampling(samples=300, seed=7), ["word_error_rate"])
    assert set(out) == {"word_error_rate"}  # the metrics asked for, no others
    assert out["word_error_rate"].delta == -0.5
    assert out["word_error_rate"].p_randomization == (1 + extreme) / 301
    assert 0.5 < (1 + extreme) / 301 < 0.8  # the cancelling swaps are not as extreme (10/16)


def test_rows_without_teacher_forced_statistics_have_no_perplexity() -> None:
    m = row_matrix([SimpleNamespace(**{c: 1 for c in COLUMNS[:9]})] * 2)
    assert m.dtype == np.int64 and m[:, 9:].tolist() == [[0, 0], [0, 0]]
    assert math.isnan(float(METRICS["perplexity"](m.sum(0))))
    sums = group_sums(m, ["b", "a"])
    assert sums.dtype == np.int64 and sums.tolist() == [list(m[1]), list(m[0])]


def test_one_resample_gives_an_interval_of_that_resample() -> None:
    out = intervals(A, Resampling(samples=1, seed=3), ["word_error_rate"])["word_error_rate"]
    assert out["low"] == out["high"] and 0 <= out["low"] <= 1
