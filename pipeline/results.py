"""Results to compare, found by name: a folder, a git revision, a DVC experiment or an MLflow
run id (each gives its metrics, the rows scored and where they came from)."""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from seqcore.artifacts.predictions import (
    PredictionRow, Predictions, PredictionsHeader, header_path)
from seqcore.config import Config
from seqcore.metrics.comparison import NotComparable
from seqcore.signature_format import parse_signature


RUN_ID = re.compile(r"^[0-9a-f]{32}$")


class NotFound(LookupError):
    """A result name that names nothing readable (the message says where it looked)."""


@dataclass(frozen=True)
class Result:
    """One side of the comparison: its name, where its rows came from, rows and header."""

    name: str
    origin: str
    rows: list[PredictionRow]
    header: PredictionsHeader


def _from_file(name: str, path: Path, origin: str) -> Result:
    try:
        preds, header = Predictions.load_checked(path)
        return Result(name, origin, preds.rows, header)
    except FileNotFoundError as err:
        raise NotFound(f"{name}: {err.filename}: no such file") from None


def _from_revision(name: str, rev: str, relative: str, origin: str, failing: str) -> Result:
    """The predictions file and its header at ``rev``, through DVC (cache, then remote);
    ``failing`` leads the one line when they cannot be read."""
    import dvc.api  # noqa: PLC0415 (slow import; the library never imports dvc)

    header = str(header_path(relative))
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        local = Path(tmp) / Path(relative).name
        for src, dst in ((relative, local), (header, Path(tmp) / Path(header).name)):
            try:
                dst.write_bytes(dvc.api.read(src, rev=rev, mode="rb"))
            except Exception as err:  # noqa: BLE001 (DVC's errors: unknown rev, missing file)
                why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise NotFound(f"{failing}: {src}: {why}") from None
        return _from_file(name, local, origin)


def _from_run(name: str, cfg: Config, relative: str) -> Result:
    import mlflow  # noqa: PLC0415 (slow import)

    from pipeline.record import tracking_uri  # noqa: PLC0415 (only for a run id)

    uri = tracking_uri(cfg.mlflow.tracking_uri)
    try:
        tags = mlflow.MlflowClient(uri).get_run(name).data.tags
    except Exception:  # noqa: BLE001 (MlflowException: no such run)
        raise NotFound(f"{name}: no MLflow run with this id in {uri}") from None
    rev = tags.get("dvc.exp.name") or tags.get("mlflow.source.git.commit")
    if not rev:
        raise NotFound(f"{name}: MLflow run in {uri} records no dvc.exp.name or git commit")
    try:
        return _from_revision(name, rev, relative, f"MLflow run {name}: revision {rev}",
                              f"{name}: MLflow run at revision {rev}")
    except NotFound as at_revision:
        # The documented order commits a result after its run: the run's commit has no
        # lock entry for it. The run's own dvc.lock artifact names the predictions' md5.
        try:
            return _from_run_lock(name, uri, relative)
        except NotFound:
            raise at_revision from None


def _from_run_lock(name: str, uri: str, relative: str) -> Result:
    """The predictions file the run's logged ``dvc.lock`` records, from the local DVC cache."""
    import mlflow  # noqa: PLC0415 (slow: only for a run id)
    from dvc.repo import Repo  # noqa: PLC0415 (slow import; the library never imports dvc)

    folder, file = relative.rsplit("/", 1)
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        try:
            lock = yaml.safe_load(Path(mlflow.artifacts.download_artifacts(
                run_id=name, artifact_path="dvc.lock", dst_path=tmp,
                tracking_uri=uri)).read_text())
            md5 = next(o["md5"] for s in lock["stages"].values() for o in s.get("outs", [])
                       if o["path"] == folder)
        except Exception:  # noqa: BLE001 (no artifact, or no such out in it)
            raise NotFound(f"{name}: its dvc.lock artifact records no {folder}") from None
        with Repo(".") as repo:
            listing = Path(repo.cache.local.oid_to_path(md5))
            if not listing.is_file():
                raise NotFound(f"{name}: {folder} ({md5}) is not in the local DVC cache; "
                               "`dvc pull` it")
            entries = {e["relpath"]: e["md5"] for e in json.loads(listing.read_text())}
            for rel in (file, header_path(file).name):
                blob = Path(repo.cache.local.oid_to_path(entries.get(rel, "0" * 32)))
                if not blob.is_file():
                    raise NotFound(f"{name}: {folder}/{rel} is not in the local DVC cache")
                (Path(tmp) / rel).write_bytes(blob.read_bytes())
        return _from_file(name, Path(tmp) / file, f"MLflow run {name}: its dvc.lock, the DVC "
                                                   "cache")


def find_result(name: str, cfg: Config) -> Result:
    """A predictions file, a folder with one, an MLflow run id or a git revision."""
    split = cfg.decode.split
    relative = f"{cfg.paths.predictions.rstrip('/')}/{split}.jsonl"
    path = Path(name)
    if path.is_file():
        return _from_file(name, path, str(path))
    if path.is_dir():
        for candidate in (path / relative, path / f"{split}.jsonl"):
            if candidate.is_file():
                return _from_file(name, candidate, str(candidate))
        raise NotFound(f"{name}: a folder without {relative} or {split}.jsonl")
    if "/" in name or name.endswith(".jsonl"):
        raise NotFound(f"{name}: no such file or folder")
    if RUN_ID.match(name):
        return _from_run(name, cfg, relative)
    return _from_revision(name, name, relative, f"revision {name} (through DVC)",
                          f"{name}: not a file or folder here; as a git revision or `dvc exp` "
                          "name")


def check_same_data(a: Result, b: Result) -> None:
    """Stop unless both were decoded from the same data (the contract's data hash). A side
    without one (the baseline's predictions, ``baseline/<split>.jsonl``, are signed by the
    baseline signature) is checked by its rows alone (compare_rows: ids, sources,
    references)."""
    da = parse_signature(a.header.signature or "").get("data")
    db = parse_signature(b.header.signature or "").get("data")
    if da is not None and db is not None and da != db:
        raise NotComparable(f"not the same evaluation set: A was decoded from data {da}, "
                            f"B from data {db} (the contract signatures' data field)")
