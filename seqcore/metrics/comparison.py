"""Two results on the same evaluation set, compared as compare-mt and sacreBLEU do: each
headline metric's difference with its paired-bootstrap interval and p-values, the same per
reference-length bucket and per failure mode, and the examples that flipped.

The pipeline's ``python -m pipeline.compare A B`` finds the two predictions files; everything
here works on their rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np

from seqcore.artifacts.predictions import PredictionRow
from seqcore.metrics.bootstrap import (
    METRICS, PairedResult, Resampling, group_sums, paired, row_matrix)
from seqcore.metrics.evaluation import (
    EvalSpec, bucket_index, bucket_label, resolved_edges, row_stats)
from seqcore.metrics.failures import KINDS, failure_kinds
from seqcore.metrics.scores import ErrorStats


class NotComparable(ValueError):
    """The two results are not on the same evaluation set (the message says how)."""


def check_same_rows(a: list[PredictionRow], b: list[PredictionRow]) -> None:
    """Stop unless A and B hold the same row ids with the same sources and references."""
    ids_a, ids_b = {r.id: r for r in a}, {r.id: r for r in b}
    only_a, only_b = sorted(set(ids_a) - set(ids_b)), sorted(set(ids_b) - set(ids_a))
    if only_a or only_b:
        raise NotComparable(
            f"not the same evaluation set: {len(only_a)} row id(s) only in A"
            + (f" (first {only_a[0]!r})" if only_a else "") + f", {len(only_b)} only in B"
            + (f" (first {only_b[0]!r})" if only_b else ""))
    for rid, ra in ids_a.items():
        rb = ids_b[rid]
        if (ra.source, ra.reference, ra.group) != (rb.source, rb.reference, rb.group):
            raise NotComparable(f"not the same evaluation set: row {rid!r} has source "
                                f"{ra.source!r} / reference {ra.reference!r} in A, "
                                f"{rb.source!r} / {rb.reference!r} in B")


def _rate(column: int) -> Callable[[np.ndarray], np.ndarray]:
    def f(s: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return s[..., column] / s[..., 0]
    return f


#: Failure-mode rates: column 0 counts rows, column 1 + i rows showing KINDS[i].
FAILURE_RATES = {kind: _rate(1 + i) for i, kind in enumerate(KINDS)}


def _failure_matrix(rows: list[PredictionRow], spec: EvalSpec) -> np.ndarray:
    m = np.zeros((len(rows), 1 + len(KINDS)), dtype=np.int64)
    m[:, 0] = 1
    for i, r in enumerate(rows):
        found = failure_kinds(r, spec.rules, spec.illegal)
        for k, kind in enumerate(KINDS):
            m[i, 1 + k] = kind in found
    return m


def _flips(a: list[PredictionRow], b: list[PredictionRow], limit: int) -> dict[str, Any]:
    """Rows exact in one system and not in the other (compare-mt's example listing)."""
    out: dict[str, Any] = {}
    for name, (x, y) in {"right_in_a_wrong_in_b": (a, b), "right_in_b_wrong_in_a": (b, a)}.items():
        rows = [(rx, ry) for rx, ry in zip(x, y, strict=True)
                if rx.hypothesis.split() == rx.reference.split()
                and ry.hypothesis.split() != ry.reference.split()]
        first, second = ("a", "b") if name.startswith("right_in_a") else ("b", "a")
        out[name] = {"count": len(rows), "examples": [
            {"id": rx.id, "source": rx.source, "reference": rx.reference,
             f"hypothesis_{first}": rx.hypothesis, f"hypothesis_{second}": ry.hypothesis}
            for rx, ry in rows[:limit]]}
    return out


def _as_dicts(results: dict[str, PairedResult]) -> dict[str, dict[str, float]]:
    return {k: asdict(v) for k, v in results.items()}


def paired_headline(a: list[PredictionRow], b: list[PredictionRow], r: Resampling,
                    names: tuple[str, ...] = tuple(k for k in METRICS if k != "perplexity"),
                    stats: tuple[list[ErrorStats], list[ErrorStats]] | None = None
                    ) -> dict[str, PairedResult]:
    """B - A for each headline metric in ``names``, paired by row id (B taken in A's order),
    with its bootstrap interval and p-values; groups are resampled together. ``stats``: the
    rows' statistics already computed (``Evaluation.stats`` of A and B, in their row order).

    Raises:
        NotComparable: A and B are not the same rows.
    """
    check_same_rows(a, b)
    stats_a, stats_b = stats or (row_stats(a), row_stats(b))
    position = {x.id: i for i, x in enumerate(b)}
    stats_b = [stats_b[position[x.id]] for x in a]  # B in A's row order
    groups = [x.group for x in a]
    return paired(group_sums(row_matrix(stats_a), groups),
                  group_sums(row_matrix(stats_b), groups), r, list(names))


def rate_changes(a: list[PredictionRow], b: list[PredictionRow], r: Resampling) -> list[str]:
    """WER and PER (first reference) of A -> B in percent, each with B - A's paired interval
    and bootstrap p-value: one table cell each (the dev comparisons of tools/)."""
    return [f"{100 * x.a:.2f} → {100 * x.b:.2f} ({100 * x.delta:+.2f} [{100 * x.low:+.2f}, "
            f"{100 * x.high:+.2f}], p {x.p_bootstrap:.3f})"
            for x in paired_headline(a, b, r, ("word_error_rate", "token_error_rate")).values()]


def compare_rows(a: list[PredictionRow], b: list[PredictionRow], spec: EvalSpec,
                 r: Resampling, examples: int = 10) -> dict[str, Any]:
    """The comparison of B against A (differences are B - A).

    Returns ``{"headline": {metric: {a, b, delta, low, high, p_bootstrap, p_randomization}},
    "buckets": [{"bucket", "count", "metrics": {...}}], "failures": {...}, "flips": {...},
    "resampling": signature}``. Groups (all references of a word) are resampled together.
    """
    check_same_rows(a, b)
    by_id = {x.id: x for x in b}
    b = [by_id[x.id] for x in a]  # B in A's row order
    groups = [x.group for x in a]
    names = [k for k in METRICS if k != "perplexity"]  # predictions carry no teacher NLL
    mat_a, mat_b = row_matrix(row_stats(a)), row_matrix(row_stats(b))
    out: dict[str, Any] = {
        "rows": len(a), "groups": len(set(groups)), "resampling": r.signature("group"),
        "headline": _as_dicts(paired(group_sums(mat_a, groups), group_sums(mat_b, groups), r,
                                     names))}
    by_bucket: dict[int, list[int]] = {}
    edges = resolved_edges(spec.edges, a)
    for i, x in enumerate(a):
        by_bucket.setdefault(bucket_index(len(x.reference.split()), edges), []).append(i)
    out["buckets"] = []
    for bucket, index in sorted(by_bucket.items()):
        sub = [groups[i] for i in index]
        res = paired(group_sums(mat_a[index], sub), group_sums(mat_b[index], sub), r,
                     ["word_error_rate", "token_error_rate"])
        out["buckets"].append({"bucket": bucket_label(bucket, edges), "count": len(index),
                               "metrics": _as_dicts(res)})
    fail_a, fail_b = _failure_matrix(a, spec), _failure_matrix(b, spec)
    out["failures"] = _as_dicts(paired(group_sums(fail_a, groups), group_sums(fail_b, groups),
                                       r, functions=FAILURE_RATES))
    out["flips"] = _flips(a, b, examples)
    return out


def _fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def _row(label: str, m: dict[str, float]) -> str:
    return (f"| {label} | {_fmt(m['a'])} | {_fmt(m['b'])} | {_fmt(m['delta'])} | "
            f"[{_fmt(m['low'])}, {_fmt(m['high'])}] | {_fmt(m['p_bootstrap'])} | "
            f"{_fmt(m['p_randomization'])} |")


def render(out: dict[str, Any], confidence: float) -> str:
    """A comparison (``compare_rows``'s output with ``a`` and ``b``: name and origin of each
    side) as Markdown."""
    a, b = out["a"], out["b"]
    head = (f"| metric | A | B | B - A | {confidence * 100:g} % interval | p (bootstrap) | "
            "p (randomization) |")
    rule = "|---|---|---|---|---|---|---|"
    lines = [f"# {b['name']} (B) against {a['name']} (A)", "",
             f"- A: {a['origin']}", f"- B: {b['origin']}", "",
             f"{out['rows']} rows in {out['groups']} groups; differences are B - A; "
             f"resampling `{out['resampling']}` (groups move together); approximate "
             "randomization: as many trials, each group's A and B swapped with probability "
             "1/2. A p-value below 0.05 says the difference is unlikely to be noise.", "",
             head, rule]
    lines += [_row(k, m) for k, m in out["headline"].items()]
    lines += ["", "## By reference length", "", head.replace("| metric |", "| bucket, metric |"),
              rule]
    for bucket in out["buckets"]:
        lines += [_row(f"{bucket['bucket']} ({bucket['count']} rows), {k}", m)
                  for k, m in bucket["metrics"].items()]
    lines += ["", "## Failure modes (share of rows)", "", head.replace("| metric |", "| mode |"),
              rule]
    lines += [_row(k, m) for k, m in out["failures"].items()]
    flips = out["flips"]
    lines += ["", "## Flipped examples", "",
              f"Right in A, wrong in B: {flips['right_in_a_wrong_in_b']['count']}; right in B, "
              f"wrong in A: {flips['right_in_b_wrong_in_a']['count']}.", "",
              "| id | source | reference | A | B |", "|---|---|---|---|---|"]
    for key in ("right_in_a_wrong_in_b", "right_in_b_wrong_in_a"):
        lines += [f"| {e['id']} | {e['source']} | {e['reference']} | {e['hypothesis_a']} | "
                  f"{e['hypothesis_b']} |" for e in flips[key]["examples"]]
    return "\n".join(lines) + "\n"
