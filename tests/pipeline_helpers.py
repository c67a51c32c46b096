"""Helpers of the tests that run the pipeline: tiny parameters, repository copies, `dvc`,
the stages and the audit as a user runs them, and the import closure of a stage's modules.
Test modules import these from here (no test module imports another)."""

from __future__ import annotations

import ast
import atexit
import contextlib
import functools
import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from pipeline.git_state import commit_copy, copy_checkout
from pipeline.record import param_items
from pipeline.tracking import MAX_PARAMS_PER_BATCH
from seqcore.artifacts.run_record import RunRecord
from seqcore.audit import AuditReport
from tests.factories import REPO

if TYPE_CHECKING:
    import mlflow
    from mlflow.entities import Run

#: Parameters small enough for the end-to-end `dvc repro` test (a few hundred pairs).
TINY_PARAMS = {
    "data": {"max_pairs": 400},
    "model": {"transformer": {"d_model": 32, "n_heads": 2, "enc_layers": 1, "dec_layers": 1,
                              "d_ff": 64}},
    # noam at rate 2: a schedule the tiny model learns from in 6 steps (the default cosine
    # 3e-3 is sized for 10,000), so its outputs vary and every metric is defined (on the
    # random sample of max_pairs, issue 55, rate 1 left every output empty; rate 2 gives 16
    # distinct outputs for 17 test words); best_dev (the default is last) so the result has
    # a best.pt whose corruption a test can check
    "train": {"max_steps": 6, "batch_size": 32, "eval_every": 3, "checkpoint_every": 3,
              "warmup_steps": 2, "schedule": "noam", "lr": 2.0, "select": "best_dev",
              "threads": 1},  # one thread: the other pytest worker runs beside it
    # greedy: beam search on a 6-step model mostly ends at the first token (the beam-search
    # curse of an untrained model), which leaves length and n-gram metrics undefined
    "decode": {"max_len": 12, "strategy": "greedy"},
}


def merge(base: dict, override: dict) -> dict:
    """Recursively overlay ``override`` on ``base`` (new dict)."""
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(base.get(k, {}), v) if isinstance(v, dict) else v
    return out


def nested(flat: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys to a nested dict: {"a.b": 1} -> {"a": {"b": 1}} (params.yaml's shape)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


@functools.cache
def empty_mlflow_store() -> Path:
    """An initialised, empty sqlite MLflow store, made once per test session: creating its
    tables takes 2-3 s, which every new repository would otherwise pay in its first run."""
    folder = Path(tempfile.mkdtemp(prefix="seqcore-empty-store-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    import mlflow  # noqa: PLC0415 (slow import, only for the tests that need a store)

    mlflow.MlflowClient(f"sqlite:///{folder / 'mlflow.db'}").search_experiments()
    return folder / "mlflow.db"


def copy_repo(dest: Path, overrides: dict | None = None) -> Path:
    """Copy the git-tracked (and untracked, not ignored) files into ``dest`` as a fresh git
    repo, with params.yaml overlaid by ``overrides``, and an empty MLflow store at the
    default ``mlflow.db`` (git ignores it; the first run logs into it as into a new one)."""
    copy_checkout(dest, REPO, leave_out=("dvc.lock", "tests", "benchmarks"))
    params = yaml.safe_load((dest / "params.yaml").read_text())
    (dest / "params.yaml").write_text(yaml.safe_dump(merge(params, overrides or {}),
                                                     sort_keys=False))
    shutil.copyfile(empty_mlflow_store(), dest / "mlflow.db")
    commit_copy(dest, "copy", "t")
    return dest


def copy_result(src: Path, dest: Path) -> Path:
    """A working copy at ``dest`` of a repository after `dvc repro` (a shared result that a
    test changes): its files, git, DVC cache and an MLflow store whose artifact locations
    point into the copy, not into ``src``."""
    shutil.copytree(src, dest, symlinks=True)
    if (dest / "mlflow.db").exists():
        with contextlib.closing(sqlite3.connect(dest / "mlflow.db")) as db, db:
            db.execute("UPDATE experiments SET artifact_location = "
                       "replace(artifact_location, ?, ?)", (str(src), str(dest)))
            db.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)",
                       (str(src), str(dest)))
            # the result's logged model and its registered versions (issue 29)
            db.execute("UPDATE logged_models SET artifact_location = "
                       "replace(artifact_location, ?, ?)", (str(src), str(dest)))
            db.execute("UPDATE model_versions SET storage_location = "
                       "replace(storage_location, ?, ?)", (str(src), str(dest)))
    return dest


@functools.cache
def stage_worker_bin() -> str | None:
    """A folder whose ``python`` runs `python -m pipeline.<stage>` in the session's stage
    worker (tests/programs/stage_server.py: torch and MLflow imported once, each stage a
    forked child), started on first use; None when SEQCORE_STAGE_WORKER=0 (every stage then
    a fresh interpreter, as for a user)."""
    if os.environ.get("SEQCORE_STAGE_WORKER") == "0":
        return None
    folder = Path(tempfile.mkdtemp(prefix="seqcore-stage-worker-"))
    address = str(folder / "socket")
    with open(folder / "server.log", "wb") as log:  # the server keeps its own descriptor
        server = subprocess.Popen([sys.executable, "-m", "tests.programs.stage_server",
                                   address], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                                  stdout=subprocess.PIPE, stderr=log)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    atexit.register(server.kill)
    assert server.stdout is not None and server.stdout.readline() == b"ready\n", \
        (folder / "server.log").read_text()
    from tests.programs.stage_server import shim_source  # noqa: PLC0415

    shim = folder / "bin" / "python"
    shim.parent.mkdir()
    shim.write_text(shim_source(sys.executable, address))
    shim.chmod(0o755)
    return str(shim.parent)


def stage_python() -> str:
    """The ``python`` that `dvc` finds first on PATH in the tests: the stage worker's shim,
    or this interpreter without the worker."""
    folder = stage_worker_bin()
    return str(Path(folder) / "python") if folder else sys.executable


def tool_env() -> dict[str, str]:
    """The environment for `dvc` and stage subprocesses: this venv first on PATH (after the
    stage worker's ``python``), the repo's MLflow."""
    path = os.pathsep.join(filter(None, (stage_worker_bin(), str(Path(sys.executable).parent),
                                         os.environ["PATH"])))
    env = dict(os.environ, PATH=path, MLFLOW_HTTP_REQUEST_MAX_RETRIES="0",
               MLFLOW_HTTP_REQUEST_TIMEOUT="5")
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


#: evaluate.prediction_sample of the audited tiny result; decode.batch_size 8 gives the
#: 24 test examples three decode batches.
AUDIT_SAMPLE = 5


def run_python(cwd: Path, *args: str, env: dict[str, str] | None = None,
               python: str | None = None, timeout: float | None = None,
               stdin: str | None = None) -> subprocess.CompletedProcess:
    """``python ARGS`` in ``cwd``, output as text: the one way a test runs a stage or command
    as its own process. By default the stage worker's ``python`` and tool_env(); ``python=
    sys.executable`` for a fresh interpreter (a test about the process itself)."""
    return subprocess.run([python or stage_python(), *args], cwd=cwd, capture_output=True,
                          env=tool_env() if env is None else env, text=True, timeout=timeout,
                          input=stdin)


def dvc_process(repo: Path, *args: str, env: dict[str, str] | None = None,
                timeout: float | None = None) -> subprocess.CompletedProcess:
    """`dvc ARGS` in ``repo``, output as text: this venv's `dvc`, by default in tool_env()
    (its stages then run in the stage worker)."""
    env = tool_env() if env is None else env
    return subprocess.run([shutil.which("dvc", path=env["PATH"]) or "dvc", *args], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=timeout)


def dvc(repo: Path, *args: str) -> str:
    """`dvc ARGS` in ``repo`` (:func:`dvc_process`); asserts success and returns what it
    printed."""
    res = dvc_process(repo, *args)
    assert res.returncode == 0, f"dvc {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout + res.stderr


def run_audit(repo: Path, monkeypatch: pytest.MonkeyPatch, *, strict_env: bool = False,
              rebuild: bool = False, only: tuple[str, ...] = (),
              use_mlflow: bool = True, replay: int = 0) -> AuditReport:
    """The audit in-process in ``repo``, as `python -m pipeline.audit --replay REPLAY` runs
    it there. The training replay (a child process: 3-4 s on the tiny result) runs in the
    tests about it (``replay=3``, the command's default), not in those about other checks."""
    from pipeline.audit.core import audit  # noqa: PLC0415 (heavy: only the tests that audit)
    from pipeline.audit.options import AuditOptions  # noqa: PLC0415

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("PATH", tool_env()["PATH"])
    if replay:  # the replay's child (`sys.executable -P -m pipeline.audit.replay`) is served
        monkeypatch.setattr(sys, "executable", stage_python())
    with contextlib.chdir(repo):
        report = audit(AuditOptions(use_mlflow=use_mlflow, strict_env=strict_env,
                                    rebuild=rebuild, only=only, replay=replay))
    print(report.render())
    return report


USER_PARAMS = {
    "task": "parallel",
    "paths": {"raw": "data/raw/user.tsv"},
    # Every row in train, so the split check is off (min_split_rows: 0; tests/data/test_own_data.py).
    "data": {"source": "tsv", "path": "data/external/user.tsv", "sha256": "",
             "bad_rows": "skip", "dev_fraction": 0.0, "test_fraction": 0.0, "min_split_rows": 0},
    "tokenizer": {"src_model_type": "char", "tgt_model_type": "word"},
    "sequence": {"max_src_len": 10, "max_tgt_len": 4, "overlong": "truncate"},
}


def run_stage(work: Path, stage: str, overrides: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m pipeline.<stage>`` with cwd = ``work`` and params = defaults + overrides."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(merge(merge(params, USER_PARAMS),
                                                           overrides or {})))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # the stage worker's python: ``work`` holds no code, so the stage imports REPO's
    return run_python(work, "-m", f"pipeline.{stage}", env=env)


CODE_ROOTS = ("pipeline", "seqcore")


def module_file(name: str) -> Path | None:
    """The repository file of a dotted module name (package -> its __init__.py), or None."""
    if name.split(".")[0] not in CODE_ROOTS:
        return None
    base = REPO.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_names(path: Path) -> set[str]:
    """Every module an import statement in ``path`` may load (function-level ones too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # `from pkg import sub` loads pkg/sub.py when sub is a module
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def task_pieces(module: str) -> list[str]:
    """The task modules that ``module`` loads by name: for a stage module
    (``pipeline.<stage>``), ``<package>.<stage>`` of every task; for seqcore.tasks, every
    task's package (seqcore.tasks imports them with importlib, so no import statement names
    them)."""
    from seqcore.tasks import PIECE_STAGES, TASKS  # noqa: PLC0415 (light: no torch)

    if module == "seqcore.tasks":  # Task.config_problems loads each task's package by name
        return sorted({task.package for task in TASKS.values()})
    stage = module.removeprefix("pipeline.")
    if not module.startswith("pipeline.") or stage not in PIECE_STAGES:
        return []
    return sorted({f"{task.package}.{stage}" for task in TASKS.values()})


def import_closure(entry: str) -> set[str]:
    """Repository files (relative paths) loaded by importing module ``entry`` (and the task
    pieces its stage asks for)."""
    todo, seen = [entry], set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        # importing a.b.c runs a/__init__.py and a/b/__init__.py first
        for i in range(1, len(parts) + 1):
            path = module_file(".".join(parts[:i]))
            if path is None or path in seen:
                continue
            seen.add(path)
            todo.extend(imported_names(path))
            todo.extend(task_pieces(".".join(parts[:i])))
    return {str(p.relative_to(REPO)) for p in seen}


def make_record(uri: str, n_params: int = 2 * MAX_PARAMS_PER_BATCH + 17) -> RunRecord:
    """A record with more params than one MLflow batch takes, a curve, tags and texts."""
    params = {f"section.key{i:03d}": i for i in range(n_params)}
    params |= {"decode.strategy": "greedy", "evaluate.bucket_edges": [4, 6, 8]}
    return RunRecord(
        uri, "exp-test", "g2p-transformer-greedy-test", params,
        {"exact_match": 0.25, "test_perplexity": 3.5},
        [("train.loss", s, 10.0 / s) for s in (1, 2, 3)],
        {"contract.signature": "task:g2p|data:abc|fmt:1", "git.dirty": "False"},
        {"params.yaml": "task: g2p\n", "predictions/test.sample.jsonl": '{"id": 1}\n'})


def result_runs(repo: Path, experiment: str = "seqcore-g2p",
                **search: Any) -> tuple[mlflow.MlflowClient, list[Run]]:
    """The client of ``repo``'s MLflow store and its runs of ``experiment`` (newest first)."""
    import mlflow  # noqa: PLC0415 (slow import: only the tests that read runs)

    client = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment).experiment_id
    return client, client.search_runs([exp], order_by=["attributes.start_time DESC"], **search)


def run_artifact(client: mlflow.MlflowClient, rid: str, name: str, tmp: Path) -> bytes:
    """The bytes of artifact ``name`` of run ``rid``, downloaded into ``tmp / rid``."""
    import mlflow  # noqa: PLC0415 (slow import: only the tests that log runs)

    return Path(mlflow.artifacts.download_artifacts(
        run_id=rid, artifact_path=name, dst_path=str(tmp / rid),
        tracking_uri=client.tracking_uri)).read_bytes()


def assert_run_matches(client: mlflow.MlflowClient, rid: str, record: RunRecord,
                       tmp: Path) -> None:
    """The run ``rid`` holds every param, metric, step, tag and text of ``record``."""
    run = client.get_run(rid)
    assert run.info.run_name == record.run_name
    assert run.data.params == {k: v for k, v in param_items(record.params)}
    assert run.data.params["evaluate.bucket_edges"] == "[4, 6, 8]"
    assert run.data.metrics["exact_match"] == 0.25
    history = client.get_metric_history(rid, "train.loss")
    assert [(m.step, m.value) for m in history] == [(s, v) for _, s, v in record.steps]
    assert {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")} == \
        record.tags
    for name, text in record.texts.items():
        assert run_artifact(client, rid, name, tmp).decode() == text


def doc_blocks(page: Path, lang: str) -> list[tuple[str, str]]:
    """``(section heading, text)`` of every fenced ``lang`` block of a Markdown page, in
    order: the tests that run a documented sequence read it from the page, so a doc edit
    changes what they run."""
    blocks, heading, inside, lines = [], "", False, []
    for line in page.read_text(encoding="utf-8").splitlines():
        if not inside and line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif not inside and line.strip() == f"```{lang}":
            inside, lines = True, []
        elif inside and line.strip() == "```":
            inside = False
            blocks.append((heading, "\n".join(lines) + "\n"))
        elif inside:
            lines.append(line)
    return blocks


def doc_commands(block: str) -> list[str]:
    """The command lines of a bash block, without trailing comments and blank lines."""
    return [c for c in (re.split(r"\s{2,}#", line)[0].strip() for line in block.splitlines())
            if c and not c.startswith("#")]


# -- broken inputs, generated (issue 54) -------------------------------------------------------

#: Text files among the stages' inputs (the others are binary: models, FSTs, checkpoints).
TEXT_SUFFIXES = (".json", ".jsonl", ".csv", ".tsv", ".dict", ".sha256", ".txt", ".yaml", ".lock",
                 ".vocab")


class _Hostile:
    """A pickle that runs a command when unpickled: loading a checkpoint must never run it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def broken_variants(path: Path, marker: str) -> dict[str, bytes | None]:
    """The broken versions of ``path`` a user's accident makes (None: the file is gone)."""
    import pickle  # noqa: PLC0415 (only the matrix builds a hostile pickle)

    data = path.read_bytes()
    out: dict[str, bytes | None] = {"missing": None, "empty": b"",
                                    "truncated": data[: len(data) // 2]}
    if path.suffix in TEXT_SUFFIXES:
        out["not-utf8"] = b"\xff\xfe" + data[:200]
    if path.suffix == ".sha256":  # well formed, but another file's digest
        out["disagrees"] = hashlib.sha256(data).hexdigest().encode() + b"\n"
    if path.suffix == ".pt":
        out["hostile-pickle"] = pickle.dumps({"schema": 2, "x": _Hostile(marker)})
    return out


def broken_input_cases(root: Path, stage: str) -> list[str]:
    """The files stage ``stage`` of the result at ``root`` reads first, from its dvc.lock's
    deps (a folder dependency: each file in it), code aside; each file is listed at the first
    stage that reads it. A new input is covered when dvc.yaml declares it."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    seen: set[str] = set()
    out = []
    for name, entry in lock["stages"].items():
        for dep in entry.get("deps", []):
            path = root / dep["path"]
            if dep["path"].split("/")[0] in ("pipeline", "seqcore"):
                continue
            files = [path] if path.is_file() else sorted(
                f for f in path.rglob("*") if f.is_file() and not f.name.startswith("."))
            for f in files:
                rel = str(f.relative_to(root))
                if rel not in seen:
                    seen.add(rel)
                    if name == stage:
                        out.append(rel)
    return out


def assert_one_line_or_fallback(res: subprocess.CompletedProcess, rel: str, how: str) -> None:
    """A broken input ends in one of two ways: a stop (exit 1 or 2) whose last line names the
    file, or a documented fallback (exit 0); never a traceback (issue 54)."""
    err = res.stderr.strip()
    assert "Traceback" not in err, f"{rel} {how}: {err[-2000:]}"
    assert res.returncode in (0, 1, 2), (rel, how, res.returncode, err[-2000:])
    if res.returncode:
        last = err.splitlines()[-1] if err else ""
        assert Path(rel).name in last or str(Path(rel).parent) in last, (rel, how, last)


def run_broken(repo: Path, stage: str, tmp_path: Path) -> int:
    """Each file ``stage`` reads first (:func:`broken_input_cases`), each broken variant in
    turn, the stage run on it, the file restored. Returns the number of runs."""
    runs = 0
    for rel, how in each_broken(repo, broken_input_cases(repo, stage), tmp_path / "hostile-ran"):
        assert_one_line_or_fallback(run_python(repo, "-m", f"pipeline.{stage}"), rel, how)
        runs += 1
    return runs


def each_broken(root: Path, files: list[str], marker: Path) -> Iterator[tuple[str, str]]:
    """Yields (file, how) with ``file`` (relative to ``root``) broken that way
    (:func:`broken_variants`); restores it after each, and fails if a hostile pickle's code
    ran (it creates ``marker``)."""
    for rel in files:
        target = root / rel
        with restored(target) as (good,):
            for how, content in broken_variants(target, str(marker)).items():
                if content is None:
                    target.unlink()
                else:
                    target.write_bytes(content)
                yield rel, how
                target.write_bytes(good)
                assert not marker.exists(), f"{rel} {how}: the pickle's code ran"


@contextlib.contextmanager
def restored(*paths: Path) -> Iterator[tuple[bytes, ...]]:
    """Yields the bytes of ``paths`` and writes them back on leaving (a test changes them)."""
    kept = tuple(path.read_bytes() for path in paths)
    try:
        yield kept
    finally:
        for path, data in zip(paths, kept, strict=True):
            path.write_bytes(data)


#: Paths that are code or tooling, not a result's files.
NOT_RESULT = ("pipeline/", "seqcore/", "tests/", "benchmarks/", "tools/", ".git/", ".dvc/")

_TRACE: dict[str, object] = {"on": False, "paths": set()}


def _hook(event: str, args: tuple) -> None:
    if _TRACE["on"] and event in ("open", "sqlite3.connect") and args \
            and isinstance(args[0], (str, bytes, os.PathLike)):
        _TRACE["paths"].add(os.path.abspath(os.fsdecode(args[0])))  # type: ignore[union-attr]




def traced_reads(root: Path, under: Path, command: Callable[[], object]) -> list[str]:
    """The files below ``under`` (relative to ``root``) that ``command`` opens, in this
    process (an audit hook on ``open`` and ``sqlite3.connect``; code and tooling left out)."""
    if not _TRACE.get("hooked"):
        sys.addaudithook(_hook)  # cannot be removed: it records only while "on"
        _TRACE["hooked"] = True
    _TRACE["paths"] = set()
    _TRACE["on"] = True
    try:
        command()
    finally:
        _TRACE["on"] = False
    prefix = f"{under}{os.sep}"
    return sorted(rel for rel in (str(Path(p).relative_to(root)) for p in _TRACE["paths"]
                                  if p.startswith(prefix) and os.path.isfile(p))
                  if not rel.startswith(NOT_RESULT) and "__pycache__" not in rel)


def declares(stage_params: list[str | dict], key: str) -> bool:
    """Whether ``key`` is among a stage's params (``- params.yaml:`` declares every key)."""
    if any(isinstance(p, dict) and "params.yaml" in p for p in stage_params):
        return True
    return any(key == p or key.startswith(p + ".") for p in stage_params if isinstance(p, str))


def outcome(command: Callable[[], int | None],
            capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of an in-process command; an exception escaping it (the
    user's traceback) fails the test."""
    try:
        code = command() or 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err
