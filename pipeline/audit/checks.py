"""The checks of the default audit, each wired to its inputs (pipeline/audit/core.py runs them in
order and prints the report): DVC's own status, the contract every task's result records,
the training record and its replay, the MLflow run and the producing environment. A check
that cannot run is NOT RUN, which fails the audit."""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.audit import rederive, replay
from pipeline.audit.mlflow_run import find_run
from pipeline.dvc_files import read_yaml12
from seqcore import environment
from seqcore.artifacts.result_files import ResultFiles
from seqcore.audit import (
    AuditReport,
    json_diffs,
    same_value_diffs,
    tokenizer_file_diffs,
)
from seqcore.config import Config, as_dict
from seqcore.credentials import redact_text
from seqcore.determinism import device_kind
from seqcore.hashing import sha256_file
from seqcore.training.checkpoint import ledger_files


def dvc_status() -> list[str]:
    """``dvc status`` (in-process): every stage DVC itself considers changed."""
    from dvc.repo import Repo  # noqa: PLC0415 (slow import)

    repo = Repo(".")
    try:
        status = repo.status()
    finally:
        repo.close()
    return [f"dvc status: {stage}: {json.dumps(changes, sort_keys=True)}"
            for stage, changes in sorted(status.items())]


def common_contract_checks(cfg: Config, files: ResultFiles) -> list[str]:
    """What every task's result records alike: the tokenizer files, the model file's hash
    in the predictions header, the raw data's hash and the decode settings."""
    tc, header = files.tokenizer_contract, files.header
    diffs = tokenizer_file_diffs(Path(cfg.paths.tokenizer), tc, sha256_file)
    model = Path(cfg.paths.model)
    diffs += same_value_diffs("model sha256", {
        str(model): sha256_file(model), "predictions header": header.model_sha256})
    raw = Path(cfg.paths.raw)
    diffs += same_value_diffs("data sha256", {
        "tokenizer contract": tc.data_sha256,
        str(raw): sha256_file(raw) if raw.exists() else "missing"}
        | ({"params data.sha256": cfg.data.sha256} if cfg.data.sha256 else {}))
    diffs += json_diffs("decode settings", ("params.yaml", "predictions header"),
                          as_dict(cfg.decode), as_dict(header.decode))
    return diffs


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_check(report: AuditReport, name: str, check: Callable[[], list[str]],
              warning: str = "", strict: bool = False) -> None:
    """Add a check's differences; a check that cannot run (missing or broken input) is
    NOT RUN, which fails the audit. A check the report does not want (``--only``) is skipped.
    With a ``warning`` (why its differences prove nothing here), they come after that line
    as a warning, which fails the audit only when ``strict``."""
    if not report.wants(name):
        return
    start = time.perf_counter()
    try:
        diffs = check()
        if warning:
            report.warn(name, [warning, *diffs] if diffs else [], strict)
        else:
            report.add(name, diffs)
    except Exception as err:  # noqa: BLE001 (whatever stops a check, it did not run: say so)
        report.not_run(name, f"could not run: {type(err).__name__}: {err}")
    report.seconds[name] = time.perf_counter() - start
    # each check's line as it finishes (stderr), the whole report at the end (stdout)
    print(f"[audit] {report.status[name]:8s} {name} ({report.seconds[name]:.1f} s)",
          file=sys.stderr, flush=True)


#: Environment fields that name the CPU: under the portable CPU kernel profile they change
#: no byte (seqcore.kernels), so they are no difference of a portable result.
CPU_FIELDS = ("cpu_capability:", "cpu:")


def environment_diffs(run: Any, portable: bool = False) -> list[str]:
    """The producing environment the MLflow run records (tags ``env.*``) against the one
    this audit runs in. No DVC-tracked file records it (issue 34: the same inputs give the
    same bytes on any machine), so without a run there is nothing to compare. ``portable``:
    the result was trained and decoded under the portable profile (the CPU is left out)."""
    if run is None:
        raise LookupError("no MLflow run: the producing environment is recorded only there")
    tags = {k[len("env."):]: v for k, v in run.data.tags.items() if k.startswith("env.")}
    diffs = environment.environment_diffs(f"mlflow run {run.info.run_id} tags env.*", tags,
                                          environment.producing_environment())
    return [d for d in diffs if not (portable and d.startswith(CPU_FIELDS))]


def training_check(report: AuditReport, cfg: Config, files: ResultFiles) -> None:
    """The training record against the ledger's last state (it travels with the result), or
    the checkpoints, or (a result trained before the ledger, in a clone where the checkpoints
    never travel) against the model file, with a warning."""
    if not report.wants("training record"):
        return
    if ledger_files(Path(cfg.paths.ledger)):
        run_check(report, "training record", lambda: rederive.training_diffs(
            cfg, files.meta, Path(cfg.paths.ledger)))
        return
    try:
        folder = rederive.checkpoint_folder(cfg)
    except Exception as err:  # noqa: BLE001 (as in run_check)
        report.not_run("training record", f"could not run: {type(err).__name__}: {err}")
        return
    if folder.is_dir():
        run_check(report, "training record", lambda: rederive.training_diffs(cfg, files.meta,
                                                                              folder))
        return
    run_check(report, "training record",
              lambda: rederive.training_meta_diffs(cfg, files.meta))
    report.warn("checkpoints", [f"{folder} is not here (working state of the machine that "
                                "trained; never pushed): the training record was checked "
                                "against the model file only"])


def replay_check(report: AuditReport, cfg: Config, params: str, segments: int,
                 seed: int | None, run: Any, strict_env: bool = False) -> None:
    """Replay the state before the first step and ``segments`` segments of the training from
    its ledger (pipeline/audit/replay.py), on the CPU kernels the run records. A training of
    several processes or on a device this host lacks cannot be replayed here: a warning. On
    another CPU model than the run records, a difference is a warning (``strict_env``: a
    failure)."""
    name = "training replay"
    if not report.wants(name) or segments <= 0:
        return
    world = cfg.train.nproc, device_kind(cfg.train.device)
    if world != (1, "cpu") and not (world[1] == "cuda" and has_cuda()):
        report.warn(name, [f"a training of {world[0]} process(es) on {world[1]} is not "
                           "replayed by this audit (it replays one process, on CPU or one "
                           "GPU): --rebuild re-runs it whole"])
        return
    try:
        plan, found = replay.plan(Path(cfg.paths.ledger), segments, seed)
    except Exception as err:  # noqa: BLE001 (as in run_check)
        report.not_run(name, f"could not run: {type(err).__name__}: {err}")
        return
    line = plan.line(found)
    report.notes[name] = [line]
    print(f"[audit] {name}: {line}", file=sys.stderr, flush=True)
    tags = run.data.tags if run is not None else {}

    def replayed() -> list[str]:
        return replay.run_replay(params, Path(cfg.paths.ledger), plan.chosen,
                                       tags.get("env.cpu_capability"))

    trained_on, here = tags.get("env.cpu"), environment.producing_environment().cpu
    if cfg.train.cpu_kernels == "native" and world[1] == "cpu":
        kind = (f"warning: trained with train.cpu_kernels: native (CPU kernels "
                f"{tags.get('env.cpu_capability') or 'unrecorded'} on "
                f"{trained_on or 'an unrecorded CPU'}): reproducible on this CPU kind only")
        report.notes[name].append(kind)
        print(f"[audit] {name}: {kind}", file=sys.stderr, flush=True)
    # Under native kernels MKL's differ by CPU model (an AMD and an Intel AVX-512 host train
    # two models from the same inputs): a difference is then no proof of another training.
    # The portable profile gives every AVX2 host the same bytes: no excuse then.
    warning = "" if not trained_on or trained_on == here or \
        cfg.train.cpu_kernels == "portable" else (
        f"trained on {trained_on!r}, replayed on {here!r}: float kernels differ by CPU model, "
        "so these differences do not prove another training; replay on the training's CPU "
        "model, or pass --strict-env to fail on them")
    run_check(report, name, replayed, warning, strict_env)


def has_cuda() -> bool:
    import torch  # noqa: PLC0415 (heavy: only to ask for CUDA)

    return torch.cuda.is_available()


def read_run(uri: str, cfg: Config, run_id: str | None) -> tuple[Any, str | None]:
    """The MLflow run to compare, from the store at ``uri``, or why it cannot be read (the
    store's password masked)."""
    try:
        lock = read_yaml12(Path("dvc.lock")) if Path("dvc.lock").exists() else None
        return find_run(uri, cfg, run_id, lock), None
    except Exception as err:  # noqa: BLE001 (any store failure is an audit finding)
        return None, redact_text(f"cannot read the MLflow run: {type(err).__name__}: {err}",
                                 (uri,))
