"""The first difference between two versions of a file or folder, with both sides named.

The audit regenerates files and compares them with the ones on disk; a difference is shown
as the first differing field (JSON key, JSONL line and key, CSV row and column, or text
line) printed whole, because a cut value can hide the very character that differs.
"""

from __future__ import annotations

import csv
import fnmatch
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

#: The most differing items one comparison prints after its first (the count is always given).
MAX_SHOWN = 3


def _show(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value, ensure_ascii=False)


_ABSENT = object()


def flat_fields(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"a.b": value}`` (lists and scalars are leaf values)."""
    if not isinstance(obj, dict):
        return {prefix or "(value)": obj}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        out |= flat_fields(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def field_differences(left: Any, right: Any) -> list[tuple[str, Any, Any]]:
    """(field, left value, right value) for each field that differs, in sorted field order."""
    a, b = flat_fields(left), flat_fields(right)
    return [(k, a.get(k, _ABSENT), b.get(k, _ABSENT)) for k in sorted(set(a) | set(b))
            if a.get(k, _ABSENT) != b.get(k, _ABSENT)]


def _fields(where: str, sides: tuple[str, str], left: Any, right: Any) -> list[str]:
    diffs = field_differences(left, right)
    shown = [f"{where}field {k}: {sides[0]} has {_show(x)}, {sides[1]} has {_show(y)}"
             for k, x, y in diffs[:MAX_SHOWN]]
    return shown + ([f"{where}... {len(diffs) - MAX_SHOWN} more fields differ"]
                    if len(diffs) > MAX_SHOWN else [])


def _parse_lines(kind: str, text: str) -> list[Any]:
    if kind == ".jsonl":
        return [json.loads(line) for line in text.splitlines()]
    if kind in (".csv", ".tsv"):
        return list(csv.reader(io.StringIO(text), delimiter="\t" if kind == ".tsv" else ","))
    return text.splitlines()


def _rows(name: str, kind: str, sides: tuple[str, str], a: str, b: str) -> list[str]:
    """JSONL / CSV / text: the first differing line, by field or column, and the counts."""
    left, right = _parse_lines(kind, a), _parse_lines(kind, b)
    header = left[0] if kind in (".csv", ".tsv") and left else None
    out = []
    if len(left) != len(right):
        out.append(f"{name}: {sides[0]} has {len(left)} lines, {sides[1]} has {len(right)}")
    bad = [i for i, (x, y) in enumerate(zip(left, right)) if x != y]
    if bad:
        i = bad[0]
        x, y = left[i], right[i]
        where = f"{name}: line {i + 1}: "
        if kind == ".jsonl":
            out += _fields(where, sides, x, y)
        elif header is not None:
            cols = [c for c in range(max(len(x), len(y)))
                    if (x[c:c + 1] or [None]) != (y[c:c + 1] or [None])]
            col = cols[0]
            label = header[col] if col < len(header) else f"#{col + 1}"
            out.append(f"{where}column {label}: {sides[0]} has "
                       f"{_show(x[col] if col < len(x) else _ABSENT)}, {sides[1]} has "
                       f"{_show(y[col] if col < len(y) else _ABSENT)}")
        else:
            out.append(f"{where}{sides[0]} has {_show(x)}, {sides[1]} has {_show(y)}")
        if len(bad) > 1:
            out.append(f"{name}: {len(bad)} lines differ in all")
    return out or [f"{name}: bytes differ (line endings or a trailing newline)"]


def first_difference(name: str, sides: tuple[str, str], left: bytes, right: bytes) -> list[str]:
    """How ``left`` and ``right`` (two versions of file ``name``) differ; [] when equal.

    Args:
        name: the file's path (its suffix chooses JSON / JSONL / CSV / TSV / text / bytes).
        sides: labels of the two versions, e.g. ("file", "recomputed").
    """
    if left == right:  # equal bytes, whatever they parse to (a JSON list too)
        return []
    kind = Path(name).suffix
    try:
        a, b = left.decode("utf-8"), right.decode("utf-8")
        if kind == ".json":
            x, y = json.loads(a), json.loads(b)
            if x == y:
                return []
            return _fields(f"{name}: ", sides, x, y) or [f"{name}: bytes differ (formatting)"]
        if kind == ".png" or "\0" in a:
            raise UnicodeDecodeError("utf-8", left, 0, 1, "binary")
        return _rows(name, kind, sides, a, b)
    except (UnicodeDecodeError, ValueError):
        offset = next((i for i, (p, q) in enumerate(zip(left, right)) if p != q),
                      min(len(left), len(right)))
        return [f"{name}: bytes differ from offset {offset}: {sides[0]} sha256 "
                f"{hashlib.sha256(left).hexdigest()} ({len(left)} bytes), {sides[1]} sha256 "
                f"{hashlib.sha256(right).hexdigest()} ({len(right)} bytes)"]


def _files(root: Path, ignore: list[str]) -> dict[str, Path]:
    if root.is_file():
        return {"": root}
    found = {}
    for dirpath, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if not any(fnmatch.fnmatch(d, p) for p in ignore)]
        for n in names:
            if not any(fnmatch.fnmatch(n, p) for p in ignore):
                full = Path(dirpath) / n
                found[full.relative_to(root).as_posix()] = full
    return found


def path_differences(name: str, sides: tuple[str, str], left: Path, right: Path,
                     ignore: tuple[str, ...] = ("__pycache__", "*.pyc")) -> list[str]:
    """``first_difference`` for every file of two files or folders (``name`` = their path)."""
    if not left.exists() or not right.exists():
        missing = sides[0] if not left.exists() else sides[1]
        return [f"{name}: missing in {missing}"] if left.exists() or right.exists() else []
    a, b = _files(left, list(ignore)), _files(right, list(ignore))
    out = []
    for rel in sorted(set(a) | set(b)):
        label = f"{name}/{rel}" if rel else name
        if rel not in a or rel not in b:
            out.append(f"{label}: only in {sides[1] if rel not in a else sides[0]}")
            continue
        out += first_difference(label, sides, a[rel].read_bytes(), b[rel].read_bytes())
    return out
