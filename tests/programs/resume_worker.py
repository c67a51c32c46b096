"""Train tiny models in forked jobs, some of which SIGKILL themselves (test_resume.py).

    python -m tests.programs.resume_worker JOBS_JSON   # JOBS_JSON: a list of ``train`` kwargs

Each job is forked from this interpreter before anything is trained (the torch import is paid
once); the checkpoint folder is all a killed job passes to the job that resumes it. A finished
job writes ``result.json`` (state-dict hash, history, skipped steps) beside its ``stderr.txt``;
the last line printed is the jobs' exit codes as a JSON list (-9 = SIGKILL).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import traceback
from dataclasses import replace
from pathlib import Path

import torch

from seqcore.config import SequenceConfig, TrainConfig
from seqcore.determinism import set_determinism
from seqcore.tasks.lm.feed import LMFeed
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TrainLoop
from tests.factories import IDS, examples, tiny_lm, tiny_model

MAX_STEPS, CKPT_EVERY = 12, 4
SEED = 7


def train(work: str, task: str, accum: int, kill_step: int, kill_micro: int, lr: float,
          device: str = "cpu") -> None:
    """Train ``task`` ("s2s" or "lm") in ``work`` on ``device``, resuming from its
    checkpoints; SIGKILL this process after step ``kill_step`` or at micro-batch
    ``kill_micro`` when they are > 0."""
    where = torch.device(device)
    set_determinism(SEED, 1, where)
    cfg = TrainConfig(amp="none", batch_size=4, accum_steps=accum, max_steps=MAX_STEPS, lr=lr,
                      warmup_steps=3, eval_every=4, checkpoint_every=CKPT_EVERY, keep_last=2,
                      threads=1, select="best_dev", bptt_len=4, device=device)
    if task == "s2s":
        pairs = examples(48, seed=3, high=12, shift=0, lengths=(1, 5))
        cfg = replace(cfg, ss_schedule="linear", ss_k=6.0, ss_cap=0.5, ss_choice="sample")
        model: torch.nn.Module = tiny_model(dropout=0.2, enc_layers=1, dec_layers=1, max_len=16,
                                            seed=SEED).to(where).train()
        feed: Seq2SeqFeed | LMFeed = Seq2SeqFeed((pairs[:40], pairs[40:]), IDS,
                                                 SequenceConfig(), cfg, where)
    else:
        g = torch.Generator().manual_seed(3)
        docs = [torch.randint(4, 12, (n,), generator=g).tolist() for n in (9, 30, 14, 21, 11)]
        model = tiny_lm("lstm", hidden=16, layers=2, dropout=0.2, seed=SEED).train()
        feed = LMFeed((docs, docs[:2]), IDS, "token-mean", 0.1, 2, cfg.bptt_len, cfg.seed)
    trainer = TrainLoop(model, cfg, feed, CheckpointDir(Path(work) / "ckpt", cfg.keep_last),
                        {"task": task, "lr": lr}, 16)
    print("resumed:", trainer.resume(), file=sys.stderr)
    if kill_step > 0:
        trainer.on_step = lambda step: step == kill_step and os.kill(os.getpid(), signal.SIGKILL)
    if kill_micro > 0:  # SIGKILL between the micro-batches of one accumulation cycle
        calls, loss = [trainer.state.step * accum], feed.loss

        def counting_loss(*args: object) -> object:
            out = loss(*args)
            calls[0] += 1
            if calls[0] == kill_micro:
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        feed.loss = counting_loss  # type: ignore[method-assign]
    state = trainer.run(lambda entry, tokens_per_s: None)
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode() + t.detach().cpu().contiguous().numpy().tobytes())
    Path(work, "result.json").write_text(json.dumps({
        "weights": h.hexdigest(), "history": [e.row() for e in state.history],
        "skipped": state.skipped}))


def run_forked(jobs: list[dict]) -> list[int]:
    """Run each job in a child forked from this process; returns the exit codes."""
    statuses = []
    for job in jobs:
        Path(job["work"]).mkdir(parents=True, exist_ok=True)
        pid = os.fork()
        if pid == 0:
            with open(Path(job["work"]) / "stderr.txt", "a") as err:
                os.dup2(err.fileno(), 2)
                try:
                    train(**job)
                except BaseException:
                    traceback.print_exc()
                    sys.stderr.flush()
                    os._exit(1)
                sys.stderr.flush()
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        statuses.append(-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                        else os.WEXITSTATUS(status))
    return statuses


if __name__ == "__main__":
    torch.use_deterministic_algorithms(True)  # its first call imports torch._inductor (slow)
    print(json.dumps(run_forked(json.loads(sys.argv[1]))))
