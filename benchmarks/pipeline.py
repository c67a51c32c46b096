"""Pipeline overheads and stage times: start-up, no-op `dvc repro`, audit, MLflow, each stage.

    python -m benchmarks.pipeline --quick     # overheads only (a few minutes on the default run)
    python -m benchmarks.pipeline             # + every stage re-run (the whole default run again)

Run it from the repository root after ``make repro`` (the workspace must match dvc.lock).
Nothing in the workspace is written: the DVC and MLflow figures come from a scratch copy in a
temporary folder (the git-tracked and untracked-not-ignored files, as the audit's rebuild
copies them, plus dvc.lock and every output it lists), with MLflow pointed at a store inside
the copy. Figures:

- start-up: median wall time over ``--repeats`` fresh processes of ``python -c pass``,
  ``import seqcore``, ``import torch``, ``import mlflow``; ``dvc --version`` (DVC's own
  start-up), ``dvc status`` and a no-op ``dvc repro`` in the copy (after an untimed
  ``dvc commit`` that fills the copy's cache and DVC's hash cache, as ``dvc repro`` left the
  user's repository);
- MLflow: the evaluate stage's own code (``pipeline.evaluate.run`` then ``build_record`` and
  ``log_or_keep``) timed part by part in a fresh process, twice: into a new store (the first
  run creates its schema) and into the now existing one (every later run);
- the audit: ``python -m pipeline.audit`` in the repository itself (it reads only);
- statistics (issue 27; ``--stats-only`` runs just these, needing only ``data/prepared``):
  two synthetic results over the real test split (its ids, words and references; the
  hypotheses drop one phoneme in 32 % and 30 % of the rows), so the row and group counts are
  the default run's; the evaluate stage's bootstrap intervals on one (in a fresh process,
  the per-row statistics computed first and not timed) and a whole
  ``python -m pipeline.compare`` of the two;
- without ``--quick``: ``dvc repro -f -s <stage>`` for each stage of dvc.yaml in order, in the
  copy (training starts fresh: checkpoints are not copied); these include DVC's start-up and
  its hashing of the stage's outputs. DVC records no stage timings and the stages log none,
  so a re-run is the honest measure.

A benchmark, not a test: it asserts nothing and its figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.dvc_files import read_yaml12
from pipeline.git_state import copy_checkout
from seqcore.config import load_config

#: Times evaluate's file work, the MLflow record and the logging, in the scratch copy.
MLFLOW_PROBE = """
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
from pipeline import evaluate as E
from pipeline.record import RunOrigin, build_record
from pipeline.tracking import log_or_keep
from seqcore.config import load_config
t1 = time.perf_counter()
cfg = load_config("params.yaml")
out = E.run(cfg)
t2 = time.perf_counter()
rec = build_record(cfg, out.metrics, out.signature, out.header, out.pred_path, out.contract,
                   RunOrigin.from_environment())
t3 = time.perf_counter()
rid = log_or_keep(rec, Path(cfg.paths.mlflow_pending))
t4 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "evaluate_files": t2 - t1, "record": t3 - t2,
                  "log": t4 - t3, "logged": rid is not None}))
"""


def tool(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).with_name(name))


def wall(cmd: list[str], cwd: Path, env: dict[str, str]
         ) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, res


def median_wall(cmd: list[str], cwd: Path, env: dict[str, str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        seconds, res = wall(cmd, cwd, env)
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
        times.append(seconds)
    return statistics.median(times)


def scratch_copy(dest: Path) -> None:
    """Sources, dvc.lock and every output dvc.lock lists, as a fresh git repository."""
    cfg = load_config("params.yaml")
    copy_checkout(dest, extra=(Path(cfg.paths.raw), Path(cfg.paths.external)))
    shutil.copy2("dvc.lock", dest / "dvc.lock")
    for stage in read_yaml12(Path("dvc.lock"))["stages"].values():
        for out in stage.get("outs", []):
            src = Path(out["path"])
            if src.is_dir():
                shutil.copytree(src, dest / src, dirs_exist_ok=True)
            elif src.is_file():
                (dest / src).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / src)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit",
                 "-qm", "benchmark copy"]):
        subprocess.run(cmd, cwd=dest, check=True, capture_output=True)


def startup_rows(repo: Path, env: dict[str, str], repeats: int) -> list[tuple[str, float]]:
    py = [sys.executable, "-c"]
    rows = [(f"python -c {code!r}", median_wall(py + [code], repo, env, repeats))
            for code in ("pass", "import seqcore", "import torch", "import mlflow")]
    rows.append(("dvc --version", median_wall([tool("dvc"), "--version"], repo, env, repeats)))
    # The copy's cache starts empty: `dvc commit` fills it from the copied outputs (and DVC's
    # hash cache), as `dvc repro` left the user's repository.
    _, res = wall([tool("dvc"), "commit", "-f", "-q"], repo, env)
    if res.returncode != 0:
        raise SystemExit(f"dvc commit failed in the copy:\n{(res.stdout + res.stderr)[-2000:]}")
    _, first = wall([tool("dvc"), "status"], repo, env)
    if "up to date" not in first.stdout:
        print(f"the copy is not up to date with dvc.lock (run `make repro` first):\n"
              f"{first.stdout[-1500:]}", file=sys.stderr)
        return rows
    rows.append(("dvc status", median_wall([tool("dvc"), "status"], repo, env, repeats)))
    rows.append(("dvc repro (no-op)", median_wall([tool("dvc"), "repro"], repo, env, repeats)))
    return rows


def mlflow_rows(repo: Path, env: dict[str, str]) -> list[dict[str, float]]:
    """The probe twice: into a new store, then into the existing one."""
    out = []
    for _ in range(2):
        seconds, res = wall([sys.executable, "-c", MLFLOW_PROBE], repo, env)
        if res.returncode != 0:
            raise SystemExit(f"evaluate/MLflow probe failed:\n{res.stderr[-2000:]}")
        out.append({**json.loads(res.stdout.strip().splitlines()[-1]), "process": seconds})
    return out


#: Times the evaluate stage's intervals on a predictions file (seqcore.metrics.bootstrap).
INTERVAL_PROBE = """
import json, sys, time
from seqcore.artifacts.predictions import Predictions
from seqcore.config import load_config
from seqcore.metrics.evaluation import headline_intervals, row_stats
from seqcore.metrics.recompute import resampling
cfg = load_config("params.yaml")
rows = Predictions.load(sys.argv[1]).rows
stats = row_stats(rows)
t0 = time.perf_counter()
headline_intervals(rows, stats, resampling(cfg), None)
print(json.dumps({"rows": len(rows), "groups": len({r.group for r in rows}),
                  "samples": resampling(cfg).samples, "seconds": time.perf_counter() - t0}))
"""


def synthetic_predictions(prepared: Path, dest: Path, error_rate: float, seed: int) -> Path:
    """A predictions file for the real split ``prepared`` (its ids, words and references)
    whose hypotheses drop one phoneme in ``error_rate`` of the rows: the size and shape of a
    default result, without a trained model."""
    import random  # noqa: PLC0415

    from seqcore.artifacts.predictions import (  # noqa: PLC0415
        PredictionRow,
        Predictions,
        PredictionsHeader,
    )

    rng, rows = random.Random(seed), []
    for line in prepared.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        toks = r["target"].split()
        if rng.random() < error_rate and len(toks) > 1:
            del toks[rng.randrange(len(toks))]
        rows.append(PredictionRow(r["id"], r["group"], r["source"], r["target"], " ".join(toks),
                                  list(range(len(toks))), toks, -1.0, -1.0, len(toks), True, []))
    path = dest / "predictions" / "test.jsonl"
    path.parent.mkdir(parents=True)
    Predictions(rows).save(path)
    PredictionsHeader({}, "0" * 64, len(rows), "task:g2p|data:synthetic").save(path)
    return path


def stat_rows(repo: Path, tmp: Path, env: dict[str, str]) -> dict[str, float]:
    """The intervals' cost inside evaluate and a whole compare process, on two synthetic
    results over the real test split (data/prepared/test.jsonl: `dvc repro prepare`)."""
    cfg = load_config(repo / "params.yaml")
    prepared = repo / cfg.paths.prepared / "test.jsonl"
    if not prepared.exists():
        raise SystemExit(f"{prepared}: missing (run `dvc repro prepare` first)")
    a = synthetic_predictions(prepared, tmp / "a", 0.32, 1)
    b = synthetic_predictions(prepared, tmp / "b", 0.30, 2)
    _, res = wall([sys.executable, "-c", INTERVAL_PROBE, str(a)], repo, env)
    if res.returncode != 0:
        raise SystemExit(f"interval probe failed:\n{res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    seconds, res = wall([sys.executable, "-m", "pipeline.compare", str(a), str(b)], repo, env)
    if res.returncode != 0:
        raise SystemExit(f"compare failed:\n{res.stderr[-2000:]}")
    return out | {"compare": seconds}


def stage_rows(repo: Path, env: dict[str, str]) -> list[tuple[str, float]]:
    rows = []
    for stage in read_yaml12(repo / "dvc.yaml")["stages"]:
        seconds, res = wall([tool("dvc"), "repro", "-f", "-s", stage], repo, env)
        if res.returncode != 0:
            raise SystemExit(f"dvc repro -f -s {stage} failed:\n"
                             f"{(res.stdout + res.stderr)[-2000:]}")
        rows.append((stage, seconds))
        print(f"[bench] stage {stage}: {seconds:.1f} s", file=sys.stderr, flush=True)
    return rows


def print_stats(st: dict[str, float]) -> None:
    print(f"\n#### statistics ({st['rows']} rows in {st['groups']} groups, "
          f"{st['samples']} resamples)\n")
    print("| what | seconds |\n|---|---:|")
    print(f"| evaluate's intervals (8 metrics, in the stage) | {st['seconds']:.2f} |")
    print(f"| `python -m pipeline.compare A B` (whole process) | {st['compare']:.2f} |")


def print_tables(startup: list[tuple[str, float]], logs: list[dict[str, float]],
                 audit: tuple[float, int] | None, stages: list[tuple[str, float]],
                 total: float | None) -> None:
    t = dict(startup)
    print("\n#### start-up (median wall seconds of a fresh process)\n")
    print("| command | seconds | note |\n|---|---:|---|")
    for name, sec in startup:
        note = ""
        if name == "python -c 'import seqcore'":
            note = f"import alone: {sec - t[next(iter(t))]:.2f} s"
        if name == "dvc repro (no-op)":
            note = (f"{sec / t['dvc --version']:.2f}x dvc --version, "
                    f"{sec / t['dvc status']:.2f}x dvc status")
        print(f"| `{name}` | {sec:.2f} | {note} |")
    print("\n#### evaluate and MLflow (seconds; one fresh process each)\n")
    print("| store | imports | evaluate files | build record | MLflow log | whole process | "
          "log share of evaluate |" + (" log share of pipeline |" if total else ""))
    print("|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if total else ""))
    for name, r in zip(("new (creates schema)", "existing"), logs):
        share = f" {r['log'] / total:.2%} |" if total else ""
        print(f"| {name} | {r['imports']:.2f} | {r['evaluate_files']:.2f} | {r['record']:.2f} | "
              f"{r['log']:.2f}{'' if r['logged'] else ' (NOT logged)'} | {r['process']:.2f} | "
              f"{r['log'] / r['process']:.1%} |{share}")
    if audit:
        print(f"\n`python -m pipeline.audit`: {audit[0]:.1f} s (exit status {audit[1]})")
    if stages:
        print("\n#### stages (`dvc repro -f -s <stage>` in the copy, seconds)\n")
        print("| stage | seconds |\n|---|---:|")
        for name, sec in stages:
            print(f"| {name} | {sec:.1f} |")
        print(f"| **all** | {sum(s for _, s in stages):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the stage re-runs")
    parser.add_argument("--no-audit", action="store_true", help="skip python -m pipeline.audit")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pipeline-seconds", type=float, default=None,
                        help="with --quick: the default run's wall time, for the MLflow share")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy (prints it)")
    parser.add_argument("--stats-only", action="store_true",
                        help="only the intervals and compare figures")
    args = parser.parse_args()
    if not Path("dvc.lock").exists():
        sys.exit("no dvc.lock here: run from the repository root after `make repro`")
    tmp = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("DVC_ROOT", "DVC_EXP_NAME")}
        if args.stats_only:  # needs only data/prepared, no trained result
            print_stats(stat_rows(Path.cwd(), tmp, dict(env, PYTHONPATH=str(Path.cwd()))))
            return
        repo = tmp / "repo"
        scratch_copy(repo)
        env |= {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                "PYTHONPATH": str(repo)}
        print(f"scratch copy: {repo}", file=sys.stderr)
        stats = stat_rows(repo, tmp, env)
        startup = startup_rows(repo, env, args.repeats)
        logs = mlflow_rows(repo, env)
        audit = None
        if not args.no_audit:
            # The user's own environment: the audit reads the user's MLflow store.
            seconds, res = wall([sys.executable, "-m", "pipeline.audit"], Path.cwd(),
                                dict(os.environ, PATH=env["PATH"]))
            audit = (seconds, res.returncode)
        stages = [] if args.quick else stage_rows(repo, env)
        total = sum(s for _, s in stages) if stages else args.pipeline_seconds
        print_tables(startup, logs, audit, stages, total)
        print_stats(stats)
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
