"""The end of a training (seqcore/training/select.py): the model file holds the selected
step's weights with what it records about them, the ledger copy beside it, the training
metrics, and a warning for each thing that is not as asked."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from seqcore.artifacts.model_file import ModelMeta
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.config import Config, PathsConfig
from seqcore.training.checkpoint import Checkpoint, ledger_files
from seqcore.training.dev_decode import best_row
from seqcore.training.loop import TrainLoop
from seqcore.training.select import save_selected
from seqcore.training.setups import Setup
from tests.factories import s2s_loop
from tests.training.runs import same_state, same_weights, trained


def saving(loop: TrainLoop, tmp: Path, select: str) -> tuple[Config, Setup, list[ModelMeta]]:
    """The config, a setup around ``loop`` whose ``save`` records the metadata it is given
    (its sha256: "sha-N" for the N-th call), and that record."""
    metas: list[ModelMeta] = []

    def save(path: Path, meta: ModelMeta) -> str:
        assert path == tmp / "model.pt"
        metas.append(meta)
        return f"sha-{len(metas)}"

    paths = PathsConfig(model=str(tmp / "model.pt"), ledger=str(tmp / "ledger"),
                        train_metrics=str(tmp / "train_metrics.json"))
    cfg = Config(train=dataclasses.replace(loop.cfg, select=select), paths=paths)
    return cfg, Setup(loop.model, loop.feed, loop.contract, 16, "sig", save,
                      lambda: {"k": 1.5}), metas


def test_best_dev_saves_the_best_steps_weights_records_them_and_copies_the_ledger(
        tmp_path: Path) -> None:
    # dev NLL lowest at step 2 (of 2, 4, 6) at this rate; checkpoints every step, the last 2
    # kept: the best step's weights come from best.pt
    loop = trained(s2s_loop(tmp_path / "run", 6, 4, eval_every=2, select="best_dev", lr=3e-2,
                            ledger_every=2))
    state = loop.state
    chosen = best_row(state.history, "best_dev")
    assert chosen is not None and chosen.step == state.best_step < 6  # a test that can tell
    cfg, setup, metas = saving(loop, tmp_path, "best_dev")
    saved = save_selected(cfg, setup, loop.ckpt, state)
    assert (saved.sha256, saved.warnings) == ("sha-1", [])
    assert metas == [ModelMeta("sig", 6, "best_dev", chosen.step, state.best_step,
                               state.best_dev, loop.contract)]
    best = Checkpoint.load(loop.ckpt.root / "best.pt")
    assert best.step == chosen.step and same_state(best.weights, loop.model.state_dict())
    assert sorted(p.name for p in (tmp_path / "ledger").iterdir()) == sorted(
        [name for p in ledger_files(loop.ckpt.ledger) for name in (p.name, p.name + ".sha256")]
        + ["best.pt", "best.pt.sha256"])
    metrics = TrainMetrics.load(tmp_path / "train_metrics.json")
    assert (metrics.steps, metrics.tokens, metrics.skipped_steps, metrics.best_step,
            metrics.final_loss, metrics.selected_step, metrics.report) == (
        6, state.tokens, 0, state.best_step, state.history[-1].loss, chosen.step, {"k": 1.5})
    assert metrics.best_dev_nll == state.best_dev
    wer = best_row(state.history, "best_dev_wer")  # the dev decoding's figures beside them
    assert wer is not None and (metrics.best_dev_wer, metrics.best_dev_wer_step) == (
        wer.dev_wer, wer.step)
    assert (metrics.selected_dev_wer, metrics.selected_dev_per) == (chosen.dev_wer,
                                                                    chosen.dev_per)


def test_last_without_dev_records_no_best_and_a_lost_best_or_ledger_state_is_a_warning(
        tmp_path: Path) -> None:
    last = trained(s2s_loop(tmp_path / "last", 3))  # no dev set: no evaluation, best inf
    before = {k: v.clone() for k, v in last.model.state_dict().items()}
    cfg, setup, metas = saving(last, tmp_path / "a", "last")
    assert save_selected(cfg, setup, last.ckpt, last.state).warnings == []
    assert metas[0].selected_step == 3 and metas[0].best_dev_nll is None
    assert same_state(before, last.model.state_dict())
    assert TrainMetrics.load(tmp_path / "a" / "train_metrics.json").best_dev_nll is None

    run = trained(s2s_loop(tmp_path / "best", 6, 4, eval_every=2, select="best_dev", lr=3e-2,
                           keep_last=1, ledger_every=2))
    step = run.state.best_step
    (run.ckpt.root / "best.pt").unlink()
    for lost in (2, 4):
        (run.ckpt.ledger / f"ckpt-{lost:08d}.pt").unlink()
    final = {k: v.clone() for k, v in run.model.state_dict().items()}
    cfg, setup, metas = saving(run, tmp_path / "b", "best_dev")
    warnings = save_selected(cfg, setup, run.ckpt, run.state).warnings
    assert warnings[0] == (f"no usable checkpoint of best step {step}; the model file holds "
                           "step 6 (the last)")
    assert warnings[1:] == [
        f"the ledger lacks the states of step(s) 2, 4 ({run.ckpt.ledger} was written before "
        "them, or under another train.ledger_every): the audit replays longer segments around "
        "them; train.resume: fresh rebuilds it"]
    assert metas[0].selected_step == 6 and math.isfinite(metas[0].best_dev_nll)
    assert same_state(final, run.model.state_dict())
    assert not same_weights(run.model, last.model)
