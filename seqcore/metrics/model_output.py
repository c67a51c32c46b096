"""The model's figures measured on the model's own output (issue 52).

Under ``decode.rescore: baseline`` the scored system is the baseline's n-best re-ranked by
the model: its rows are not what the model writes. Free-running accuracy, the exposure-bias
gap and every failure mode (empty, truncated, repeated) describe the model, so they are
computed on the model's own rows (``predictions/<split>.model.jsonl``) and reported under
their usual names; the scored system's output figures sit beside them under
``system_output``. Without rescoring the two are the same rows and ``system_output`` is
absent.

Sign conventions (docs/evaluation.md):

- ``exposure_bias_gap`` = teacher-forced token accuracy - free-running token accuracy, both
  of the model: positive when the model does worse on its own prefixes than on the
  reference's.
- ``nll_gap`` = the model's token NLL of the references - its token NLL of its own outputs:
  positive when the model finds its own outputs likelier than the references (the warning
  sign grows with it: a decoder that prefers what it writes to what is right).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from seqcore.artifacts.predictions import PredictionRow
from seqcore.metrics.evaluation import (
    Evaluation, bucket_name, prediction_metrics, resolved_edges)
from seqcore.metrics.teacher import TeacherStats, nll_summary

#: The figures that describe what a decoder wrote rather than how well it scored: the
#: model's own under their names, the scored system's under ``system_output``.
OUTPUT_KEYS = ("fr_token_accuracy", "fr_accuracy_tokens", "failures", "length_ratio",
               "hypothesis_unk")
#: The model's own scores, beside the scored system's headline.
OWN_SCORES = ("word_error_rate", "token_error_rate", "token_error_rate_multi_ref",
              "exact_match", "exact_match_multi_ref")


def output_metrics(system: Evaluation, own: Evaluation, rescored: bool) -> dict[str, Any]:
    """The predictions part of metrics.json: the scored system's scores, the model's output
    figures (OUTPUT_KEYS), and under rescoring the system's output figures beside them."""
    scored, model = prediction_metrics(system), prediction_metrics(own)
    out = scored | {k: model[k] for k in OUTPUT_KEYS}
    if rescored:
        out["system_output"] = {k: scored[k] for k in OUTPUT_KEYS}
    return out


def nll_sides(reference: list[TeacherStats], hypothesis: list[TeacherStats]) -> dict[str, Any]:
    """The token NLL of the references and of the model's own outputs, their gap
    (reference - hypothesis) and the hypotheses' denominator (tokens + EOS where emitted)."""
    ref, hyp = nll_summary(reference), nll_summary(hypothesis)
    return {"reference_token_nll": ref["token_nll"], "hypothesis_token_nll": hyp["token_nll"],
            "nll_gap": ref["token_nll"] - hyp["token_nll"],
            "hypothesis_tokens": hyp["ppl_denominator_tokens"]}


def model_output(own: Evaluation, rows: list[PredictionRow], reference: dict[str, TeacherStats],
                 hypothesis: dict[str, TeacherStats]) -> dict[str, Any]:
    """metrics.json's ``model_output``: the model's own scores (the model alone, whatever
    ``decode.rescore``) and the NLL it gives its own outputs against the references'."""
    scores = {k: own.headline[k] for k in OWN_SCORES}
    scores["word_error_rate_multi_ref"] = 1.0 - scores["exact_match_multi_ref"]
    return scores | nll_sides(
        [reference[r.id] for r in rows], [hypothesis[r.id] for r in rows])


def bucket_table(system: Evaluation, own: Evaluation, rows: list[PredictionRow],
                 edges: tuple[int, ...] | str, reference: dict[str, TeacherStats],
                 hypothesis: dict[str, TeacherStats]) -> list[dict[str, Any]]:
    """buckets.csv: the scored system's scores per reference-length bucket, with the model's
    free-running accuracy and exposure-bias gap from its own rows (``own``, bucketed alike)
    and each bucket's NLL sides (:func:`nll_sides`)."""
    cut = resolved_edges(edges, rows)
    by_bucket: dict[str, list[PredictionRow]] = defaultdict(list)
    for r in rows:
        by_bucket[bucket_name(len(r.reference.split()), cut)].append(r)
    mine = {b["bucket"]: b for b in own.buckets}
    out = []
    for b in system.buckets:
        label, model = b["bucket"], mine[b["bucket"]]
        nll = nll_sides([reference[r.id] for r in by_bucket[label]],
                        [hypothesis[r.id] for r in by_bucket[label]])
        out.append(b | {k: model[k] for k in ("fr_token_accuracy", "exposure_bias_gap")}
                   | {k: nll[k] for k in ("hypothesis_token_nll", "nll_gap")})
    return out
