"""Paired comparison of two systems (seqcore/metrics/comparison.py)."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from seqcore.artifacts.predictions import PredictionRow
from seqcore.metrics.bootstrap import METRICS, Resampling
from seqcore.metrics.comparison import (
    FAILURE_RATES, NotComparable, _rate, check_same_rows, compare_rows, paired_headline,
    rate_changes)
from seqcore.metrics.evaluation import EvalSpec
from seqcore.metrics.failures import KINDS, FailureRules
from seqcore.metrics.scores import ErrorStats
from tests.factories import row, spec

NO_RESAMPLES = Resampling(samples=0)
HEADLINE = set(METRICS) - {"perplexity"}  # predictions carry no teacher-forced NLL


def three_words() -> tuple[list[PredictionRow], list[PredictionRow]]:
    """A and B on two pronunciations of "either" (one group) and "cat"; B exact, reversed."""
    a = [row("1", "IY DH ER", "AY DH ER", "either"), row("2", "AY DH ER", "AY DH ER", "either"),
         row("3", "K AE T", "K AE", "cat")]
    b = [row("3", "K AE T", "K AE T", "cat"), row("2", "AY DH ER", "AY DH ER", "either"),
         row("1", "IY DH ER", "IY DH ER", "either")]
    return a, b


def test_rate_changes_are_the_paired_wer_and_per_in_percent_a_to_b() -> None:
    a, b = three_words()
    r = Resampling(200, 1, 0.95)
    wer, per = paired_headline(a, b, r, ("word_error_rate", "token_error_rate")).values()
    assert rate_changes(a, b, r) == [
        f"66.67 → 0.00 (-66.67 [{100 * wer.low:+.2f}, {100 * wer.high:+.2f}], "
        f"p {wer.p_bootstrap:.3f})",
        f"22.22 → 0.00 (-22.22 [{100 * per.low:+.2f}, {100 * per.high:+.2f}], "
        f"p {per.p_bootstrap:.3f})"]


def test_the_paired_headline_is_b_minus_a_of_each_metric_of_the_rows_by_hand() -> None:
    a, b = three_words()
    out = paired_headline(a, b, NO_RESAMPLES)
    assert set(out) == HEADLINE
    # A: row 2 exact; row 1 is its group's other reference; edits IY->AY (1), T deleted (1);
    # characters: I->A (1), " T" deleted (2) of 8 + 8 + 6
    want_a = {"word_error_rate": 2 / 3, "word_error_rate_multi_ref": 1 / 3,
              "exact_match": 1 / 3, "exact_match_multi_ref": 2 / 3, "token_error_rate": 2 / 9,
              "token_error_rate_multi_ref": 1 / 9, "char_error_rate": 3 / 22}
    want_b = dict.fromkeys(want_a, 0.0) | {"exact_match": 1.0, "exact_match_multi_ref": 1.0}
    for name, res in out.items():
        assert (res.a, res.b, res.delta) == pytest.approx(
            (want_a[name], want_b[name], want_b[name] - want_a[name])), name
        assert math.isnan(res.low) and math.isnan(res.p_randomization)
    assert set(paired_headline(a, b, NO_RESAMPLES, ("exact_match",))) == {"exact_match"}


def test_the_paired_headline_uses_the_statistics_it_is_given_and_pairs_b_by_row_id() -> None:
    a, b = three_words()
    # statistics that are not the rows': A exact nowhere, B exact on row 3 only (its first)
    given = ([ErrorStats(n=1)] * 3, [ErrorStats(n=1, exact=1), ErrorStats(n=1), ErrorStats(n=1)])
    out = paired_headline(a, b, NO_RESAMPLES, ("exact_match",), given)["exact_match"]
    assert (out.a, out.b) == pytest.approx((0.0, 1 / 3))
    # resampled: B in any order is paired row by row with A
    r = Resampling(samples=40, seed=3)
    assert paired_headline(a, b, r) == paired_headline(a, [b[2], b[1], b[0]], r)


def test_a_comparison_reports_the_headline_and_per_bucket_error_rates_and_ten_flips() -> None:
    # 13 words: 6 of three tokens, 7 of one; A right on word 0 only, B on all but word 0
    refs = ["K AE T"] * 6 + ["K"] * 7
    a = [row(f"{i:02d}", ref, ref if i == 0 else "D") for i, ref in enumerate(refs)]
    b = [row(f"{i:02d}", ref, "D" if i == 0 else ref) for i, ref in enumerate(refs)]
    out = compare_rows(a, b[::-1], spec(edges=(2,)), NO_RESAMPLES)
    assert set(out["headline"]) == HEADLINE
    assert [(x["bucket"], x["count"]) for x in out["buckets"]] == [("1-2", 7), (">2", 6)]
    for bucket, (wer_a, wer_b) in zip(out["buckets"], [(1.0, 0.0), (5 / 6, 1 / 6)]):
        assert set(bucket["metrics"]) == {"word_error_rate", "token_error_rate"}
        got = bucket["metrics"]["word_error_rate"]
        assert (got["a"], got["b"]) == pytest.approx((wer_a, wer_b))
    right_in_b = out["flips"]["right_in_b_wrong_in_a"]
    assert right_in_b["count"] == 12 and len(right_in_b["examples"]) == 10  # the default limit
    assert right_in_b["examples"][0] == {"id": "01", "source": "src01", "reference": "K AE T",
                                         "hypothesis_b": "K AE T", "hypothesis_a": "D"}
    assert out["flips"]["right_in_a_wrong_in_b"] == {"count": 1, "examples": [
        {"id": "00", "source": "src00", "reference": "K AE T", "hypothesis_a": "K AE T",
         "hypothesis_b": "D"}]}


def test_each_paired_failure_rate_is_the_rows_showing_it_over_all_rows() -> None:
    # A: one row of each kind (QQ is outside the target alphabet); B: every row exact
    a = [row("0", "K AE T", ""), row("1", "K AE T", "K AE", eos=False),
         row("2", "K AE T", "K K K"), row("3", "K AE T", "K QQ T"), row("4", "K AE T", "K AE T")]
    b = [row(x.id, "K AE T", "K AE T") for x in a]
    out = compare_rows(a, b, spec(illegal=lambda t: t == "QQ"), NO_RESAMPLES)["failures"]
    assert set(out) == set(KINDS)
    for kind in KINDS:
        assert (out[kind]["a"], out[kind]["b"], out[kind]["delta"]) == pytest.approx(
            (0.2, 0.0, -0.2)), kind


def test_a_failure_rate_is_its_column_over_the_row_count_and_nan_without_rows_silently() -> None:
    # called here, not only through FAILURE_RATES (built at import), so each rate's own code
    # runs inside the test; columns: rows, then one per kind
    s = np.array([[4, 2, 1, 0, 3], [8, 0, 8, 2, 4]], dtype=np.int64)
    want = [[0.5, 0.25, 0.0, 0.75], [0.0, 1.0, 0.25, 0.5]]
    for i, kind in enumerate(KINDS):
        assert _rate(1 + i)(s).tolist() == [w[i] for w in want]
        assert FAILURE_RATES[kind](s).tolist() == [w[i] for w in want]
    with warnings.catch_warnings(action="error"):  # numpy's invalid-value warning for 0 / 0
        assert all(math.isnan(float(_rate(1 + i)(np.zeros(5, dtype=np.int64))))
                   for i in range(len(KINDS)))


def test_the_refusal_names_each_side_s_count_and_only_an_existing_first_id() -> None:
    a = [row("1", "K", "K"), row("2", "K", "K")]
    with pytest.raises(NotComparable) as only_b:
        check_same_rows(a, a + [row("x", "K", "K")])
    assert str(only_b.value) == ("not the same evaluation set: 0 row id(s) only in A, "
                                 "1 only in B (first 'x')")
    with pytest.raises(NotComparable) as only_a:
        check_same_rows(a, a[:1])
    assert str(only_a.value) == ("not the same evaluation set: 1 row id(s) only in A "
                                 "(first '2'), 0 only in B")


def test_the_paired_failure_rates_have_their_known_values() -> None:
    # A: 4 words, 2 decoded empty, 1 truncated; B: none failing. Each rate is the failing
    # rows over all rows (column 0), and B - A is the paired difference.
    hyps = ["", "", "K AE", "K AE T"]
    a = [row(f"{i:05d}", "K AE T", h, f"w{i}", eos=i != 2) for i, h in enumerate(hyps)]
    b = [row(f"{i:05d}", "K AE T", "K AE T", f"w{i}") for i in range(4)]
    spec_ = EvalSpec((), FailureRules(2, 3, 1), "group", None, Resampling(0, 0, 0.95))
    failures = compare_rows(a, b, spec_, Resampling(0, 0, 0.95))["failures"]
    assert (failures["empty"]["a"], failures["empty"]["b"]) == (0.5, 0.0)
    assert (failures["truncated"]["a"], failures["truncated"]["b"]) == (0.25, 0.0)
    assert failures["empty"]["delta"] == -0.5 and failures["repeated"]["a"] == 0.0
