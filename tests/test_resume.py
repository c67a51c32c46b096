"""Resume after SIGKILL gives bit-identical weights and per-step losses.

Each run is a child process executing CHILD (below) on tiny synthetic data: a baseline runs
uninterrupted; a killed run SIGKILLs itself at a chosen point (after step k, or between the
micro-batches of step k) and a second process resumes from the checkpoint folder. The final
state-dict hash and the per-step loss log (the checkpointed history) must be identical.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seqcore.training.checkpoint import (
    CheckpointDir, ContractMismatch, check_contract, load_blob, save_blob)
from tests.conftest import REPO

MAX_STEPS, CKPT_EVERY = 12, 4

CHILD = r'''
import hashlib, json, os, signal, sys
from dataclasses import replace
from pathlib import Path

import torch

from seqcore.config import SequenceConfig, TrainConfig
from seqcore.contract import SpecialIds
from seqcore.data.examples import Example
from seqcore.models.rnn_lm import RNNLM, RNNLMShape
from seqcore.models.transformer import Transformer, TransformerShape
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.lm import LMFeed
from seqcore.training.loop import Trainer, set_determinism

work, task, accum, kill_step, kill_micro, lr = sys.argv[1:7]
accum, kill_step, kill_micro, lr = int(accum), int(kill_step), int(kill_micro), float(lr)
set_determinism(7, 1)
ids = SpecialIds(0, 1, 2, 3)
g = torch.Generator().manual_seed(3)
cfg = TrainConfig(batch_size=4, accum_steps=accum, max_steps=%(max_steps)d, lr=lr,
                  warmup_steps=3, eval_every=4, checkpoint_every=%(ckpt_every)d, keep_last=2,
                  threads=1, select="best_dev", bptt_len=4)
if task == "s2s":
    def example(i):
        src = torch.randint(4, 12, (int(torch.randint(1, 6, (1,), generator=g)),),
                            generator=g).tolist()
        return Example(str(i), str(i), "", "", src, src[::-1], True)
    data = ([example(i) for i in range(40)], [example(i) for i in range(40, 48)])
    cfg = replace(cfg, ss_schedule="linear", ss_k=6.0, ss_cap=0.5, ss_choice="sample")
    model = Transformer(TransformerShape(12, 12, 16, 2, 1, 1, 32, 0.2, True, "sinusoidal",
                                         True, 16, 0))
    feed = Seq2SeqFeed(data, ids, SequenceConfig(), cfg)
else:
    docs = [torch.randint(4, 12, (n,), generator=g).tolist() for n in (9, 30, 14, 21, 11)]
    model = RNNLM(RNNLMShape("lstm", 12, 8, 16, 2, 0.2, 0))
    feed = LMFeed((docs, docs[:2]), ids, "token-mean", 0.1, 2, cfg.bptt_len, cfg.seed)
ckpt = CheckpointDir(Path(work) / "ckpt", cfg.keep_last)
trainer = Trainer(model, cfg, feed, ckpt, {"task": task, "lr": lr}, 16)
print("resumed:", trainer.resume(), file=sys.stderr)
if kill_step > 0:
    trainer.on_step = lambda step: step == kill_step and os.kill(os.getpid(), signal.SIGKILL)
if kill_micro > 0:
    calls, loss = [trainer.state.step * accum], feed.loss
    def counting_loss(*args):
        out = loss(*args)
        calls[0] += 1
        if calls[0] == kill_micro:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    feed.loss = counting_loss
state = trainer.run(lambda row: None)
h = hashlib.sha256()
for name, t in sorted(model.state_dict().items()):
    h.update(name.encode() + t.detach().contiguous().numpy().tobytes())
Path(work, "result.json").write_text(json.dumps(
    {"weights": h.hexdigest(), "history": state.history, "skipped": state.skipped}))
''' % {"max_steps": MAX_STEPS, "ckpt_every": CKPT_EVERY}


def child(work: Path, task: str, accum: int = 1, kill_step: int = 0, kill_micro: int = 0,
          lr: float = 1.0) -> subprocess.CompletedProcess:
    work.mkdir(parents=True, exist_ok=True)
    script = work / "child.py"
    script.write_text(CHILD)
    return subprocess.run([sys.executable, str(script), str(work), task, str(accum),
                           str(kill_step), str(kill_micro), str(lr)],
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


def result(work: Path) -> dict:
    return json.loads((work / "result.json").read_text())


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    """Uninterrupted runs: seq2seq with accum 1 and 2, and the lm task."""
    out = {}
    for task, accum in (("s2s", 1), ("s2s", 2), ("lm", 1)):
        work = tmp_path_factory.mktemp(f"base-{task}-{accum}")
        res = child(work, task, accum)
        assert res.returncode == 0, res.stderr
        out[task, accum] = work
    return out


def killed_then_resumed(work: Path, task: str, accum: int, kill_step: int,
                        kill_micro: int) -> str:
    first = child(work, task, accum, kill_step, kill_micro)
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert not (work / "result.json").exists()
    second = child(work, task, accum)
    assert second.returncode == 0, second.stderr
    return second.stderr


@pytest.mark.parametrize(("name", "task", "accum", "kill_step", "kill_micro", "resumed_from"), [
    ("mid-epoch-between-checkpoints", "s2s", 1, 6, 0, "ckpt-00000004.pt"),
    ("just-after-a-checkpoint", "s2s", 1, 4, 0, "ckpt-00000004.pt"),
    ("just-before-a-checkpoint", "s2s", 1, 7, 0, "ckpt-00000004.pt"),
    ("inside-an-accumulation-cycle", "s2s", 2, 0, 2 * 5 + 1, "ckpt-00000004.pt"),
    ("lm-with-carried-state", "lm", 1, 6, 0, "ckpt-00000004.pt"),
])
def test_resume_after_sigkill_gives_identical_weights_and_losses(
    tmp_path: Path, baselines: dict, name: str, task: str, accum: int, kill_step: int,
    kill_micro: int, resumed_from: str,
) -> None:
    log = killed_then_resumed(tmp_path, task, accum, kill_step, kill_micro)
    assert f"resumed: {resumed_from}" in log
    base, got = result(baselines[task, accum]), result(tmp_path)
    assert len(got["history"]) == MAX_STEPS
    assert got["history"] == base["history"]
    assert got["weights"] == base["weights"]


def test_truncated_latest_checkpoint_is_reported_and_the_previous_one_used(
    tmp_path: Path, baselines: dict, capsys: pytest.CaptureFixture,
) -> None:
    work = tmp_path / "run"
    shutil.copytree(baselines["s2s", 1] / "ckpt", work / "ckpt")
    latest = work / "ckpt" / f"ckpt-{MAX_STEPS:08d}.pt"
    latest.write_bytes(latest.read_bytes()[:1000])  # a crash mid-write without the rename
    found = CheckpointDir(work / "ckpt", 2).latest_good()
    assert found is not None and found.path.name == f"ckpt-{MAX_STEPS - CKPT_EVERY:08d}.pt"
    assert "truncated or corrupted" in found.skipped[0] and latest.name in found.skipped[0]
    assert "skipping unusable checkpoint" in capsys.readouterr().err
    res = child(work, "s2s", 1)  # resumes from the previous good one and replays 4 steps
    assert res.returncode == 0, res.stderr
    assert "skipping unusable checkpoint" in res.stderr
    assert result(work) == result(baselines["s2s", 1])


def test_checkpoint_from_another_contract_is_refused_with_a_diff(
    tmp_path: Path, baselines: dict,
) -> None:
    shutil.copytree(baselines["s2s", 1] / "ckpt", tmp_path / "ckpt")
    res = child(tmp_path, "s2s", 1, lr=2.0)
    assert res.returncode != 0
    assert "ContractMismatch" in res.stderr and "lr: checkpoint=1.0 now=2.0" in res.stderr
    with pytest.raises(ContractMismatch, match="task: checkpoint='g2p' now='lm'"):
        check_contract({"task": "g2p"}, {"task": "lm"}, "x")


class _NotAllowed:
    """An arbitrary class: a weights_only load must refuse to rebuild it."""


def test_checkpoint_loading_never_unpickles_arbitrary_objects(tmp_path: Path) -> None:
    save_blob(tmp_path / "evil.pt", {"x": torch.zeros(1), "obj": _NotAllowed()})
    with pytest.raises(Exception, match="(?i)weights.only|unpickl"):
        load_blob(tmp_path / "evil.pt")
    save_blob(tmp_path / "ok.pt", {"x": torch.ones(2), "n": 3, "t": (1, "a")})
    assert load_blob(tmp_path / "ok.pt")["n"] == 3
