"""The end of a training: which weights become the model file (``train.select``), and what
the train stage writes beside it: the ledger copy and the training metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from seqcore.artifacts.model_file import ModelMeta
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.config import Config
from seqcore.training.checkpoint import CheckpointDir
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
    """Write the model file of the selected step (``select: last``, or ``best_dev``: the
    usable checkpoint of the lowest dev NLL), the ledger copy (``paths.ledger``) and the
    training metrics (``paths.train_metrics``)."""
    warnings: list[str] = []
    best_dev = cfg.train.select == "best_dev"
    best = ckpt.best_weights(state.best_step) if best_dev else None
    if best is not None:
        setup.model.load_state_dict(best.checkpoint.weights)
    elif best_dev and state.best_step:
        warnings.append(f"no usable checkpoint of best step {state.best_step}; the model file "
                        f"holds step {state.step} (the last)")
    selected_step = best.checkpoint.step if best is not None else state.step
    meta = ModelMeta(setup.signature, state.step, cfg.train.select, selected_step,
                     state.best_step, _finite(state.best_dev), setup.contract)
    sha = setup.save(Path(cfg.paths.model), meta)
    missing, refused = ckpt.copy_ledger(Path(cfg.paths.ledger), state.step,
                                        cfg.train.ledger_every, best_dev)
    warnings += refused
    if missing:
        warnings.append(
            f"the ledger lacks the states of step(s) {', '.join(map(str, missing))} "
            f"({ckpt.ledger} was written before them, or under another train.ledger_every): "
            "the audit replays longer segments around them; train.resume: fresh rebuilds it")
    TrainMetrics(state.step, state.tokens, state.skipped, state.best_step, state.best_dev,
                 state.history[-1].loss if state.history else None, selected_step,
                 setup.report()).save(cfg.paths.train_metrics)
    return Saved(sha, warnings)
