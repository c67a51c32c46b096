"""The pair tasks' piece of the evaluate stage: the predictions scored against the
references, teacher-forced statistics, and every evaluate output.

g2p and parallel differ here only: g2p's targets are ARPAbet, so its evaluation counts
predicted tokens outside that alphabet (seqcore.g2p); a user's parallel data has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from seqcore.artifacts.baseline import BaselineRecord
from seqcore.artifacts.coverage import Coverage
from seqcore.artifacts.model_file import ModelFile, ModelMeta
from seqcore.artifacts.predictions import (
    PredictionRow, Predictions, PredictionsHeader, model_rows_path)
from seqcore.artifacts.reports import Headline, Metrics, Results
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.config import Config, as_dict
from seqcore.contract import SpecialIds
from seqcore.data.examples import Example, read_encoded
from seqcore.determinism import set_determinism
from seqcore.g2p import is_illegal_phoneme
from seqcore.hashing import digest
from seqcore.metrics import plots
from seqcore.metrics.comparison import NotComparable, paired_headline
from seqcore.metrics.evaluation import (
    EvalSpec, Evaluation, evaluate_predictions, failure_rate_table, prediction_metrics,
    teacher_metrics)
from seqcore.metrics.bootstrap import Resampling
from seqcore.metrics.model_output import bucket_table, model_output, output_metrics
from seqcore.nulls import null_undefined
from seqcore.metrics import recompute
from seqcore.metrics.recompute import resampling
from seqcore.metrics.report import render_report, training_summary, write_csv
from seqcore.metrics.teacher import TeacherStats, teacher_forced_stats
from seqcore.signature import result_signature
from seqcore.tasks import TaskError
from seqcore.tasks.base import Evaluated, StageIO
from seqcore.models.base import EncoderDecoder
from seqcore.training.distributed import checkpoint_folder


#: The target alphabet check of each pair task (None: the task has no fixed alphabet).
ALPHABETS: dict[str, Callable[[str], bool] | None] = {"g2p": is_illegal_phoneme,
                                                       "parallel": None}


def eval_spec(cfg: Config) -> EvalSpec:
    """The evaluation settings: the ``evaluate`` section and the task's target alphabet."""
    return recompute.eval_spec(cfg, ALPHABETS[cfg.task])


def evaluate(cfg: Config, io: StageIO) -> Evaluated:
    """Score the predictions of ``decode.split``; write every evaluate output."""
    split = cfg.decode.split
    pred_path = Path(cfg.paths.predictions) / f"{split}.jsonl"
    header = PredictionsHeader.load(pred_path)
    tc = TokenizerContract.load(cfg.paths.tokenizer_contract)  # read once: signature, ids, record
    sig = io.contract(header.signature, str(pred_path), tc)
    set_determinism(cfg.train.seed, cfg.train.threads)
    model_file = ModelFile.load(cfg.paths.model)  # read once: its weights and its record
    model = model_file.build()
    examples = {s: read_encoded(cfg.paths.encoded, s) for s in ("dev", "test")}
    forced = teacher_forced(cfg, model, examples, tc.special_ids, io)  # by split, by example id
    rows = Predictions.load_checked(pred_path, header)[0].rows
    spec = eval_spec(cfg)
    result = evaluate_predictions(rows, spec, forced[split])
    # The model's own output before any rescoring: its figures are the model's (issue 52)
    own_rows = model_rows(pred_path, rows) if header.rescored else rows
    own = evaluate_predictions(own_rows, replace(spec, resampling=Resampling(samples=0)),
                               forced[split]) if header.rescored else result
    hyp = hypothesis_stats(cfg, model, own_rows, examples[split], tc.special_ids, io)
    coverage = Coverage.load(cfg.paths.coverage).splits[split]  # the tokenizer's UNK figures
    meta = model_file.meta
    folder = checkpoint_folder(cfg.paths.checkpoints, meta.training_contract)  # train's
    metrics = {"split": split, "signature": signed_result(cfg, sig, meta, header, result),
               "contract_signature": sig, "tokenizer_tgt": tc.tgt.sha256[:12],
               "tokenizer_tgt_sha256": tc.tgt.sha256, "model_sha256": header.model_sha256,
               "checkpoints": str(folder), **output_metrics(result, own, header.rescored),
               "source_unk": coverage.src.as_dict(), "reference_unk": coverage.tgt.as_dict(),
               **teacher_metrics({s: list(v.values()) for s, v in forced.items()}, own),
               "model_output": model_output(own, own_rows, forced[split], hyp),
               **interval_metrics(cfg, result), **baseline_metrics(cfg, rows, result)}
    metrics = null_undefined(metrics)  # strict JSON: NaN -> null + <key>_null_reason
    io.note(f"result: {metrics['signature']}")
    buckets = bucket_table(result, own, own_rows, spec.edges, forced[split], hyp)
    write_outputs(cfg, metrics, Outputs(result, own, buckets), header)
    return Evaluated(metrics, sig, header, pred_path, tc)


def derived_params(cfg: Config) -> dict[str, str]:
    """The pair tasks' rules fixed by code (seqcore/contract.py, the bucketed feed), as the
    MLflow run states them (``Task.derived_params``)."""
    tr, seq = cfg.train, cfg.sequence
    return {
        "derived.batch.unit": "sequences per micro-batch",
        "derived.batch.sequences_per_step": str(tr.batch_size * tr.accum_steps),
        "derived.batch.bucketing": f"target length buckets of width {tr.bucket_width}",
        "derived.loss.denominator": "valid label tokens of all micro-batches of the step"
        if seq.loss_norm == "token-mean" else seq.loss_norm,
        "derived.eos": "every kept target ends with EOS" if seq.overlong == "drop"
        else "a truncated target has no EOS",
        "derived.teacher_forcing": "decoder input = BOS + target; labels = target + EOS",
        "derived.bptt": "n/a (no recurrence)" if cfg.model.family == "transformer"
        else "full sequence, state reset per sequence (no truncated BPTT)",
    }


def signed_result(cfg: Config, sig: str, meta: ModelMeta, header: PredictionsHeader,
                  result: Evaluation) -> str:
    """The result signature of these figures (seqcore.signature.result_fields): the contract,
    the training contract and model file hashes, the decode and bootstrap settings."""
    draws = resampling(cfg).signature("group") if result.intervals else None
    return result_signature(sig, digest(meta.training_contract), header.model_sha256,
                            header.decode, draws)


def interval_metrics(cfg: Config, result: Evaluation) -> dict[str, Any]:
    """``interval``: the bootstrap interval of each headline metric under its metrics.json
    name (perplexity as ``<split>_perplexity``), and the ``interval_signature`` that says how
    it was drawn (results.json, beside the sacrebleu signatures)."""
    if not result.intervals:
        return {}
    split = cfg.decode.split
    names = {"perplexity": f"{split}_perplexity"}
    return {"interval": {names.get(k, k): v for k, v in result.intervals.items()},
            "interval_signature": resampling(cfg).signature("group")}


#: The baseline's figures beside the model's in metrics.json (``baseline.*``) and compared
#: with them (``vs_baseline.*``): the error rates a G2P result is judged by.
BASELINE_METRICS = ("word_error_rate", "word_error_rate_multi_ref", "token_error_rate",
                    "token_error_rate_multi_ref", "exact_match", "char_error_rate")


def baseline_metrics(cfg: Config, rows: list[PredictionRow],
                     result: Evaluation) -> dict[str, Any]:
    """The baseline's predictions of the same split scored by the same code as the model's
    (``baseline``: its numbers, intervals, train rows and rows left out), and model minus
    baseline with its paired-bootstrap interval and p-values (``vs_baseline``); nothing when
    the run has no baseline.

    Raises:
        TaskError: the baseline's rows are not the model's (a stale baseline folder).
    """
    record = BaselineRecord.load(cfg.paths.baseline)
    if not record.present:
        return {}
    path = Path(cfg.paths.baseline) / f"{cfg.decode.split}.jsonl"
    base = Predictions.load(path).rows
    scored = evaluate_predictions(base, eval_spec(cfg))  # the model's own scoring path
    try:
        versus = paired_headline(base, rows, resampling(cfg), BASELINE_METRICS,
                                 (scored.stats, result.stats))
    except NotComparable as err:
        raise TaskError(f"{path} against the model's predictions: {err}; re-run the baseline "
                        "stage (dvc repro baseline)") from None
    numbers = {k: v for k, v in prediction_metrics(scored).items() if not isinstance(v, str)}
    numbers["word_error_rate_multi_ref"] = 1.0 - numbers["exact_match_multi_ref"]
    rejected = sum((record.rejected or {}).values())
    return {"baseline": numbers | {"interval": scored.intervals, "train_rows": record.train_rows,
                                   "train_rows_left_out": rejected},
            "baseline_signature": record.signature,
            "vs_baseline": {k: {"delta": v.delta, "low": v.low, "high": v.high,
                                "p_bootstrap": v.p_bootstrap,
                                "p_randomization": v.p_randomization}
                            for k, v in versus.items()}}


@dataclass(frozen=True)
class Outputs:
    """What the tables and the report show: the scored system's evaluation, the model's own
    (the same one without rescoring) and the bucket table (seqcore.metrics.model_output)."""

    system: Evaluation
    own: Evaluation
    buckets: list[dict[str, Any]]


def write_outputs(cfg: Config, metrics: dict[str, Any], out: Outputs,
                  header: PredictionsHeader) -> None:
    """metrics.json, results.json, buckets.csv, the details directory (plot data, PNGs)
    and report.md. The failure modes are the model's own (issue 52)."""
    details = Path(cfg.evaluate.details_dir)
    numbers, texts = split_results(metrics)
    Metrics(numbers).save(cfg.paths.metrics)
    Results(texts).save(cfg.paths.results)
    split = metrics["split"]
    base = metrics.get("baseline") or {}
    Headline(metrics[f"{split}_perplexity"], metrics["word_error_rate"],
             metrics["token_error_rate"], base_wer=base.get("word_error_rate"),
             base_per=base.get("token_error_rate")).save(cfg.paths.headline)
    write_csv(cfg.paths.buckets, out.buckets)
    failure_rates = failure_rate_table(out.own)
    write_csv(details / "failure_rates.csv", failure_rates)
    if out.system.groups:
        write_csv(details / "groups.csv", out.system.groups)
    plots.training_curve_png(Path(cfg.paths.train_log), details / "training_curve.png")
    plots.bucket_png(out.buckets, details / "buckets.png")
    plots.failure_png(failure_rates, details / "failure_rates.png")
    rel = Path(details).relative_to(Path(cfg.paths.report).parent)
    images = {t: str(rel / f) for t, f in (("training curve", "training_curve.png"),
                                           ("metrics by length bucket", "buckets.png"),
                                           ("failure-mode rates", "failure_rates.png"))}
    Path(cfg.paths.report).write_text(render_report(
        metrics, replace(out.system, buckets=out.buckets, failures=out.own.failures),
        as_dict(header.decode), eval_spec(cfg).rules.describe(), images,
        training_summary(TrainMetrics.load(cfg.paths.train_metrics), Path(cfg.paths.train_log))),
        encoding="utf-8")


def teacher_forced(cfg: Config, model: EncoderDecoder, examples: dict[str, list[Example]],
                   ids: SpecialIds, io: StageIO) -> dict[str, dict[str, TeacherStats]]:
    """Per-example teacher-forced statistics of ``model`` on the references of dev and test
    (by split, then example id)."""
    bs = cfg.decode.batch_size
    out: dict[str, dict[str, TeacherStats]] = {}
    for split, items in examples.items():
        out[split] = {}
        for chunk in io.chunks(items, bs, f"evaluate: {split} teacher-forced NLL"):
            out[split] |= teacher_forced_stats(model, list(chunk), ids, bs)
    return out


def model_rows(pred_path: Path, rows: list[PredictionRow]) -> list[PredictionRow]:
    """The model's own rows beside the scored ``rows`` of ``pred_path``.

    Raises:
        TaskError: they are not the same examples in the same order with the same
            references (a stale or edited file): one line naming it.
    """
    path = model_rows_path(pred_path)
    own = Predictions.load(path).rows
    if [(r.id, r.reference) for r in own] != [(r.id, r.reference) for r in rows]:
        raise TaskError(f"{path}: not the examples and references of {pred_path} "
                        f"({len(own)} rows against {len(rows)}); re-run the decode stage")
    return own


def hypothesis_stats(cfg: Config, model: EncoderDecoder, rows: list[PredictionRow],
                     examples: list[Example], ids: SpecialIds,
                     io: StageIO) -> dict[str, TeacherStats]:
    """The NLL the model gives its own outputs ``rows`` (teacher-forced on each hypothesis,
    with its EOS when it ended), by example id: the perplexity side of exposure bias."""
    by_id = {e.id: e for e in examples}
    own = [Example(r.id, r.group, r.source, r.hypothesis, by_id[r.id].src, list(r.tokens),
                   r.eos) for r in rows]
    bs, out = cfg.decode.batch_size, {}
    for chunk in io.chunks(own, bs, "evaluate: NLL of the model's own outputs"):
        out |= teacher_forced_stats(model, list(chunk), ids, bs)
    return out


def split_results(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(numbers, texts): numbers go to metrics.json, texts (signatures, hashes) to
    results.json, so `dvc exp show` and `dvc metrics diff` list numbers only."""
    texts = {k: v for k, v in values.items() if isinstance(v, str)}
    return {k: v for k, v in values.items() if k not in texts}, texts
