"""Evaluation of a predictions file: headline metrics, length buckets, failure modes."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import sacrebleu

from seqcore.decoding.predictions import PredictionRow
from seqcore.metrics.scores import ErrorStats, error_stats


@dataclass(frozen=True)
class FailureRules:
    """How failure modes are detected (recorded with the results)."""

    repeat_ngram: int
    repeat_times: int
    examples: int


@dataclass
class Evaluation:
    """Everything computed from the predictions alone."""

    headline: dict[str, Any]
    buckets: list[dict[str, Any]]
    failures: dict[str, Any]
    groups: dict[str, Any] = field(default_factory=dict)


def bucket_name(length: int, edges: tuple[int, ...]) -> str:
    """Bucket label for a reference length: ``<=e0``, ``e0+1-e1``, ..., ``>eN``."""
    lo = 1
    for edge in edges:
        if length <= edge:
            return f"{lo}-{edge}"
        lo = edge + 1
    return f">{edges[-1]}" if edges else "all"


def has_loop(tokens: list[str], n: int, times: int) -> bool:
    """True if some token n-gram (size 1..n) occurs ``times`` times in a row.

    E.g. n=2, times=3 flags ``A B A B A B`` and ``K K K``.
    """
    for size in range(1, n + 1):
        for start in range(len(tokens) - size * times + 1):
            gram = tokens[start : start + size]
            if all(tokens[start + k * size : start + (k + 1) * size] == gram
                   for k in range(1, times)):
                return True
    return False


def evaluate_predictions(
    rows: list[PredictionRow], edges: tuple[int, ...], rules: FailureRules,
    illegal: Any = None,
) -> Evaluation:
    """Compute headline metrics, per-bucket metrics and failure modes.

    Args:
        rows: the predictions (one per example; variants of one source share ``group``).
        edges: reference-length bucket edges (in target tokens).
        rules: failure-mode detection settings.
        illegal: optional callable token -> bool marking symbols outside the target alphabet.
    """
    refs_by_group: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        refs_by_group[r.group].add(r.reference)
    total, per_bucket = ErrorStats(), defaultdict(ErrorStats)
    multi = 0
    for r in rows:
        st = error_stats(r.hypothesis, r.reference)
        total += st
        per_bucket[bucket_name(len(r.reference.split()), edges)] += st
        multi += r.hypothesis in refs_by_group[r.group]
    headline = total.scores() | {
        "exact_match_multi_ref": multi / len(rows) if rows else math.nan,
        "examples": len(rows)}
    headline |= _sacrebleu(rows)
    buckets = [{"bucket": name, "count": st.n} | st.scores()
               for name, st in sorted(per_bucket.items(), key=lambda kv: _bucket_key(kv[0]))]
    return Evaluation(headline, buckets, failure_modes(rows, rules, illegal))


def _bucket_key(name: str) -> int:
    return int(name.lstrip(">").split("-")[0]) + (1000 if name.startswith(">") else 0)


def _sacrebleu(rows: list[PredictionRow]) -> dict[str, Any]:
    hyps = [r.hypothesis for r in rows]
    refs = [[r.reference for r in rows]]
    out: dict[str, Any] = {}
    for name, metric in (("bleu", sacrebleu.metrics.BLEU()), ("chrf", sacrebleu.metrics.CHRF()),
                         ("ter", sacrebleu.metrics.TER())):
        score = metric.corpus_score(hyps, refs)
        out[name] = score.score
        out[f"{name}_signature"] = str(metric.get_signature())
    return out


def failure_modes(rows: list[PredictionRow], rules: FailureRules, illegal: Any) -> dict[str, Any]:
    """Counts, rates and examples of empty, truncated, repeated and illegal outputs."""
    kinds: dict[str, list[PredictionRow]] = {"empty": [], "truncated": [], "repeated": [],
                                              "illegal": []}
    ratios = []
    for r in rows:
        toks = r.hypothesis.split()
        if not toks:
            kinds["empty"].append(r)
        if not r.eos:
            kinds["truncated"].append(r)
        if has_loop(toks, rules.repeat_ngram, rules.repeat_times):
            kinds["repeated"].append(r)
        if "<unk>" in r.pieces or (illegal is not None and any(illegal(t) for t in toks)):
            kinds["illegal"].append(r)
        ratios.append(len(toks) / max(len(r.reference.split()), 1))
    n = max(len(rows), 1)
    out: dict[str, Any] = {
        kind: {"count": len(found), "rate": len(found) / n,
               "examples": [{"id": r.id, "source": r.source, "reference": r.reference,
                             "hypothesis": r.hypothesis} for r in found[: rules.examples]]}
        for kind, found in kinds.items()}
    out["length_ratio"] = {
        "mean": sum(ratios) / n,
        "below_0.5": sum(x < 0.5 for x in ratios) / n,
        "above_1.5": sum(x > 1.5 for x in ratios) / n}
    out["rules"] = {"repeated": f"a token n-gram of size 1..{rules.repeat_ngram} repeated "
                                f"{rules.repeat_times} times in a row",
                    "truncated": "max length reached without EOS", "empty": "no tokens"}
    return out
