"""Evaluation of a predictions file: headline metrics, length buckets, groups, failure modes.

Everything here is computed from the predictions alone, except the optional teacher-forced
statistics (which need the model) that are joined in by example id.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sacrebleu

from seqcore.artifacts.predictions import PredictionRow
from seqcore.metrics.bootstrap import METRICS, Resampling, group_sums, intervals, row_matrix
from seqcore.metrics.failures import KINDS, FailureRules, failure_modes
from seqcore.metrics.scores import ErrorStats, error_stats
from seqcore.metrics.teacher import TeacherStats, nll_summary
from seqcore.text import UNK_PIECE


@dataclass(frozen=True)
class EvalSpec:
    """What an evaluation needs besides the rows (built from the ``evaluate`` section)."""

    edges: tuple[int, ...] | str  # "auto": from the references (length_edges)
    rules: FailureRules
    group_by: str  # "none" | "group"
    illegal: Callable[[str], bool] | None
    resampling: Resampling = Resampling(samples=0)  # the headline intervals (0: none)


@dataclass(frozen=True)
class Evaluation:
    """Everything computed for one predictions file.

    Attributes:
        headline: corpus-level scores (flat, JSON-ready).
        buckets: one row per non-empty reference-length bucket, in length order.
        groups: one row per group (empty unless group_by == "group").
        failures: failure_modes() output (counts, rates, examples, length ratio).
        intervals: the bootstrap interval of each headline metric (seqcore.metrics.bootstrap;
            ``perplexity`` only with teacher-forced statistics), resampling row groups.
        stats: each row's statistics (row_stats), in row order: a paired comparison with
            another system reuses them.
    """

    headline: dict[str, Any]
    buckets: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    failures: dict[str, Any]
    intervals: dict[str, dict[str, float]] = field(default_factory=dict)
    stats: list[ErrorStats] = field(default_factory=list)


#: ``evaluate.bucket_edges: auto`` cuts the references into this many length quantiles.
AUTO_BUCKETS = 5


def length_edges(lengths: list[int], buckets: int = AUTO_BUCKETS) -> tuple[int, ...]:
    """Bucket edges from the data: for k = 1 .. buckets - 1, the smallest length that at
    least k / buckets of ``lengths`` do not exceed, each once, below the longest (so no
    bucket is empty). A constant only fits one dataset: ``[4, 6, 8, 10]`` put 59 % of
    another lexicon's words in ``>10`` (issue 30)."""
    ordered = sorted(lengths)
    cuts = {ordered[-(-len(ordered) * k // buckets) - 1] for k in range(1, buckets)
            } if ordered else set()
    return tuple(sorted(e for e in cuts if e < ordered[-1]))


def resolved_edges(edges: tuple[int, ...] | str, rows: list[PredictionRow]) -> tuple[int, ...]:
    """The configured edges, or (``auto``) the quantile edges of the rows' reference lengths
    in target symbols: two systems scored on the same rows get the same buckets."""
    if edges != "auto":
        return tuple(edges)
    return length_edges([len(r.reference.split()) for r in rows])


def bucket_index(length: int, edges: tuple[int, ...]) -> int:
    """Index of the first edge >= length (len(edges) for the open last bucket)."""
    return next((i for i, e in enumerate(edges) if length <= e), len(edges))


def bucket_name(length: int, edges: tuple[int, ...]) -> str:
    """Bucket label of a reference length: ``1-e0``, ``e0+1-e1``, ..., ``>eN`` (a bucket of
    one length is named by it: ``6``).

    The first bucket also holds length 0; without edges everything is ``all``.
    """
    return bucket_label(bucket_index(length, edges), edges)


def bucket_label(index: int, edges: tuple[int, ...]) -> str:
    """Label of bucket ``index`` (see bucket_name)."""
    if not edges:
        return "all"
    if index == len(edges):
        return f">{edges[-1]}"
    low = edges[index - 1] + 1 if index else 1
    return str(low) if low == edges[index] else f"{low}-{edges[index]}"


def sacrebleu_scores(hyps: list[str], refs: list[str]) -> dict[str, Any]:
    """Corpus BLEU, chrF and TER by sacrebleu with default settings, and their signatures."""
    out: dict[str, Any] = {}
    for name, metric in (("bleu", sacrebleu.metrics.BLEU()), ("chrf", sacrebleu.metrics.CHRF()),
                         ("ter", sacrebleu.metrics.TER())):
        out[name] = metric.corpus_score(hyps, [refs]).score
        out[f"{name}_signature"] = str(metric.get_signature())
    return out


def _table_row(rows: list[PredictionRow], stats: ErrorStats,
               teacher: dict[str, TeacherStats] | None, corpus_scores: bool) -> dict[str, Any]:
    """Scores of a subset of rows (bucket or group) with counts; sacrebleu scores only when
    ``corpus_scores`` (they cost ~1 s per call, too much for thousands of small groups)."""
    out: dict[str, Any] = {"count": stats.n} | stats.scores()
    if corpus_scores:
        out |= {k: v for k, v in sacrebleu_scores([r.hypothesis for r in rows],
                                                  [r.reference for r in rows]).items()
                if not k.endswith("_signature")}
    if teacher is not None:
        forced = nll_summary([teacher[r.id] for r in rows])
        out |= {"tf_token_accuracy": forced["tf_token_accuracy"],
                "exposure_bias_gap": forced["tf_token_accuracy"] - out["fr_token_accuracy"],
                "token_nll": forced["token_nll"], "perplexity": forced["perplexity"],
                "ppl_denominator_tokens": forced["ppl_denominator_tokens"]}
    return out


def row_stats(rows: list[PredictionRow]) -> list[ErrorStats]:
    """Each row's statistics against its own reference and every reference of its group."""
    refs_by_group: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        refs_by_group[r.group].add(r.reference)
    return [error_stats(r.hypothesis, r.reference, r.eos, frozenset(refs_by_group[r.group]))
            for r in rows]


def evaluate_predictions(rows: list[PredictionRow], spec: EvalSpec,
                         teacher: dict[str, TeacherStats] | None = None) -> Evaluation:
    """Compute headline metrics, per-bucket and per-group tables and failure modes.

    Args:
        rows: the predictions (one per example; references of one source share ``group``).
        spec: bucket edges, failure rules, grouping and the target-alphabet check.
        teacher: optional teacher-forced statistics of the same examples, by id.
    """
    stats = row_stats(rows)
    edges = resolved_edges(spec.edges, rows)
    by_bucket: dict[int, list[int]] = defaultdict(list)
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_bucket[bucket_index(len(r.reference.split()), edges)].append(i)
        by_group[r.group].append(i)

    def table(index: list[int], corpus_scores: bool = True) -> dict[str, Any]:
        return _table_row([rows[i] for i in index], sum((stats[i] for i in index), ErrorStats()),
                          teacher, corpus_scores)

    buckets = [{"bucket": bucket_label(b, edges)} | table(idx)
               for b, idx in sorted(by_bucket.items())]
    groups = ([{"group": g} | table(idx, False) for g, idx in sorted(by_group.items())]
              if spec.group_by == "group" else [])
    total = sum(stats, ErrorStats())
    headline = total.scores() | {"examples": len(rows), "fr_accuracy_tokens": total.fr_tokens,
                                 "hypothesis_unk": hypothesis_unk_rate(rows)}
    headline |= sacrebleu_scores([r.hypothesis for r in rows], [r.reference for r in rows])
    if teacher is not None:
        forced = nll_summary([teacher[r.id] for r in rows])
        headline |= {"tf_token_accuracy": forced["tf_token_accuracy"],
                     "tf_accuracy_tokens": forced["ppl_denominator_tokens"],
                     "exposure_bias_gap": forced["tf_token_accuracy"]
                     - headline["fr_token_accuracy"]}
    return Evaluation(headline, buckets, groups, failure_modes(rows, spec.rules, spec.illegal),
                      headline_intervals(rows, stats, spec.resampling, teacher), stats)


def headline_intervals(rows: list[PredictionRow], stats: list[ErrorStats], r: Resampling,
                       teacher: dict[str, TeacherStats] | None) -> dict[str, dict[str, float]]:
    """Bootstrap intervals of the headline metrics, resampling the rows' groups (all
    references of a word move together); empty when ``r.samples`` is 0."""
    if r.samples == 0:
        return {}
    nll = [(teacher[x.id].nll, teacher[x.id].tokens) for x in rows] if teacher else None
    names = [k for k in METRICS if teacher is not None or k != "perplexity"]
    sums = group_sums(row_matrix(stats, nll), [x.group for x in rows])
    return intervals(sums, r, names)


def hypothesis_unk_rate(rows: list[PredictionRow]) -> dict[str, Any]:
    """UNK pieces among the best hypotheses' tokens, with the count and the denominator."""
    tokens = sum(len(r.pieces) for r in rows)
    unk = sum(p == UNK_PIECE for r in rows for p in r.pieces)
    return {"unk_tokens": unk, "tokens": tokens, "unk_rate": unk / tokens if tokens else 0.0,
            "rows_with_unk": sum(UNK_PIECE in r.pieces for r in rows)}


def prediction_metrics(ev: Evaluation) -> dict[str, Any]:
    """The part of metrics.json that follows from the predictions file alone."""
    keep = ("exact_match", "exact_match_multi_ref", "word_error_rate", "token_error_rate",
            "token_error_rate_multi_ref",
            "char_error_rate", "fr_token_accuracy", "fr_accuracy_tokens", "examples", "bleu",
            "bleu_signature", "chrf", "chrf_signature", "ter", "ter_signature")
    failures: dict[str, Any] = {k: {"count": ev.failures[k]["count"],
                                    "rate": ev.failures[k]["rate"]} for k in KINDS}
    failures["repeated_ngrams"] = dict(ev.failures["repeated_ngrams"])
    return {k: ev.headline[k] for k in keep} | {
        "failures": failures, "length_ratio": dict(ev.failures["length_ratio"]),
        "hypothesis_unk": dict(ev.headline["hypothesis_unk"])}


def teacher_metrics(per_split: dict[str, list[TeacherStats]], ev: Evaluation) -> dict[str, Any]:
    """The model-dependent part of metrics.json: NLL/perplexity per split with denominators,
    and the teacher-forced vs free-running accuracy gap on the decoded split."""
    out: dict[str, Any] = {}
    for split, stats in per_split.items():
        out |= {f"{split}_{k}": v for k, v in nll_summary(stats).items()}
    for key in ("tf_token_accuracy", "tf_accuracy_tokens", "exposure_bias_gap"):
        if key in ev.headline:
            out[key] = ev.headline[key]
    return out


def failure_rate_table(ev: Evaluation) -> list[dict[str, Any]]:
    """One row per failure mode (mode, count, rate): the data of the failure-rate plot."""
    rows = [{"mode": k, "count": ev.failures[k]["count"], "rate": ev.failures[k]["rate"]}
            for k in KINDS]
    rep = ev.failures["repeated_ngrams"]
    rows.append({"mode": "repeated_ngrams", "count": rep["count"], "rate": rep["rate"]})
    lr = ev.failures["length_ratio"]
    rows += [{"mode": "length_ratio<0.5", "count": "", "rate": lr["below_0.5"]},
             {"mode": "length_ratio>1.5", "count": "", "rate": lr["above_1.5"]}]
    return rows
