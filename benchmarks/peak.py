"""Matmul peak: GFLOP/s of torch's CPU matmul, fp32 and bf16, at 1024^3 and at the models' shapes.

    python -m benchmarks.peak --threads 1 2 --json /tmp/peak.json
    python -m benchmarks.peak --quick            # 1024^3 only (what benchmarks.train needs)

Each figure is the median over ``--repeats`` timed repeats, after ``--warmup`` seconds of the
same product; a repeat runs enough products (``torch.mm`` into a preallocated output) to last
about ``--min-time`` seconds. FLOPs are 2*M*K*N per product (one multiply and one add per
term). The model shapes use M = tokens of one batch (``--tokens``, about 256 words x 8 target
tokens under the default bucketed batcher) for the forward products and the weight-gradient
product (K = M) of the backward, at d_model 128/256 and d_ff 512/1024 (the Transformer's
attention and feed-forward projections, the tied vocabulary projection) and the GRU's input
and recurrent products (hidden 256, M = batch). The 1024^3 figure is "the peak" that
benchmarks.train divides by (``--json`` writes it). A benchmark, not a test: it asserts
nothing and its figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Shape:
    """One product (M, K) @ (K, N) and where the model does it."""

    name: str
    m: int
    k: int
    n: int


def model_shapes(tokens: int, batch: int, vocab: int) -> list[Shape]:
    """The products of one training step of the default-family models (forward and weight grad)."""
    out = []
    for d, ff in ((128, 512), (256, 1024)):
        out += [Shape(f"attn q/out d{d}", tokens, d, d), Shape(f"attn kv d{d}", tokens, d, 2 * d),
                Shape(f"ff in d{d} ff{ff}", tokens, d, ff),
                Shape(f"ff out d{d} ff{ff}", tokens, ff, d),
                Shape(f"ff in wgrad d{d} ff{ff}", d, tokens, ff),
                Shape(f"vocab proj d{d}", tokens, d, vocab)]
    h, e = 256, 128
    out += [Shape(f"gru input e{e} h{h}", tokens, e, 3 * h),
            Shape(f"gru recurrent h{h} (per step)", batch, h, 3 * h)]
    return out


def gflops(shape: Shape, dtype: torch.dtype, repeats: int, warmup: float, min_time: float
           ) -> float:
    """Median GFLOP/s of ``torch.mm`` at ``shape`` over ``repeats`` timed repeats."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(shape.m, shape.k, generator=g).to(dtype)
    b = torch.randn(shape.k, shape.n, generator=g).to(dtype)
    c = torch.empty(shape.m, shape.n, dtype=dtype)
    start, calls = time.perf_counter(), 0
    while calls < 3 or time.perf_counter() - start < warmup:
        torch.mm(a, b, out=c)
        calls += 1
    per_call = (time.perf_counter() - start) / calls
    n = max(1, int(min_time / max(per_call, 1e-9)))
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            torch.mm(a, b, out=c)
        rates.append(2.0 * shape.m * shape.k * shape.n * n / (time.perf_counter() - t0) / 1e9)
    return statistics.median(rates)


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    cpu = platform.processor() or "unknown"
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("", "unknown", platform.machine()):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = line
                break
    except OSError:
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in flags]
    return {"cpu": cpu, "isa": " ".join(isa), "cores_visible": str(len(os.sched_getaffinity(0))),
            "torch": torch.__version__}


def measure(shapes: list[Shape], threads: list[int], args: argparse.Namespace
            ) -> list[dict[str, object]]:
    rows = []
    for t in threads:
        torch.set_num_threads(t)
        for s in shapes:
            for name, dtype in DTYPES.items():
                rate = gflops(s, dtype, args.repeats, args.warmup, args.min_time)
                rows.append({**asdict(s), "dtype": name, "threads": t, "gflops": rate})
    return rows


def table(rows: list[dict[str, object]], threads: list[int]) -> str:
    """One line per shape: fp32 and bf16 GFLOP/s per thread count, and bf16's speed-up."""
    head = "| product | M x K x N |" + "".join(
        f" fp32 {t}t | bf16 {t}t | bf16/fp32 {t}t |" for t in threads)
    lines = [head, "|---|---|" + "---:|---:|---:|" * len(threads)]
    by = {(r["name"], r["dtype"], r["threads"]): r["gflops"] for r in rows}
    for r in rows:
        if r["dtype"] != "fp32" or r["threads"] != threads[0]:
            continue
        cells = ""
        for t in threads:
            f, b = by[(r["name"], "fp32", t)], by[(r["name"], "bf16", t)]
            cells += f" {f:.1f} | {b:.1f} | {b / f:.2f}x |"
        lines.append(f"| {r['name']} | {r['m']}x{r['k']}x{r['n']} |{cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds per product")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per repeat")
    parser.add_argument("--tokens", type=int, default=2048, help="M: tokens of one batch")
    parser.add_argument("--batch", type=int, default=256, help="M of the GRU recurrent product")
    parser.add_argument("--vocab", type=int, default=44, help="target vocabulary size")
    parser.add_argument("--quick", action="store_true", help="1024^3 only")
    parser.add_argument("--json", type=Path, help="write the figures (and the peak) here")
    args = parser.parse_args()
    square = Shape("square 1024^3", 1024, 1024, 1024)
    shapes = [square] + ([] if args.quick else model_shapes(args.tokens, args.batch, args.vocab))
    info = machine()
    print(f"{info['cpu']} ({info['isa']}); {info['cores_visible']} cores visible; torch "
          f"{info['torch']}; median of {args.repeats} x >= {args.min_time} s\n")
    rows = measure(shapes, args.threads, args)
    print("GFLOP/s of torch.mm\n")
    print(table(rows, args.threads))
    if args.json:
        peak = {d: {str(r["threads"]): r["gflops"] for r in rows
                    if r["name"] == square.name and r["dtype"] == d} for d in DTYPES}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": info, "peak_shape": square.name,
                                         "peak_gflops": peak, "rows": rows}, indent=1) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
