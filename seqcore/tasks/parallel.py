"""The paired source/target tasks, ``g2p`` and ``parallel``: encoded pairs in, an
encoder-decoder trained on them, predictions decoded and scored against the references.

The two differ in one piece: g2p's targets are ARPAbet, so its evaluation counts predicted
tokens outside that alphabet (seqcore.g2p); a user's parallel data has no fixed alphabet.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from seqcore.artifacts.coverage import Coverage
from seqcore.artifacts.model_file import ModelFile, ModelMeta
from seqcore.artifacts.predictions import Predictions, PredictionsHeader
from seqcore.artifacts.reports import Headline, Metrics, Results
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.config import Config, DataConfig, as_dict
from seqcore.contract import SpecialIds
from seqcore.data.coverage import SplitCoverage, coverage_problems
from seqcore.data.examples import read_examples
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.determinism import resolve_device, set_determinism
from seqcore.environment import producing_environment
from seqcore.hashing import sha256_file
from seqcore.metrics import plots
from seqcore.metrics.evaluation import (
    EvalSpec, Evaluation, evaluate_predictions, failure_rate_table, prediction_metrics,
    teacher_metrics)
from seqcore.metrics.nulls import null_undefined
from seqcore.metrics.recompute import eval_spec
from seqcore.metrics.report import render_report, training_summary, write_csv
from seqcore.metrics.teacher import TeacherStats, teacher_forced_stats
from seqcore.tasks.base import Evaluated, StageIO, Task, TaskError
from seqcore.tokenizer import load_tokenizers
from seqcore.training.distributed import World, checkpoint_folder_name
from seqcore.training.setups import Setup, seq2seq_setup


def contract_path(cfg: Config) -> Path:
    """``tokenizer/contract.json``."""
    return Path(cfg.paths.tokenizer) / "contract.json"


class ParallelTask(Task):
    """Source/target pairs: the g2p task (ARPAbet targets) and the user's parallel data."""

    def __init__(self, name: str, illegal_symbol: Callable[[str], bool] | None) -> None:
        """``illegal_symbol``: the target alphabet check (None: the task has no alphabet)."""
        self.name = name
        self.illegal_symbol = illegal_symbol

    def eval_spec(self, cfg: Config) -> EvalSpec:
        """The evaluation settings: the ``evaluate`` section and this task's alphabet."""
        return eval_spec(cfg, self.illegal_symbol)

    # -- prepare, tokenizer ----------------------------------------------------------------------

    def scored_splits(self, data: DataConfig) -> dict[str, float]:
        # Dev picks the checkpoint and test is what evaluate scores: too few rows there and
        # the run either dies late (sacrebleu on an empty split) or reports noise (issue 13).
        return {"dev": data.dev_fraction, "test": data.test_fraction}

    def coverage_problems(self, cfg: Config, coverage: dict[str, SplitCoverage]) -> list[str]:
        return coverage_problems(coverage, cfg.tokenizer.max_unk_rate,
                                 cfg.sequence.max_drop_rate, cfg.data.min_split_rows)

    # -- train -----------------------------------------------------------------------------------

    def training_setup(self, cfg: Config, io: StageIO, device: torch.device,
                       world: World) -> Setup:
        enc = Path(cfg.paths.encoded)
        data = (read_examples(enc / "train.jsonl"), read_examples(enc / "dev.jsonl"))
        tc = TokenizerContract.load(contract_path(cfg))
        sig = io.contract(tc.signature, f"{cfg.paths.tokenizer}/contract.json", tc)
        return seq2seq_setup(cfg, tc, sig, data, device, world)

    # -- decode ----------------------------------------------------------------------------------

    def decode(self, cfg: Config, io: StageIO) -> None:
        saved = ModelFile.load(cfg.paths.model)
        model, meta = saved.build(), saved.meta
        tc = TokenizerContract.load(contract_path(cfg))
        sig = io.contract(meta.signature, cfg.paths.model, tc)
        toks = load_tokenizers(contract_path(cfg), meta.tokenizer_sha256(), tc)
        ids, tgt_tok = toks.ids, toks.tgt
        if model.max_positions is not None and cfg.decode.max_len > model.max_positions:
            raise TaskError(
                f"decode.max_len ({cfg.decode.max_len}) is longer than the model's position "
                f"range ({model.max_positions} = max(sequence.max_src_len, "
                "sequence.max_tgt_len) + 1); lower decode.max_len or retrain with a larger "
                "sequence.max_tgt_len")
        device = resolve_device(cfg.decode.device)
        # The thread count the model was trained with (float sums depend on the split); read
        # from the model file, so decode declares no train param.
        set_determinism(cfg.decode.seed, meta.threads, device)
        model.to(device)  # the model file loads on the CPU whatever device trained it
        examples = read_examples(Path(cfg.paths.encoded) / f"{cfg.decode.split}.jsonl")
        decoder, bs = make_decoder(cfg.decode, ids), cfg.decode.batch_size
        with torch.inference_mode():
            rows = [row for chunk in io.chunks(examples, bs, "decode")
                    for row in decode_examples(model, list(chunk), decoder, ids, tgt_tok, bs)]
        out = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
        Predictions(rows).save(out)
        PredictionsHeader(
            as_dict(cfg.decode), sha256_file(Path(cfg.paths.model)), len(rows), sig,
            trained_on=meta.trained_on(), tokenizer_sha256=tc.sha256(),
            environment=producing_environment().as_dict()).save(out)
        io.note(f"{len(rows)} {cfg.decode.split} examples -> {out}")

    # -- evaluate --------------------------------------------------------------------------------

    def evaluate(self, cfg: Config, io: StageIO) -> Evaluated:
        split = cfg.decode.split
        pred_path = Path(cfg.paths.predictions) / f"{split}.jsonl"
        header = PredictionsHeader.load(pred_path)
        tc = TokenizerContract.load(contract_path(cfg))  # read once: signature, ids, record
        sig = io.contract(header.signature, str(pred_path), tc)
        set_determinism(cfg.train.seed, cfg.train.threads)
        tf = teacher_forced(cfg, tc.special_ids, io)
        rows = Predictions.load(pred_path).rows
        result = evaluate_predictions(rows, self.eval_spec(cfg), tf[split])
        coverage = Coverage.load(cfg.paths.coverage).splits[split]  # the tokenizer's UNK figures
        meta = ModelFile.load(cfg.paths.model).meta
        metrics = {"split": split, "signature": sig, "tokenizer_tgt": tc.tgt.sha256[:12],
                   "tokenizer_tgt_sha256": tc.tgt.sha256, "model_sha256": header.model_sha256,
                   "checkpoints": checkpoint_folder(cfg, meta), **prediction_metrics(result),
                   "source_unk": coverage.src.as_dict(), "reference_unk": coverage.tgt.as_dict(),
                   **teacher_metrics({s: list(v.values()) for s, v in tf.items()}, result)}
        metrics = null_undefined(metrics)  # strict JSON: NaN -> null + <key>_null_reason
        self.write_outputs(cfg, metrics, result, header, io)
        return Evaluated(metrics, sig, header, pred_path, tc)

    def write_outputs(self, cfg: Config, metrics: dict[str, Any], result: Evaluation,
                      header: PredictionsHeader, io: StageIO) -> None:
        """metrics.json, results.json, buckets.csv, the details directory (plot data, PNGs)
        and report.md."""
        details = Path(cfg.evaluate.details_dir)
        numbers, texts = split_results(metrics)
        Metrics(numbers).save(cfg.paths.metrics)
        Results(texts).save(cfg.paths.results)
        split = metrics["split"]
        Headline(metrics[f"{split}_perplexity"], metrics["word_error_rate"],
                 metrics["token_error_rate"]).save(cfg.paths.headline)
        write_csv(cfg.paths.buckets, result.buckets)
        write_csv(details / "failure_rates.csv", failure_rate_table(result))
        if result.groups:
            write_csv(details / "groups.csv", result.groups)
        plots.training_curve_png(Path(cfg.paths.train_log), details / "training_curve.png")
        plots.bucket_png(result.buckets, details / "buckets.png")
        plots.failure_png(failure_rate_table(result), details / "failure_rates.png")
        rel = Path(details).relative_to(Path(cfg.paths.report).parent)
        images = {t: str(rel / f) for t, f in (("training curve", "training_curve.png"),
                                               ("metrics by length bucket", "buckets.png"),
                                               ("failure-mode rates", "failure_rates.png"))}
        trained = TrainMetrics.load(cfg.paths.train_metrics)
        Path(cfg.paths.report).write_text(render_report(
            metrics, result, header.decode, self.eval_spec(cfg).rules.describe(), images,
            training_summary(trained, Path(cfg.paths.train_log))), encoding="utf-8")


def teacher_forced(cfg: Config, ids: SpecialIds,
                   io: StageIO) -> dict[str, dict[str, TeacherStats]]:
    """Per-example teacher-forced statistics on dev and test (by split, then example id)."""
    model = ModelFile.load(cfg.paths.model).build()
    out: dict[str, dict[str, TeacherStats]] = {}
    for split in ("dev", "test"):
        examples, bs = read_examples(Path(cfg.paths.encoded) / f"{split}.jsonl"), \
            cfg.decode.batch_size
        out[split] = {}
        for chunk in io.chunks(examples, bs, f"evaluate: {split} teacher-forced NLL"):
            out[split] |= teacher_forced_stats(model, list(chunk), ids, bs)
    return out


def split_results(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(numbers, texts): numbers go to metrics.json, texts (signatures, hashes) to
    results.json, so `dvc exp show` and `dvc metrics diff` list numbers only."""
    texts = {k: v for k, v in values.items() if isinstance(v, str)}
    return {k: v for k, v in values.items() if k not in texts}, texts


def checkpoint_folder(cfg: Config, meta: ModelMeta) -> str:
    """The checkpoint folder the model came from (train keys it by its training contract)."""
    return str(Path(cfg.paths.checkpoints) / checkpoint_folder_name(meta.training_contract))
