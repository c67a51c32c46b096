"""One device check (issue 53): what a short GPU reservation must prove, in one run, as one
Markdown table.

    python -m benchmarks.gpu --out gpu-check.md              # on a CUDA machine (< 8 min)
    python -m benchmarks.gpu --device cpu --quick --out x.md # a rehearsal on a CPU

Run from a repository that holds the default result's inputs (``data/``, ``tokenizer/``,
``baseline/``: what ``dvc repro`` or ``dvc pull`` leaves). It needs torch, pytest and the
project's requirements but neither dvc nor mlflow: the train, decode and replay stages run
without them. Four parts, each in its own process under its own time limit; a part that
fails or runs out of time is a row that says so, and the others still run:

1. **tests**: the CUDA and device tests (``-k "cuda or device"`` over
   tests/training/test_loop.py, test_resume.py and test_distributed.py: the ``cuda``-marked
   tests and those named for a device) under pytest: passed,
   failed, skipped.
2. **throughput**: the real ``TrainLoop`` steps on the encoded training split, read back once a
   ``log_every`` window as the train stage reads them (issue 53), for the
   default shape (2+2 layers, d 128, ff 512) and the ``full`` profile's (3+3, d 256, ff 1024),
   fp32 and bf16, the eager step and the step as CUDA graphs (``train.cuda_graphs``):
   target tokens/s, ms per step, the GPU-busy share (device-kernel time from torch.profiler
   over the timed steps, divided by their wall time; CUDA only) and the share of label
   positions that are PAD (what bucketing, and the graphs' padding to multiples of 8, cost).
3. **train stage and ledger replay**: ``python -m pipeline.train`` for ``--train-steps`` steps
   on the device in a scratch workspace (symlinks to the inputs; every output inside it),
   then the audit's replay of the ledger's last segment (``pipeline.audit.replay``, under
   the training's CPU kernel profile): bit-identical or the first difference; eager, then
   with ``train.cuda_graphs: on`` (auto turns it on once this row has passed on a GPU).
4. **decode**: ``python -m pipeline.decode`` of each model on the test split, on the device
   (the default's beam search and rescoring): wall time and words/s.

The table starts with the date, the device, torch and CUDA versions; paste it into
docs/benchmarks.md. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
#: (label, enc layers, dec layers, d_model, d_ff): the default shape and the full profile's.
SHAPES = (("default 2+2 d128", 2, 2, 128, 512), ("full 3+3 d256", 3, 3, 256, 1024))
#: What starts the line of a throughput child's figures (its stderr follows its stdout).
MARK = "gpu-check: "
#: The inputs a scratch workspace links (the train and decode stages' data deps).
INPUTS = ("data", "tokenizer", "baseline")


def run(cmd: list[str], cwd: Path, limit: float) -> tuple[int | None, str, float]:
    """(exit status or None on timeout, the output's tail, wall seconds) of ``cmd``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=limit, check=False)
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) \
            else (err.stdout or "")
        return None, out[-2000:], time.monotonic() - t0
    return proc.returncode, (proc.stderr[-3000:] + proc.stdout[-3000:]), time.monotonic() - t0


# -- 1. the cuda tests ----------------------------------------------------------------------
def cuda_tests(limit: float) -> list[tuple[str, str, str]]:
    code, out, seconds = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda or device",
         "tests/training/test_loop.py", "tests/training/test_resume.py",
         "tests/training/test_distributed.py"], REPO, limit)
    summary = next((line for line in reversed(out.splitlines())
                    if re.search(r"\d+ (passed|failed|skipped|deselected)", line)), out[-200:])
    verdict = "timed out" if code is None else "ok" if code == 0 else f"exit {code}"
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    return [("cuda tests", verdict, f"{summary.strip(' =')}; {seconds:.0f} s"
             + (f"; {'; '.join(failed)}" if failed else ""))]


# -- 2. throughput --------------------------------------------------------------------------
def throughput(spec: dict[str, Any]) -> dict[str, Any]:
    """Time ``steps`` real training steps of one shape and amp on the device (a child), the
    loop built as benchmarks.train builds it."""
    import torch  # noqa: PLC0415 (the child only)

    from benchmarks.train import build_loop  # noqa: PLC0415

    _, enc, dec, d, ff = spec["shape"]
    with tempfile.TemporaryDirectory() as tmp:
        loop, _, _ = build_loop(
            {"params": str(REPO / "params.yaml"), "data_root": str(REPO), "family": "transformer",
             "shape": (enc, dec, d, ff), "rnn_shape": None, "amp": spec["amp"],
             "threads": 2, "device": spec["device"],  # 2 threads: params.yaml's
             "graphs": spec["graphs"], "steps": spec["steps"] + spec["warmup"],
             **({"cpu_kernels": "native"} if spec["graphs"] == "on" and
                spec["device"] == "cpu" else {})}, tmp)  # the fused Adam: a CPU rehearsal
        device = next(loop.model.parameters()).device
        for _ in range(spec["warmup"]):
            loop.train_step()
        draw, positions = loop.feed.draw, [0]

        def counted() -> Any:  # the padded label positions: what PAD costs
            batch = draw()
            positions[0] += batch.tf.labels.numel()
            return batch

        loop.feed.draw = counted
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.synchronize()
        activities = [torch.profiler.ProfilerActivity.CPU] + (
            [torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        tokens, t0 = 0, time.perf_counter()
        with torch.profiler.profile(activities=activities) as prof:
            for start in range(0, spec["steps"], loop.sync_every):  # the run's read-back windows
                n = min(loop.sync_every, spec["steps"] - start)
                tokens += sum(int(e.tokens) for e in loop.train_steps(n))
            if cuda:
                torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    busy = None
    if cuda:
        kernel_us = sum(e.self_device_time_total for e in prof.key_averages()
                        if e.device_type == torch.autograd.DeviceType.CUDA)
        busy = kernel_us / 1e6 / seconds
    return {"tokens_per_s": tokens / seconds, "ms_per_step": 1000 * seconds / spec["steps"],
            "busy": busy, "pad": 1 - tokens / max(positions[0], 1)}


def throughput_rows(device: str, steps: int, warmup: int, limit: float
                    ) -> list[tuple[str, str, str]]:
    rows = []
    for shape, amp, graphs in itertools.product(SHAPES, ("none", "bf16"), ("off", "on")):
        spec = {"shape": shape, "amp": amp, "device": device, "steps": steps,
                "warmup": warmup, "graphs": graphs}
        label = (f"throughput {shape[0]} {'fp32' if amp == 'none' else amp}"
                 f"{', CUDA graphs' if graphs == 'on' else ''}")
        code, out, _ = run([sys.executable, "-m", "benchmarks.gpu", "--child",
                            json.dumps(spec)], REPO, limit)
        if code != 0:
            rows.append((label, "timed out" if code is None else f"exit {code}",
                         out.strip().splitlines()[-1][:300] if out.strip() else ""))
            continue
        r = json.loads(next(line for line in reversed(out.splitlines())
                            if line.startswith(MARK))[len(MARK):])
        busy = "-" if r["busy"] is None else f"{100 * r['busy']:.0f} %"
        rows.append((label, f"{r['tokens_per_s']:,.0f} target tokens/s",
                     f"{r['ms_per_step']:.1f} ms/step over {steps} steps; GPU busy {busy}; "
                     f"PAD {100 * r['pad']:.0f} % of label positions"))
    return rows


# -- 3 and 4. the train stage, its ledger replay, decode --------------------------------------
def scratch(work: Path, device: str, train_steps: int, graphs: str) -> None:
    """A workspace that links the inputs and writes every output inside itself; ``graphs``:
    train.cuda_graphs (on a CPU rehearsal: the eager graphed step, under the native kernels
    its fused Adam needs, on train.device auto, which validate allows with it)."""
    for name in INPUTS:
        if (REPO / name).exists():
            (work / name).symlink_to(REPO / name)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    every = max(1, train_steps // 2)
    params["train"].update({"device": device, "max_steps": train_steps, "eval_every": every,
                            "checkpoint_every": every, "ledger_every": every,
                            "cuda_graphs": graphs})
    if graphs == "on" and device == "cpu":
        params["train"].update({"device": "auto", "cpu_kernels": "native"})
    params["decode"].update({"device": device})
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def stage_rows(device: str, train_steps: int, limit: float, graphs: str
               ) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    mode = ", CUDA graphs" if graphs == "on" else ""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        scratch(work, device, train_steps, graphs)
        code, out, seconds = run([sys.executable, "-m", "pipeline.train"], work, limit)
        if code != 0:
            return [(f"train stage ({train_steps} steps{mode})",
                     "timed out" if code is None else f"exit {code}", _last(out))]
        log = (work / "reports" / "train_log.csv").read_text().splitlines()
        tokens = sum(int(line.split(",")[4]) for line in log[1:])
        rows.append((f"train stage ({train_steps} steps{mode})", "ok",
                     f"{seconds:.0f} s with start-up; {tokens / seconds:,.0f} target tokens/s "
                     "over the stage"))
        ledger = sorted((work / "models" / "ledger").glob("ckpt-*.pt"))
        last = len(ledger) - 1
        # run_replay: the replay in a child under the training's CPU kernel profile, as the
        # audit runs it; it prints the differences as JSON
        code, out, seconds = run(
            [sys.executable, "-c", "import json, pathlib; from pipeline.audit.replay import "
             "run_replay; print(" + repr(MARK) + " + json.dumps(run_replay('params.yaml', "
             f"pathlib.Path('models/ledger'), [{last}])))"], work, limit)
        found = json.loads(next(line for line in reversed(out.splitlines())
                                if line.startswith(MARK))[len(MARK):]) if code == 0 else None
        label = f"ledger replay (segment {last} of {last}{mode})"
        rows.append((label, "timed out" if code is None else f"exit {code}" if code else
                     "bit-identical" if not found else "DIFFERS",
                     f"{seconds:.0f} s" + (f"; {found[0]}" if found else "")
                     + ("" if code == 0 else f"; {_last(out)}")))
        code, out, seconds = run([sys.executable, "-m", "pipeline.decode"], work, limit)
        test = work / "predictions" / "test.jsonl"
        words = len(test.read_text().splitlines()) if code == 0 and test.exists() else 0
        trained = "with CUDA graphs" if graphs == "on" else "eagerly"
        rows.append((f"decode (test split, the default's search; model trained {trained})",
                     "ok" if code == 0 else "timed out" if code is None else f"exit {code}",
                     f"{seconds:.0f} s with start-up; {words / seconds:,.0f} words/s"
                     if code == 0 else _last(out)))
    return rows


def _last(out: str) -> str:
    lines = [line for line in out.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def header(device: str) -> str:
    import torch  # noqa: PLC0415

    name = torch.cuda.get_device_name(0) if device != "cpu" and torch.cuda.is_available() \
        else f"CPU ({os.cpu_count()} cores)"
    cuda = torch.version.cuda or "none"
    return (f"GPU check {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {name}; torch "
            f"{torch.__version__}, CUDA {cuda}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (rehearsal)")
    parser.add_argument("--out", type=Path, default=Path("gpu-check.md"))
    parser.add_argument("--steps", type=int, default=100, help="timed steps per throughput row")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--train-steps", type=int, default=600)
    parser.add_argument("--quick", action="store_true",
                        help="a rehearsal: 5 timed steps, a 20-step training, no tests")
    parser.add_argument("--limit", type=float, default=150, help="seconds per part")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(MARK + json.dumps(throughput(json.loads(args.child))))
        return
    if args.quick:
        args.steps, args.warmup, args.train_steps = 5, 2, 20
    t0 = time.monotonic()
    rows = [] if args.quick else cuda_tests(args.limit)
    rows += throughput_rows(args.device, args.steps, args.warmup, args.limit)
    for graphs in ("off", "on"):
        rows += stage_rows(args.device, args.train_steps, args.limit, graphs)
    total = time.monotonic() - t0
    lines = [header(args.device), "", "| part | result | figures |", "|---|---|---|",
             *(f"| {a} | {b} | {c.replace('|', '/')} |" for a, b, c in rows),
             f"| total | | {total / 60:.1f} min (budget 8 min) |"]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
