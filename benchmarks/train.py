"""Training throughput with the real pipeline pieces: tokens/s, MFU, PAD share, memory, step parts.

    python -m benchmarks.train --data-root /path/to/repo --peak-json /tmp/peak.json
    python -m benchmarks.train --shape 3x3-256-1024 --family transformer --amp none bf16
    python -m benchmarks.train --loss-curve 200 --shape 3x3-256-1024 --threads 2
    python -m benchmarks.train --shape 3x3-256-1024 --attention-kernel auto math --amp bf16

Every configuration (family x amp x threads) runs in a fresh process, so its peak resident
memory (``ru_maxrss``) is its own. Each builds what ``dvc repro`` builds: params.yaml's config
(``--shape``/``--rnn-shape``, ``--attention-kernel``, ``--amp``, ``--threads`` replace
model.transformer.* / model.rnn.*, train.amp and train.threads),
``seq2seq_setup`` (the model builder and the length-bucketed ``Seq2SeqFeed`` over the encoded
training split), and the real ``TrainLoop``; it times ``--steps`` calls of
``TrainLoop.train_step`` after ``--warmup`` untimed ones (dev evaluation and checkpoints,
every 500 steps in the default run, are not included).

Time per part of a step: the loop's own objects are wrapped with timers (``feed.draw`` =
data, ``feed.loss`` = forward under autocast, ``_unscale_clip`` = clip, ``optimizer.step`` =
optimiser); backward is the remainder of the step (``.backward()`` plus zero_grad and the lr
update, both negligible).

Model FLOPs (MFU = model FLOPs per second / the measured fp32 or bf16 peak of torch.mm at
1024^3 with the same thread count, from ``--peak-json`` or measured in the process): a
training step costs 3x the forward (backward = 2x), and the forward costs, over the *real*
(non-PAD) positions of each sequence (s source and t target positions):
- Transformer: 2 x the weights each position passes through (encoder layers per source
  position; decoder layers per target position, except the cross-attention K/V projection,
  which runs per source position and decoder layer; the tied output projection d x V per
  target position), plus attention 4d(s^2) per encoder layer and 4d(t^2 + t s) per decoder
  layer (QK^T and AV). So the matmul part is the familiar 6 x non-embedding params x tokens,
  each weight counted against the tokens it actually sees.
- GRU/LSTM: 2 x the gate weights (3 or 4 gates, input and recurrent) per position and
  direction, the attention key projection per source position, 4H(t s) attention, the
  combine (2H x H) and output (H x V) projections per target position, the bridge per sequence.
Biases, LayerNorm, softmax, dropout, embedding lookups and the loss are not counted. As a
check, one extra untimed step runs under ``torch.utils.flop_counter.FlopCounterMode``; the
"counted / analytic" column divides its count by the padded analytic count of that step
(1.000 for the Transformer with dropout > 0 -- without dropout SDPA runs a CPU flash kernel
that the counter does not see; about 0.99 for the GRU, whose backward skips the gradient of
the encoder's zero initial state).
"HFU" uses the padded positions instead (what the hardware multiplies), so MFU/HFU is the
share of matmul work spent on real tokens. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from seqcore.kernels import profile_env

AMP_DTYPE = {"none": "fp32", "bf16": "bf16"}
PARTS = ("data", "forward", "backward", "clip", "optimiser")


# -- configuration -------------------------------------------------------------------------
def parse_shape(text: str) -> tuple[int, int, int, int]:
    """``3x3-256-1024`` -> (enc layers, dec layers, d_model or embed_dim, d_ff or hidden)."""
    m = re.fullmatch(r"(\d+)x(\d+)-(\d+)-(\d+)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: expected ENCxDEC-D-FF, "
                                          "e.g. 3x3-256-1024")
    return tuple(int(g) for g in m.groups())  # type: ignore[return-value]


def bench_config(params: str, spec: dict[str, Any]) -> Any:
    """params.yaml's config with the spec's family, shapes, amp and threads."""
    from seqcore.config import load_config  # noqa: PLC0415

    cfg = load_config(params)
    model = dataclasses.replace(cfg.model, family=spec["family"])
    if spec["shape"]:
        enc, dec, d, ff = spec["shape"]
        model = dataclasses.replace(model, transformer=dataclasses.replace(
            model.transformer, enc_layers=enc, dec_layers=dec, d_model=d, d_ff=ff))
    if spec.get("kernel"):
        model = dataclasses.replace(model, transformer=dataclasses.replace(
            model.transformer, attention_kernel=spec["kernel"]))
    if spec["rnn_shape"]:
        enc, dec, e, h = spec["rnn_shape"]
        model = dataclasses.replace(model, rnn=dataclasses.replace(
            model.rnn, enc_layers=enc, dec_layers=dec, embed_dim=e, hidden=h))
    train = dataclasses.replace(cfg.train, amp=spec["amp"], threads=spec["threads"],
                                device=spec.get("device", cfg.train.device),
                                cuda_graphs=spec.get("graphs", cfg.train.cuda_graphs),
                                cpu_kernels=spec.get("cpu_kernels", cfg.train.cpu_kernels),
                                batch_size=spec.get("batch_size") or cfg.train.batch_size,
                                max_steps=max(cfg.train.max_steps, spec["steps"] + 1))
    return dataclasses.replace(cfg, model=model, train=train)


def shape_text(cfg: Any) -> str:
    if cfg.model.family == "transformer":
        t = cfg.model.transformer
        return (f"{t.enc_layers}x{t.dec_layers}-{t.d_model}-{t.d_ff} h{t.n_heads} "
                f"{t.attention_kernel}")
    r = cfg.model.rnn
    return f"{r.enc_layers}x{r.dec_layers}-e{r.embed_dim}-h{r.hidden} {r.attention}"


# -- analytic FLOPs ------------------------------------------------------------------------
def forward_flops(model: Any, vocab: int, s: torch.Tensor, t: torch.Tensor,
                  s_real: torch.Tensor | None = None) -> float:
    """Forward matmul FLOPs of a batch whose sequences have s source and t target positions.

    Args:
        model: the model section (ModelConfig) of the config.
        s, t: (B,) float positions per sequence (real or padded).
        s_real: (B,) real source positions, where the recurrent encoder runs (it packs its
            input, so it never runs over PAD); default s.
    """
    if model.family == "transformer":
        m = model.transformer
        d, ff, le, ld = m.d_model, m.d_ff, m.enc_layers, m.dec_layers
        per_src = le * (4 * d * d + 2 * d * ff) + ld * 2 * d * d
        per_tgt = ld * (6 * d * d + 2 * d * ff) + d * vocab
        attn = 4 * d * (le * s * s + ld * (t * t + t * s))
        return float((2 * (per_src * s + per_tgt * t) + attn).sum())
    r = model.rnn
    g = 3 if model.family == "gru" else 4
    e, h, le, ld = r.embed_dim, r.hidden, r.enc_layers, r.dec_layers
    half = h // 2
    enc = 2 * g * (e * half + half * half) + (le - 1) * 2 * g * (h * half + half * half)
    dec = g * (e * h + h * h) + (ld - 1) * g * (2 * h * h)
    per_src = enc + (h * h if r.attention != "dot" else 0)
    per_tgt = dec + 2 * h * h + h * vocab + (h * h if r.attention == "additive" else 0)
    pair = 2 * h  # per (target, source) pair: the score (h . k, or v . tanh) and the context
    bridge = h * h * (2 if g == 4 else 1)
    s_enc = s if s_real is None else s_real
    return float((2 * (enc * s_enc + (per_src - enc) * s + per_tgt * t + pair * s * t
                       + bridge)).sum())


# -- one configuration, in its own process -------------------------------------------------
class Timers:
    """Accumulated seconds per part, and the positions of the drawn batches."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.batches: list[tuple[torch.Tensor, torch.Tensor, int, int]] = []

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any) -> Any:
            t0 = time.perf_counter()
            out = fn(*a)
            self.seconds[part] += time.perf_counter() - t0
            if part == "data":  # real source/target positions per sequence, and padded widths
                self.batches.append((out.src_mask.sum(1).float(), out.tf.mask.sum(1).float(),
                                     out.src_mask.shape[1], out.tf.mask.shape[1]))
            return out
        return timed

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


def padded_flops(cfg: Any, vocab: int, b: tuple[torch.Tensor, torch.Tensor, int, int]) -> float:
    """Training FLOPs of one drawn batch over its padded positions (what is multiplied)."""
    return 3 * forward_flops(cfg.model, vocab, torch.full_like(b[0], b[2]),
                             torch.full_like(b[1], b[3]), b[0])


def build_loop(spec: dict[str, Any], tmp: str) -> tuple[Any, Any, int]:
    """(TrainLoop, config, target vocab) built as the train stage builds them."""
    from seqcore.artifacts.tokenizer_contract import TokenizerContract  # noqa: PLC0415
    from seqcore.data.examples import read_examples  # noqa: PLC0415
    from seqcore.determinism import resolve_device, set_determinism  # noqa: PLC0415
    from seqcore.training.checkpoint import CheckpointDir  # noqa: PLC0415
    from seqcore.training.loop import TrainLoop  # noqa: PLC0415
    from seqcore.training.setups import seq2seq_setup  # noqa: PLC0415

    cfg = bench_config(spec["params"], spec)
    root = Path(spec["data_root"])
    tc = TokenizerContract.load(root / cfg.paths.tokenizer / "contract.json")
    enc = root / cfg.paths.encoded
    data = (read_examples(enc / "train.jsonl"), [])
    set_determinism(cfg.train.seed, cfg.train.threads)
    # spec "device" (benchmarks.gpu): the model and batches there; the CPU by default
    setup = seq2seq_setup(cfg, tc, "benchmark", data, resolve_device(cfg.train.device))
    loop = TrainLoop(setup.model, cfg.train, setup.feed, CheckpointDir(Path(tmp), 1),
                     setup.contract, setup.d_model)
    setup.model.train()
    return loop, cfg, tc.tgt.vocab_size


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Warm up, then time ``steps`` real training steps; figures as a dict."""
    with tempfile.TemporaryDirectory() as tmp:
        loop, cfg, vocab = build_loop(spec, tmp)
        if spec["loss_curve"]:
            return {"losses": [loop.train_step().loss for _ in range(spec["loss_curve"])]}
        timers = Timers()
        feed = loop.feed
        feed.draw, feed.loss = timers.wrap("data", feed.draw), timers.wrap("forward", feed.loss)
        loop._unscale_clip = timers.wrap("clip", loop._unscale_clip)
        loop.opt.step = timers.wrap("optimiser", loop.opt.step)
        with FlopCounterMode(display=False) as counter:  # one extra untimed step
            loop.train_step()
        check = counter.get_total_flops() / sum(padded_flops(cfg, vocab, b)
                                                for b in timers.batches)
        for _ in range(spec["warmup"]):
            loop.train_step()
        timers.reset()
        tokens, losses, t0 = 0, [], time.perf_counter()
        for _ in range(spec["steps"]):
            row = loop.train_step()
            tokens += int(row.tokens)
            losses.append(row.loss)
        seconds = time.perf_counter() - t0
    timers.seconds["backward"] = seconds - sum(timers.seconds.values())
    s = torch.cat([b[0] for b in timers.batches])
    t = torch.cat([b[1] for b in timers.batches])
    model_flops = 3 * sum(forward_flops(cfg.model, vocab, b[0], b[1])
                          for b in timers.batches)
    hw_flops = sum(padded_flops(cfg, vocab, b) for b in timers.batches)
    padded_t = sum(b[1].numel() * b[3] for b in timers.batches)
    params = sum(p.numel() for p in loop.model.parameters())
    return {"shape": shape_text(cfg), "params": params, "batch_size": cfg.train.batch_size,
            "seconds": seconds,
            "steps": spec["steps"], "tgt_tokens": tokens, "src_tokens": int(s.sum()),
            "tgt_pad_share": 1 - float(t.sum()) / padded_t, "model_flops": model_flops,
            "hw_flops": hw_flops, "flop_check": check, "parts": timers.seconds,
            "last_loss": losses[-1],
            "peak": spec["peak"] or measure_peak(AMP_DTYPE[spec["amp"]], spec["threads"]),
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def measure_peak(dtype: str, threads: int) -> float:
    """GFLOP/s of torch.mm at 1024^3 (benchmarks.peak's definition of the peak)."""
    from benchmarks.peak import DTYPES, Shape, gflops  # noqa: PLC0415

    torch.set_num_threads(threads)
    return gflops(Shape("square", 1024, 1024, 1024), DTYPES[dtype], 5, 0.3, 0.2)


def in_child(spec: dict[str, Any]) -> dict[str, Any]:
    """run_one in a fresh interpreter (own ru_maxrss, own thread pool, own CPU kernels)."""
    res = subprocess.run([sys.executable, "-m", "benchmarks.train", "--child", json.dumps(spec)],
                         capture_output=True, text=True, check=False,
                         env=profile_env(spec.get("cpu_kernels", "native"), dict(os.environ)))
    if res.returncode != 0:
        sys.exit(f"configuration {spec['family']}/{spec['amp']}/{spec['threads']}t failed:\n"
                 + res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


# -- tables -------------------------------------------------------------------------------
def epoch_pad_share(params: str, data_root: str) -> tuple[float, float, int, float]:
    """(target PAD share, source PAD share, batches, mean target tokens per batch) of the
    first epoch of the real bucketed batcher under params.yaml's batch settings."""
    from seqcore.config import load_config  # noqa: PLC0415
    from seqcore.artifacts.tokenizer_contract import TokenizerContract  # noqa: PLC0415
    from seqcore.data.batching import epoch_batches  # noqa: PLC0415
    from seqcore.data.examples import read_examples  # noqa: PLC0415
    from seqcore.sequences import make_batch  # noqa: PLC0415

    cfg = load_config(params)
    root = Path(data_root)
    ids = TokenizerContract.load(root / cfg.paths.tokenizer / "contract.json").special_ids
    ex = read_examples(root / cfg.paths.encoded / "train.jsonl")
    tr = cfg.train
    real_t = pad_t = real_s = pad_s = 0
    batches = epoch_batches([len(e.tgt) for e in ex], tr.batch_size, tr.bucket_width, tr.seed, 0)
    for idx in batches:
        b = make_batch([ex[i] for i in idx], ids)
        real_t, pad_t = real_t + int(b.tf.mask.sum()), pad_t + b.tf.mask.numel()
        real_s, pad_s = real_s + int(b.src_mask.sum()), pad_s + b.src_mask.numel()
    return 1 - real_t / pad_t, 1 - real_s / pad_s, len(batches), real_t / len(batches)


def throughput_table(results: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    lines = ["| family | shape | params | amp | cpu kernels | threads | batch | tgt tok/s | "
             "src+tgt tok/s | step ms | model GFLOP/s | peak GFLOP/s | MFU | HFU | tgt PAD | "
             "peak RSS MiB |",
             "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for spec, r in results:
        sec = r["seconds"]
        rate = r["model_flops"] / sec / 1e9
        lines.append(
            f"| {spec['family']} | {r['shape']} | {r['params'] / 1e6:.2f} M | {spec['amp']} | "
            f"{spec.get('cpu_kernels', 'native')} | {spec['threads']} | {r['batch_size']} | {r['tgt_tokens'] / sec:.0f} | "
            f"{(r['tgt_tokens'] + r['src_tokens']) / sec:.0f} | {1000 * sec / r['steps']:.0f} | "
            f"{rate:.1f} | {r['peak']:.1f} | {rate / r['peak']:.0%} | "
            f"{r['hw_flops'] / sec / 1e9 / r['peak']:.0%} | {r['tgt_pad_share']:.1%} | "
            f"{r['max_rss_mib']:.0f} |")
    return "\n".join(lines)


def parts_table(results: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    lines = ["| family | amp | threads | " + " | ".join(f"{p} ms (%)" for p in PARTS)
             + " | counted / analytic FLOPs |", "|---|---|---:|" + "---:|" * (len(PARTS) + 1)]
    for spec, r in results:
        total = sum(r["parts"].values())
        cells = " | ".join(f"{1000 * r['parts'][p] / r['steps']:.1f} "
                           f"({r['parts'][p] / total:.0%})" for p in PARTS)
        lines.append(f"| {spec['family']} | {spec['amp']} | {spec['threads']} | {cells} | "
                     f"{r['flop_check']:.3f} |")
    return "\n".join(lines)


def loss_curve_table(specs: list[dict[str, Any]], n: int, tolerance: float) -> str:
    """fp32 vs bf16 losses of the same seeded run, step by step."""
    lines = [f"| family | threads | steps | max abs diff | mean abs diff | max rel diff | "
             f"loss fp32 / bf16 at step {n} | within {tolerance:g} |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for spec in specs:
        fp32 = in_child({**spec, "amp": "none", "loss_curve": n})["losses"]
        bf16 = in_child({**spec, "amp": "bf16", "loss_curve": n})["losses"]
        diffs = [abs(a - b) for a, b in zip(fp32, bf16)]
        rel = max(d / abs(a) for d, a in zip(diffs, fp32))
        lines.append(f"| {spec['family']} | {spec['threads']} | {n} | {max(diffs):.4f} | "
                     f"{statistics.mean(diffs):.4f} | {rel:.2%} | {fp32[-1]:.4f} / "
                     f"{bf16[-1]:.4f} | {'yes' if max(diffs) <= tolerance else 'NO'} |")
    return "\n".join(lines)


def load_peaks(path: Path | None) -> dict[str, dict[str, float]]:
    if path is None:
        return {}
    return json.loads(path.read_text())["peak_gflops"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data-root", default=".", help="repository whose paths.encoded and "
                        "paths.tokenizer are read (read only)")
    parser.add_argument("--family", nargs="+", default=["transformer", "gru"],
                        choices=["transformer", "gru", "lstm"])
    parser.add_argument("--shape", type=parse_shape, default=None,
                        help="transformer ENCxDEC-D_MODEL-D_FF, e.g. 3x3-256-1024 (n_heads "
                        "from params.yaml); default: params.yaml's model.transformer")
    parser.add_argument("--rnn-shape", type=parse_shape, default=None,
                        help="gru/lstm ENCxDEC-EMBED-HIDDEN, e.g. 1x1-128-256; default: "
                        "params.yaml's model.rnn")
    parser.add_argument("--attention-kernel", nargs="+", default=[None],
                        choices=["auto", "math"], help="Transformer attention kernels to "
                        "compare; default: params.yaml's model.transformer.attention_kernel")
    parser.add_argument("--batch-size", type=int, nargs="+", default=[None],
                        help="train.batch_size values (words per batch) to compare; default: "
                        "params.yaml's")
    parser.add_argument("--amp", nargs="+", default=["none", "bf16"], choices=["none", "bf16"])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cpu-kernels", nargs="+", default=["portable"],
                        choices=["portable", "native"], help="CPU kernel profiles to compare "
                        "(seqcore.kernels; each in its own process)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--peak-json", type=Path, help="benchmarks.peak --json output; "
                        "without it each configuration measures its peak (1024^3) itself")
    parser.add_argument("--loss-curve", type=int, default=0, metavar="N",
                        help="instead: N steps fp32 vs bf16 from the same seed")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="loss-curve: largest acceptable abs loss difference (nats)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(json.loads(args.child))))
        return
    peaks = load_peaks(args.peak_json)
    base = {"params": args.params, "data_root": args.data_root, "shape": args.shape,
            "rnn_shape": args.rnn_shape,
            "steps": args.steps, "warmup": args.warmup, "loss_curve": 0}
    print(f"torch {torch.__version__}; params {args.params}; data {args.data_root}; "
          f"{args.steps} timed steps after {args.warmup}; peak from "
          f"{args.peak_json or 'each process (1024^3 torch.mm)'}\n")
    if args.loss_curve:
        specs = [{**base, "family": f, "kernel": args.attention_kernel[0],
                  "threads": args.threads[0], "peak": 1.0} for f in args.family]
        print(loss_curve_table(specs, args.loss_curve, args.tolerance))
        return
    tgt_pad, src_pad, n, per_batch = epoch_pad_share(args.params, args.data_root)
    print(f"bucketed batcher, epoch 0: {n} batches, {per_batch:.0f} target tokens per batch, "
          f"PAD {tgt_pad:.1%} of target positions, {src_pad:.1%} of source positions\n")
    results = []
    for family in args.family:
        kernels = args.attention_kernel if family == "transformer" else [None]
        for kernel, batch, amp, threads, cpu in itertools.product(
                kernels, args.batch_size, args.amp, args.threads, args.cpu_kernels):
            spec = {**base, "family": family, "kernel": kernel, "batch_size": batch, "amp": amp,
                    "threads": threads, "cpu_kernels": cpu,
                    "peak": peaks.get(AMP_DTYPE[amp], {}).get(str(threads))}
            results.append((spec, in_child(spec)))
            print(throughput_table(results[-1:]).splitlines()[-1], flush=True)
    print("\n#### throughput\n")
    print(throughput_table(results))
    print("\n#### time per step, by part\n")
    print(parts_table(results))


if __name__ == "__main__":
    main()
