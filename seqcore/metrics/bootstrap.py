"""Confidence intervals and paired significance by resampling groups of rows.

A headline metric is a ratio of sums of per-row statistics (WER = errors / words, PER = edits /
reference tokens, perplexity = exp(NLL / tokens)), so a resample is a weighted sum: a count per
group times the group's statistics. Groups, not rows, are resampled: all pronunciations of a
word (a predictions row's ``group``) move together, since they share one source and are not
independent trials; for the lm task a group is a document (all its tokens move together).

- :func:`intervals`: the percentile bootstrap interval of every metric of one system.
- :func:`document_interval`: the lm task's perplexity interval, resampling documents.
- :func:`paired`: two systems on the same rows: the difference B - A, its paired-bootstrap
  interval and p-value (Koehn 2004; sacreBLEU's ``--paired-bs``), and an approximate-
  randomization p-value (sacreBLEU's ``--paired-ar``): each trial swaps the two systems'
  statistics of a random half of the groups.

Counts are integers and NLL is summed in integer nano-nats, so every resample is an exact
integer sum: the same seed gives the same bytes on any CPU (a float matrix product would
not). The draws come from numpy's PCG64 generator seeded with ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: Per-row statistics, one column each (seqcore.metrics.scores.ErrorStats plus teacher NLL).
COLUMNS = ("n", "exact", "exact_multi", "token_edits", "ref_tokens", "token_edits_multi",
           "ref_tokens_multi", "char_edits", "ref_chars", "nll_nano", "nll_tokens")
_C = {name: i for i, name in enumerate(COLUMNS)}
NANO = 10**9


def _ratio(num: str, den: str, complement: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    def f(s: np.ndarray) -> np.ndarray:
        top, bottom = s[..., _C[num]], s[..., _C[den]]
        with np.errstate(divide="ignore", invalid="ignore"):  # as scores.ratio: NaN for 0/0
            return ((bottom - top) if complement else top) / bottom  # (n - exact) / n as WER
    return f


def _perplexity(s: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.exp(s[..., _C["nll_nano"]] / NANO / s[..., _C["nll_tokens"]])


#: The headline metrics with an interval: name -> the metric of summed statistics.
METRICS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "word_error_rate": _ratio("exact", "n", complement=True),
    "word_error_rate_multi_ref": _ratio("exact_multi", "n", complement=True),
    "exact_match": _ratio("exact", "n"),
    "exact_match_multi_ref": _ratio("exact_multi", "n"),
    "token_error_rate": _ratio("token_edits", "ref_tokens"),
    "token_error_rate_multi_ref": _ratio("token_edits_multi", "ref_tokens_multi"),
    "char_error_rate": _ratio("char_edits", "ref_chars"),
    "perplexity": _perplexity,
}


@dataclass(frozen=True)
class Resampling:
    """How intervals and p-values are drawn (the ``evaluate`` section's bootstrap keys).

    Attributes:
        samples: bootstrap resamples (and approximate-randomization trials); 0 turns it off.
        seed: the generator's seed.
        confidence: the interval's coverage, e.g. 0.95 for the 2.5 and 97.5 percentiles.
    """

    samples: int = 1000
    seed: int = 12345
    confidence: float = 0.95

    def signature(self, unit: str) -> str:
        """``ci:95|bs:1000|rs:12345|by:word`` (sacreBLEU's style): what a reader needs to
        redo the figure."""
        return f"ci:{self.confidence * 100:g}|bs:{self.samples}|rs:{self.seed}|by:{unit}"


def row_matrix(stats: Sequence[object], nll: Sequence[tuple[float, int]] | None = None
               ) -> np.ndarray:
    """One int64 row of :data:`COLUMNS` per predictions row: ErrorStats fields, and the
    teacher-forced (NLL, tokens) of the row when given (zeros otherwise)."""
    m = nll_matrix(nll if nll is not None else [(0.0, 0)] * len(stats))
    for i, s in enumerate(stats):
        for name in COLUMNS[:9]:
            m[i, _C[name]] = getattr(s, name)
    return m


def nll_matrix(nll: Sequence[tuple[float, int]]) -> np.ndarray:
    """One int64 row of :data:`COLUMNS` per (NLL in nats, tokens) pair: the NLL in integer
    nano-nats (so resampled sums are exact), zeros in the other columns."""
    m = np.zeros((len(nll), len(COLUMNS)), dtype=np.int64)
    for i, (total, tokens) in enumerate(nll):
        m[i, _C["nll_nano"]] = round(total * NANO)
        m[i, _C["nll_tokens"]] = tokens
    return m


def group_sums(m: np.ndarray, groups: Sequence[str]) -> np.ndarray:
    """The rows of ``m`` summed per group, groups in sorted order (G x columns)."""
    names = sorted(set(groups))
    index = {g: i for i, g in enumerate(names)}
    out = np.zeros((len(names), m.shape[1]), dtype=np.int64)
    np.add.at(out, np.array([index[g] for g in groups], dtype=np.int64), m)
    return out


def resample_counts(groups: int, r: Resampling) -> np.ndarray:
    """``r.samples`` x ``groups`` counts: how often each group is drawn in each resample."""
    rng = np.random.Generator(np.random.PCG64(r.seed))
    return rng.multinomial(groups, np.full(groups, 1.0 / groups), size=r.samples)


def _bounds(values: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(finite, [tail, 1.0 - tail])
    return float(lo), float(hi)


def _metrics(names: Sequence[str] | None) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    return {k: METRICS[k] for k in (names or METRICS)}


def intervals(sums: np.ndarray, r: Resampling, names: Sequence[str] | None = None
              ) -> dict[str, dict[str, float]]:
    """Percentile bootstrap interval of each metric, from per-group sums (G x columns).

    Returns ``{metric: {"low": .., "high": ..}}``; NaN bounds where the metric is undefined
    (no perplexity without teacher-forced statistics, no resamples).
    """
    out = {k: {"low": math.nan, "high": math.nan} for k in _metrics(names)}
    if r.samples == 0 or len(sums) == 0:
        return out
    resampled = resample_counts(len(sums), r) @ sums  # exact: int64
    for name, f in _metrics(names).items():
        lo, hi = _bounds(f(resampled), r.confidence)
        out[name] = {"low": lo, "high": hi}
    return out


def document_interval(nll: Sequence[tuple[float, int]], r: Resampling) -> dict[str, float]:
    """The perplexity's interval resampling documents (the lm task): every token of a
    document moves with it, since its NLL comes from one carried state and one text, not
    from independent tokens.

    Args:
        nll: (NLL in nats, tokens) of each document, in document order.

    Returns:
        ``{"low": .., "high": ..}`` of exp(sum NLL / sum tokens) (:data:`METRICS`
        ``perplexity``); NaN bounds without documents or resamples, or when a document's
        NLL is not finite (the perplexity itself is undefined then).
    """
    if not all(math.isfinite(x) for x, _ in nll):
        return {"low": math.nan, "high": math.nan}
    width = len(str(len(nll)))
    groups = [f"{i:0{width}d}" for i in range(len(nll))]  # one per document; sorted = in order
    return intervals(group_sums(nll_matrix(nll), groups), r, ["perplexity"])["perplexity"]


@dataclass(frozen=True)
class PairedResult:
    """One metric of two systems A and B on the same rows."""

    a: float
    b: float
    delta: float  # b - a
    low: float  # the paired-bootstrap interval of delta
    high: float
    p_bootstrap: float
    p_randomization: float


def paired(sums_a: np.ndarray, sums_b: np.ndarray, r: Resampling,
           names: Sequence[str] | None = None,
           functions: dict[str, Callable[[np.ndarray], np.ndarray]] | None = None
           ) -> dict[str, PairedResult]:
    """B - A for each metric, with its paired-bootstrap interval and two p-values.

    ``sums_a`` and ``sums_b`` hold the same groups in the same order; the metrics are
    :data:`METRICS` (or those ``names``), or ``functions`` of the summed columns. Both p-values are
    two-sided with the +1 correction, (1 + as extreme) / (1 + trials), so a p-value is never
    0 and two identical systems give 1:

    - bootstrap: resampled differences, centred on their mean (the null hypothesis of no
      difference), at least as far from 0 as the observed one;
    - approximate randomization: each group's statistics of A and B swapped with
      probability 1/2; differences at least as large as the observed one.
    """
    total_a, total_b = sums_a.sum(0), sums_b.sum(0)
    out: dict[str, PairedResult] = {}
    counts = resample_counts(len(sums_a), r) if r.samples and len(sums_a) else None
    if counts is not None:
        boot_a, boot_b = counts @ sums_a, counts @ sums_b
        rng = np.random.Generator(np.random.PCG64(r.seed + 1))
        swap = rng.integers(0, 2, size=(r.samples, len(sums_a)), dtype=np.int64)
        diff = sums_b - sums_a  # swapping a group moves its difference from B to A
        perm_b = sums_b.sum(0) - swap @ diff
        perm_a = sums_a.sum(0) + swap @ diff
    for name, f in (functions or _metrics(names)).items():
        a, b = float(f(total_a)), float(f(total_b))
        delta = b - a
        if counts is None or not math.isfinite(delta):
            out[name] = PairedResult(a, b, delta, math.nan, math.nan, math.nan, math.nan)
            continue
        d = f(boot_b) - f(boot_a)
        d = d[np.isfinite(d)]
        lo, hi = _bounds(d, r.confidence)
        centred = np.abs(d - d.mean()) >= abs(delta) - 1e-12
        p_bs = (1 + int(centred.sum())) / (1 + d.size)
        perm = np.abs(f(perm_b) - f(perm_a))
        p_ar = (1 + int((perm >= abs(delta) - 1e-12).sum())) / (1 + r.samples)
        out[name] = PairedResult(a, b, delta, lo, hi, p_bs, p_ar)
    return out
