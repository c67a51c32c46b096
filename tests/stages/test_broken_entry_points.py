"""The user commands beside the stages (predict, compare, the audit, copy_run, the logged
MLflow model, `mlflow models serve`) against each broken variant of every file they are traced
opening (issue 54): a stop whose last line names the file (exit 1 or 2; the pyfunc: one
:class:`OneLineError`) or the good run's output; never a traceback or the pickle's code run."""

from __future__ import annotations

import contextlib
import importlib
import re
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.load import served
from pipeline.audit.options import AuditOptions
from pipeline.dvc_files import read_yaml12
from seqcore.errors import OneLineError
from tests.pipeline_helpers import each_broken, outcome, restored, run_python, traced_reads

pytestmark = pytest.mark.slow  # the shared tiny result
#: The seconds a command reports (the audit's checks and total take their own).
SECONDS = re.compile(r"\d+\.\d s\b")


def assert_stop_or_same(rel: str, how: str, got: tuple[int, str, str], good: str) -> None:
    """A stop whose last line names the file, or the good run's output (its seconds aside)."""
    code, out, err = got
    assert "Traceback" not in err, f"{rel} {how}: {err[-2000:]}"
    if code == 0:
        assert SECONDS.sub("_ s", out) == SECONDS.sub("_ s", good), \
            f"{rel} {how}: exit 0 with other output\n{err[-1000:]}"
        return
    assert code in (1, 2), (rel, how, code, err[-2000:])
    last = err.strip().splitlines()[-1] if err.strip() else ""
    assert Path(rel).name in last or str(Path(rel).parent) in last, (rel, how, last)


def run_matrix(root: Path, command: Callable[[], int | None], capsys: pytest.CaptureFixture,
               tmp_path: Path, at_least: int) -> None:
    """``command`` (run in ``root``) against each broken variant of each file it reads."""
    good_code, good, _ = outcome(command, capsys)
    assert good_code == 0, "the command fails on the intact result"
    files = traced_reads(root, root, lambda: outcome(command, capsys))
    runs = 0
    for rel, how in each_broken(root, files, tmp_path / "hostile-ran"):
        assert_stop_or_same(rel, how, outcome(command, capsys), good)
        runs += 1
    assert runs >= at_least, f"{runs} broken runs over {files}: a read went missing"


@pytest.fixture
def inside(result: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(result)
    return result


@pytest.mark.parametrize(("module", "argv", "at_least"), [
    # params, model and sidecar, tokenizer contract and models, baseline WFST and record
    pytest.param("pipeline.predict", ["cat", "zebra"], 30,
                 id="test_predict_against_every_broken_file_it_reads"),
    # params, both predictions files and their headers: an emptied file is named by the
    # row count its header records, not compared as a smaller set
    pytest.param("pipeline.compare", ["baseline", ".", "--samples", "20"], 18,
                 id="test_compare_against_every_broken_file_it_reads"),
])
def test_a_command_against_every_broken_file_it_reads(
        module: str, argv: list[str], at_least: int, inside: Path,
        capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    main = importlib.import_module(module).main  # imports the model code: not at collection
    run_matrix(inside, lambda: main(list(argv)), capsys, tmp_path, at_least)


def test_the_audit_against_every_broken_file_it_reads_before_its_checks(
        inside: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """What the audit reads outside its checks (params, dvc.lock) and the package check's
    requirements.lock (a check's broken file fails it: test_audit.py, test_forgery.py); a half
    requirements.lock is a finding, not a pass."""
    from pipeline.audit.cli import run  # noqa: PLC0415

    opts = AuditOptions("params.yaml", None, False, False, False, ("package versions",), 0)
    run_matrix(inside, lambda: run(opts, None, Path(".")), capsys, tmp_path, at_least=12)
    lock = inside / "requirements.lock"
    with restored(lock) as (good,):
        lock.write_bytes(good[: len(good) // 2])
        code, out, _ = outcome(lambda: run(opts, None, Path(".")), capsys)
    assert code == 1 and "requirements.lock pins no version of" in out


def test_audit_of_a_run_id_against_a_broken_store(result: Path, tmp_path: Path) -> None:
    """``audit --run RUN_ID`` reads the store first: a broken one stops it in one line naming
    the store, exit status 2."""
    with contextlib.closing(sqlite3.connect(result / "mlflow.db")) as db:
        (run_id,) = db.execute("SELECT run_uuid FROM runs LIMIT 1").fetchone()
    runs = 0
    for _, how in each_broken(result, ["mlflow.db"], tmp_path / "hostile-ran"):
        res = run_python(result, "-m", "pipeline.audit", "--run", run_id)
        assert "Traceback" not in res.stderr and res.returncode == 2, (how, res.stderr[-2000:])
        assert "mlflow.db" in res.stderr.strip().splitlines()[-1], (how, res.stderr[-500:])
        runs += 1
    assert runs == 3


def test_copy_run_against_every_broken_file_it_reads_itself(
        result: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """Every file it reads that dvc.lock does not record (a locked file is named by the lock's
    hash check first; the run's artifacts: test_forgery.py), run as users run it."""
    from pipeline.copy_run import CopyError, copy_run  # noqa: PLC0415
    from pipeline.stage import load_params  # noqa: PLC0415

    def copy() -> subprocess.CompletedProcess:
        return run_python(result, "-m", "pipeline.copy_run", "--to",
                          f"sqlite:///{tmp_path / 'target.db'}")

    good = copy()
    assert good.returncode == 0, good.stderr[-2000:]

    def trace() -> None:  # in this process, whose CPU kernels may not be the result's: the
        # redone evaluation may then differ, which only ends the copy after its reads
        with contextlib.suppress(CopyError):
            copy_run(load_params("params.yaml"), f"sqlite:///{result / 'mlflow.db'}",
                     f"sqlite:///{tmp_path / 'trace.db'}")

    with contextlib.chdir(result):
        reads = traced_reads(result, result, trace)
    capsys.readouterr()
    locked = {e["path"] for stage in read_yaml12(result / "dvc.lock")["stages"].values()
              for e in (*stage.get("deps", []), *stage.get("outs", []))}
    files = [f for f in reads if not f.startswith("mlruns/")
             and not any(f == o or f.startswith(f"{o}/") for o in locked)]
    assert {"mlflow.db", "dvc.lock", "dvc.yaml", "params.yaml"} <= set(files), files
    for rel, how in each_broken(result, files, tmp_path / "hostile-ran"):
        res = copy()
        assert_stop_or_same(rel, how, (res.returncode, "", res.stderr), "")


def packed_model(root: Path) -> Path:
    """The folder of the result's logged MLflow model (the oldest: copy_run logs others)."""
    return min(root.glob("mlruns/*/models/*/artifacts/MLmodel"),
               key=lambda p: p.stat().st_mtime).parent


def test_the_logged_model_against_every_broken_file_it_packs(
        result: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """The pyfunc (what `mlflow models serve` and `models:/` load) raises one OneLineError
    naming the packed file, or answers as before (MLflow's own files are MLflow's to read)."""
    import mlflow  # noqa: PLC0415 (slow import)
    import pandas as pd  # noqa: PLC0415

    folder = packed_model(result)

    def answers() -> str:
        model = mlflow.pyfunc.load_model(str(folder))
        return model.predict(pd.DataFrame({"source": ["cat", "zebra"]})).to_json()

    good = answers()
    files = traced_reads(result, folder / "artifacts", answers)
    assert len(files) >= 6, files  # model, sidecar, contract, both tokenizers, decode.json
    for rel, how in each_broken(result, files, tmp_path / "hostile-ran"):
        try:
            assert answers() == good, f"{rel} {how}: answered otherwise"
        except OneLineError as err:
            assert "\n" not in str(err), (rel, how, str(err))
            assert Path(rel).name in str(err) or str(Path(rel).parent) in str(err), (rel, how)


def test_a_served_model_with_a_broken_file_never_answers_and_names_it(
        result: Path, tmp_path: Path) -> None:
    """Weights cut: no server comes up, and its output names the file (MLflow's CLI then
    prints its own traceback)."""
    folder = packed_model(result)
    weights = folder / "artifacts" / "result" / "model.pt"
    log = tmp_path / "serve.log"
    with restored(weights) as (good,):
        weights.write_bytes(good[: len(good) // 2])
        with pytest.raises(RuntimeError, match="did not start"), \
                served(str(folder), f"sqlite:///{result / 'mlflow.db'}", result, log):
            pass
    said = log.read_text(errors="replace")
    assert f"{weights}: sha256" in said and "truncated or corrupted" in said
