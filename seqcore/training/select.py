"""The end of a training: which weights become the model file (``train.select``), and what
the train stage writes beside it: the ledger copy and the training metrics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqcore.artifacts.model_file import ModelMeta
from seqcore.artifacts.train_log import StepLog
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.config import Config
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.dev_decode import SELECT_KEYS, best_row
from seqcore.training.loop import TrainState
from seqcore.training.setups import Setup


@dataclass(frozen=True)
class Saved:
    """What :func:`save_selected` wrote: the model file's sha256, and one warning line for
    each thing that is not as asked (a best state that cannot be read, ledger states left
    out)."""

    sha256: str
    warnings: list[str]


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def save_selected(cfg: Config, setup: Setup, ckpt: CheckpointDir, state: TrainState) -> Saved:
    """Write the model file of the selected step (``select: last``; ``best_dev``: the usable
    checkpoint of the lowest dev NLL; ``best_dev_wer``/``best_dev_per``: of the lowest dev
    decoding figure, ties as in seqcore.training.dev_decode), the ledger copy
    (``paths.ledger``) and the training metrics (``paths.train_metrics``)."""
    warnings: list[str] = []
    select = cfg.train.select
    chosen = best_row(state.history, select)  # None under last, or when nothing was evaluated
    best = ckpt.best_weights(chosen.step) if chosen is not None else None
    if best is not None:
        setup.model.load_state_dict(best.checkpoint.weights)
    elif chosen is not None:
        warnings.append(f"no usable checkpoint of best step {chosen.step}; the model file "
                        f"holds step {state.step} (the last)")
    selected_step = best.checkpoint.step if best is not None else state.step
    meta = ModelMeta(setup.signature, state.step, select, selected_step,
                     state.best_step, _finite(state.best_dev), setup.contract)
    sha = setup.save(Path(cfg.paths.model), meta)
    missing, refused = ckpt.copy_ledger(Path(cfg.paths.ledger), state.step,
                                        cfg.train.ledger_every, select in SELECT_KEYS)
    warnings += refused
    if missing:
        warnings.append(
            f"the ledger lacks the states of step(s) {', '.join(map(str, missing))} "
            f"({ckpt.ledger} was written before them, or under another train.ledger_every): "
            "the audit replays longer segments around them; train.resume: fresh rebuilds it")
    train_metrics(state, selected_step, setup.report()).save(cfg.paths.train_metrics)
    return Saved(sha, warnings)


def train_metrics(state: TrainState, selected_step: int, report: dict[str, Any]) -> TrainMetrics:
    """The training metrics of a finished state whose model file holds ``selected_step``."""
    return TrainMetrics(
        state.step, state.tokens, state.skipped, state.best_step, state.best_dev,
        state.history[-1].loss if state.history else None, selected_step,
        **dev_figures(state.history, selected_step), report=report)


def dev_figures(history: Sequence[StepLog], selected_step: int) -> dict[str, Any]:
    """The dev decoding's figures of the training metrics, from the log's rows (the train
    stage writes them from its history; the audit recomputes them from the log and the
    checkpoints): the lowest dev-sample WER and its step, and the selected step's WER and PER
    (NaN when undefined)."""
    wer = best_row(history, "best_dev_wer")
    selected = next((row for row in history if row.step == selected_step), None)
    return {"best_dev_wer": wer.dev_wer if wer else math.nan,
            "best_dev_wer_step": wer.step if wer else 0,
            "selected_dev_wer": selected.dev_wer if selected else math.nan,
            "selected_dev_per": selected.dev_per if selected else math.nan}
