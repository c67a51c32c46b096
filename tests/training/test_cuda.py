"""CUDA rules (issue 16): placement, the fp16 scaler path, bitwise resume on one GPU, and a
GPU-trained model decoding on the CPU. Marked ``cuda``; skipped where no GPU is visible."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seqcore.config import DecodeConfig, ModelConfig, SequenceConfig, TrainConfig, TransformerConfig
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.determinism import resolve_device, set_determinism
from seqcore.models import build_model
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TrainLoop
from seqcore.artifacts.model_file import ModelFile, ModelInfo, ModelMeta
from tests.factories import IDS, REPO, examples

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MODEL = ModelConfig(transformer=TransformerConfig(d_model=32, n_heads=2, enc_layers=1,
                                                  dec_layers=1, d_ff=64, dropout=0.1))
INFO = ModelInfo(MODEL, 12, 12, 0, 16)


def loop(tmp: Path, amp: str = "none", max_steps: int = 6,
         schedule: str = "cosine") -> TrainLoop:
    device = resolve_device("cuda")
    set_determinism(7, 1, device)
    cfg = TrainConfig(batch_size=8, max_steps=max_steps, warmup_steps=2, eval_every=100,
                      checkpoint_every=3, threads=1, amp=amp, device="cuda",
                      schedule=schedule)  # type: ignore[arg-type]
    model = build_model(MODEL, 12, 12, 0, 16).to(device)
    data = examples(64, seed=3, high=12, shift=0), examples(8, seed=3, high=12, shift=0)
    feed = Seq2SeqFeed(data, IDS, SequenceConfig(), cfg, device)
    return TrainLoop(model, cfg, feed, CheckpointDir(tmp, 3), {"t": 1}, 32)


def test_model_batches_and_optimizer_state_live_on_the_configured_device(tmp_path: Path) -> None:
    trainer = loop(tmp_path)
    trainer.resume()
    batch = trainer.feed.draw()
    assert batch.src.is_cuda and batch.tf.labels.is_cuda
    trainer.train_step()
    assert all(p.is_cuda for p in trainer.model.parameters())
    assert all(t.is_cuda for s in trainer.opt.state.values() for k, t in s.items()
               if torch.is_tensor(t) and k != "step")


def test_fp16_autocast_trains_through_the_grad_scaler_and_skips_non_finite_steps(
        tmp_path: Path) -> None:
    trainer = loop(tmp_path, amp="fp16")
    trainer.resume()
    for _ in range(3):
        row = trainer.train_step()
    assert torch.isfinite(torch.tensor(row.loss)) and trainer.scaler.is_enabled()
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.scaler.update(2.0**40)  # the scaled fp16 backward overflows: the step is skipped
    row = trainer.train_step()
    assert row.skipped == 1 and trainer.scaler.get_scale() == 2.0**39  # skipped, scale halved
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def rows(history: list) -> list[list]:
    """Log rows with NaN (no evaluation) as None: NaN never equals itself."""
    return [[None if isinstance(v, float) and math.isnan(v) else v for v in h.row()]
            for h in history]


def test_continuing_a_finished_run_on_one_gpu_equals_the_straight_run(tmp_path: Path) -> None:
    # issue 53: constant schedule (cosine depends on max_steps); the first run's closing
    # evaluation at step 3 leaves the history when it is continued (docs/training.md)
    straight = loop(tmp_path / "a", schedule="constant")
    straight.resume()
    straight.run(lambda entry, tokens_per_s: None)
    first = loop(tmp_path / "b", max_steps=3, schedule="constant")
    first.resume()
    first.run(lambda entry, tokens_per_s: None)
    second = loop(tmp_path / "b", schedule="constant")
    assert second.resume() == "ckpt-00000003.pt"
    second.run(lambda entry, tokens_per_s: None)
    for a, b in zip(straight.model.parameters(), second.model.parameters()):
        assert torch.equal(a, b)
    assert rows(straight.state.history) == rows(second.state.history)


def test_a_killed_training_on_the_gpu_resumes_to_identical_weights_and_log(
        tmp_path: Path) -> None:
    # the CPU's SIGKILL test (tests/training/test_resume.py) with the same worker, on the GPU
    jobs = [{"work": str(tmp_path / w), "task": "s2s", "accum": 1, "kill_step": k,
             "kill_micro": 0, "lr": 1.0, "device": "cuda"}
            for w, k in (("straight", 0), ("killed", 6), ("killed", 0))]
    res = subprocess.run([sys.executable, "-m", "tests.programs.resume_worker",
                          json.dumps(jobs)], cwd=REPO, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == [0, -signal.SIGKILL, 0]
    assert "resumed: ckpt-00000004.pt" in (tmp_path / "killed" / "stderr.txt").read_text()
    straight, resumed = (json.loads((tmp_path / w / "result.json").read_text())
                         for w in ("straight", "killed"))
    assert resumed["history"] == straight["history"]
    assert resumed["weights"] == straight["weights"]


def test_a_cuda_trained_model_decodes_on_the_cpu(tmp_path: Path) -> None:
    trainer = loop(tmp_path)
    trainer.resume()
    trainer.run(lambda entry, tokens_per_s: None)
    meta = ModelMeta("sig", 3, "last", 3, 0, None, {"train.device_kind": "cuda"})
    ModelFile(trainer.model.state_dict(), meta, INFO).save(tmp_path / "model.pt")
    saved = ModelFile.load(tmp_path / "model.pt")
    model = saved.build()
    assert all(p.device.type == "cpu" for p in model.parameters())
    dec = DecodeConfig(max_len=12)
    rows = decode_examples(model, examples(16, seed=3, high=12, shift=0), make_decoder(dec, IDS),
                           IDS, _IdentityTok(), 8)
    assert len(rows) == 16 and all(0 <= t < 12 for r in rows for t in r.tokens)
    assert saved.meta == meta


class _IdentityTok:
    """Just enough of a tokenizer for decode_examples: ids printed as text."""

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))

    def piece(self, i: int) -> str:
        return str(i)
