"""Training throughput for 1..N data-parallel processes on CPU (gloo) and CUDA (NCCL).

    python -m benchmarks.train_ddp --nproc 1 2 --device cpu --steps 30
    python -m benchmarks.train_ddp --nproc 1 2 --device cuda --amp none bf16 fp16

The model comes from params.yaml (model.*, train.batch_size per rank, train.threads per
rank); the data is G2P-shaped random pairs (source and target 3-12 tokens), so no pipeline
output is needed. Each rank runs the real TrainLoop step (sharded sampler, all-reduced
denominator and gradients). Tokens are valid label tokens of the *global* batch per second,
timed after ``--warmup`` steps. A benchmark, not a test: it asserts nothing and its figures
depend on the machine and its load (on 2 shared cores, 2 CPU processes cannot be faster).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import torch

from seqcore.config import Config, load_config
from seqcore.contract import SpecialIds
from seqcore.data.examples import Example
from seqcore.determinism import resolve_device, set_determinism
from seqcore.models import build_model
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.distributed import World, backend_for
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TrainLoop


def random_pairs(n: int, vocab: int, seed: int) -> list[Example]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        a, b = (int(x) for x in torch.randint(3, 13, (2,), generator=g))
        src = torch.randint(4, vocab, (a,), generator=g).tolist()
        tgt = torch.randint(4, vocab, (b,), generator=g).tolist()
        out.append(Example(str(i), str(i), "", "", src, tgt, True))
    return out


def worker(rank: int, cfg: Config, kind: str, amp: str, nproc: int, steps: int, warmup: int,
           init: str, out: str) -> None:
    """One rank: ``warmup`` untimed then ``steps`` timed optimisation steps."""
    backend = backend_for(kind, nproc)
    if nproc > 1:
        import torch.distributed as dist  # noqa: PLC0415

        if kind == "cuda":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, init_method=init, rank=rank, world_size=nproc)
    world = World(rank, nproc, rank, backend) if nproc > 1 else World()
    device = resolve_device(kind, rank)
    set_determinism(cfg.train.seed, cfg.train.threads, device)
    tc = dataclasses.replace(cfg.train, amp=amp, max_steps=steps + warmup, device=kind)
    ids = SpecialIds(0, 1, 2, 3)
    model = build_model(cfg.model, 40, 44, 0, 64).to(device)
    feed = Seq2SeqFeed((random_pairs(20000, 40, 5), []), ids, cfg.sequence, tc, device, world)
    loop = TrainLoop(model, tc, feed, CheckpointDir(Path(out) / "ckpt", 1), {}, 128, world)
    tokens = 0
    for i in range(steps + warmup):
        if i == warmup:
            if kind == "cuda":
                torch.cuda.synchronize()
            start, tokens = time.perf_counter(), 0
        tokens += int(loop.train_step().tokens)
    if kind == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if rank == 0:
        (Path(out) / "result.txt").write_text(f"{tokens / seconds} {steps / seconds}")
    if nproc > 1:
        torch.distributed.destroy_process_group()


def measure(cfg: Config, kind: str, amp: str, nproc: int, steps: int, warmup: int) -> tuple[float,
                                                                                        float]:
    """(global tokens/s, steps/s)."""
    import torch.multiprocessing as mp  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        args = (cfg, kind, amp, nproc, steps, warmup, f"file://{tmp}/rdzv", tmp)
        if nproc == 1:
            worker(0, *args)
        else:
            mp.spawn(worker, args=args, nprocs=nproc)
        tok, sps = (float(x) for x in (Path(tmp) / "result.txt").read_text().split())
    return tok, sps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", nargs="+", default=["cpu"], choices=["cpu", "cuda"])
    parser.add_argument("--amp", nargs="+", default=["none"], choices=["none", "bf16", "fp16"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    cfg = load_config(args.params)
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    print(f"model {cfg.model.family}, batch {cfg.train.batch_size}/rank, threads "
          f"{cfg.train.threads}/rank, torch {torch.__version__}, GPU: {name}\n")
    print("| device | amp | processes | global tokens/s | steps/s | speed-up |")
    print("|---|---|---:|---:|---:|---:|")
    for kind in args.device:
        for amp in args.amp:
            if amp == "fp16" and kind == "cpu":
                continue
            base = None
            for n in args.nproc:
                tok, sps = measure(cfg, kind, amp, n, args.steps, args.warmup)
                base = base or tok
                print(f"| {kind} | {amp} | {n} | {tok:.0f} | {sps:.2f} | {tok / base:.2f}x |",
                      flush=True)


if __name__ == "__main__":
    main()
