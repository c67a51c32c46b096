"""What every artifact class shares: stable JSON bytes and the schema-version check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqcore.errors import OneLineError, unreadable

#: The first version of a format that carried no version field: a file without the field is
#: read as it. The manifests, predictions headers, results.json and the MLflow pending file
#: write it since 2026-12-05; the files DVC reads as metrics (coverage, train_metrics,
#: metrics, headline) and the training log do not: `dvc metrics show` and `dvc exp show`
#: would list the field beside the figures, and a CSV has no place for it.
UNVERSIONED = 1


class ArtifactError(OneLineError, ValueError):
    """A file between stages that cannot be read as its artifact class: a schema version
    this code does not read, or a field missing. The message is one line naming the file."""


def check_version(path: str | Path, kind: str, found: Any, expected: int) -> None:
    """Raise ArtifactError (one line naming ``path``) unless ``found == expected``."""
    if found != expected:
        raise ArtifactError(f"{path}: {kind} schema version {found!r}, this code reads version "
                            f"{expected}; re-run the stage that writes it (dvc repro)")


def json_text(obj: Any) -> str:
    """Pretty, key-sorted, strict JSON with a trailing newline (stable bytes).

    ``allow_nan=False``: a NaN or infinity raises here instead of writing a bare ``NaN`` that
    most JSON readers reject; producers turn undefined values into ``null`` with a reason
    first (seqcore.nulls, issue 13).
    """
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: str | Path, obj: Any) -> None:
    """Write :func:`json_text` of ``obj``, creating the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json_text(obj), encoding="utf-8")


def read_json(path: str | Path) -> Any:
    """The JSON value of ``path`` (UnreadableFile, one line naming it, when it is not UTF-8
    or not JSON: an empty or cut-off file; issue 54)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise unreadable(path, err) from None


def write_versioned(path: str | Path, version: int, fields: dict[str, Any]) -> None:
    """Write ``fields`` with their ``schema_version`` (:func:`write_json`): what
    :func:`read_versioned` reads back."""
    write_json(path, {"schema_version": version} | fields)


def read_versioned(path: str | Path, kind: str, expected: int) -> dict[str, Any]:
    """A JSON artifact's fields after checking its ``schema_version`` (absent: UNVERSIONED)
    against ``expected``; the version field itself is removed."""
    data = read_json(path)
    check_version(path, kind, data.pop("schema_version", UNVERSIONED), expected)
    return data


def fields_error(path: str | Path, kind: str, err: Exception) -> ArtifactError:
    """A missing or unexpected field, as one line naming the file."""
    return ArtifactError(f"{path}: not a {kind} file this code reads ({type(err).__name__}: "
                         f"{err}); re-run the stage that writes it (dvc repro)")
