"""Raw-file readers with an explicit bad-row policy.

Every line that is dropped or altered is recorded as a Reject with file:line and reason; under
the ``strict`` policy the first dropped row stops the read with a BadRowError instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from seqcore.data.records import BadRowError, Pair, ReadResult, Reject
from seqcore.text import Normalization, has_control_chars, normalize

Policy = Literal["strict", "skip"]
_VARIANT = re.compile(r"^(?P<word>.+?)(\((?P<n>\d+)\))?$")
_STRESS = re.compile(r"\d")
_BOM = b"\xef\xbb\xbf"


class _Fields:
    """Parsed raw fields of one row before validation (None = field absent)."""

    def __init__(self, source: str, target: str, id_: str | None, group: str | None) -> None:
        self.source, self.target, self.id, self.group = source, target, id_, group


def read_pairs(
    path: Path,
    fmt: Literal["cmudict", "tsv", "jsonl"],
    policy: Policy,
    norm: Normalization,
    casefold: bool,
    keep_stress: bool = False,
) -> ReadResult:
    """Read a parallel file into normalised pairs.

    Args:
        path: the raw file.
        fmt: cmudict (``word PH1 PH2 ... # comment``), tsv (``source<TAB>target`` or a header
            with source/target and optional id/group columns) or jsonl (same field names).
        policy: strict stops at the first bad row; skip drops it and records it.
        norm, casefold: the text normalisation contract.
        keep_stress: CMUdict only: keep the ARPAbet stress digits.
    """
    result = ReadResult()
    name = str(path)
    parse = _PARSERS[fmt](keep_stress)
    seen: set[tuple[str, str]] = set()
    for lineno, text in _lines(path, result):
        if text is None:
            _reject(result, policy, Reject(name, lineno, "invalid-utf8", "<undecodable bytes>"))
            continue
        if not text.strip() or (fmt == "cmudict" and text.startswith(";;;")):
            continue
        fields = parse(text, lineno)
        if isinstance(fields, str):
            if fields != "header":
                _reject(result, policy, Reject(name, lineno, fields, text))
            continue
        reason = _invalid(fields)
        if reason:
            _reject(result, policy, Reject(name, lineno, reason, text))
            continue
        src = normalize(fields.source, norm, casefold)
        tgt = normalize(fields.target, norm, False if fmt == "cmudict" else casefold)
        if (src, tgt) in seen:
            _reject(result, policy, Reject(name, lineno, "duplicate", text))
            continue
        seen.add((src, tgt))
        id_ = fields.id or f"{path.name}:{lineno}"
        result.pairs.append(Pair(id_, src, tgt, fields.group or src, lineno))
    return result


def _lines(path: Path, result: ReadResult) -> Iterator[tuple[int, str | None]]:
    """Yield (line number, decoded text or None if not UTF-8), recording BOM/CRLF fixes."""
    data = path.read_bytes()
    if data.startswith(_BOM):
        data = data[len(_BOM):]
        result.rejects.append(Reject(str(path), 1, "bom-stripped", "", "altered"))
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
            result.rejects.append(Reject(str(path), lineno, "crlf-stripped", "", "altered"))
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError:
            yield lineno, None


def _invalid(fields: _Fields) -> str | None:
    for side, value in (("source", fields.source), ("target", fields.target)):
        if value == "":
            return f"empty-{side}"
        if has_control_chars(value):
            return f"control-chars-{side}"
        if not value.strip():
            return f"whitespace-only-{side}"
    return None


def _reject(result: ReadResult, policy: Policy, reject: Reject) -> None:
    if policy == "strict":
        raise BadRowError(reject)
    result.rejects.append(reject)


def _cmudict(keep_stress: bool) -> Callable[[str, int], _Fields | str]:
    def parse(text: str, lineno: int) -> _Fields | str:
        body = text.split("#", 1)[0].split()
        if len(body) < 2:
            return "wrong-field-count"
        match = _VARIANT.match(body[0])
        word = match.group("word") if match else body[0]
        phones = " ".join(body[1:])
        if not keep_stress:
            phones = _STRESS.sub("", phones)
        return _Fields(word, phones, body[0], word)

    return parse


def _tsv(_: bool) -> Callable[[str, int], _Fields | str]:
    columns: list[str] = []

    def parse(text: str, lineno: int) -> _Fields | str:
        cells = text.split("\t")
        if lineno == 1 and "source" in cells and "target" in cells:
            columns.extend(cells)
            return "header"
        names = columns or ["source", "target"]
        if len(cells) != len(names):
            return "wrong-field-count"
        row = dict(zip(names, cells))
        return _Fields(row["source"], row["target"], row.get("id"), row.get("group"))

    return parse


def _jsonl(_: bool) -> Callable[[str, int], _Fields | str]:
    def parse(text: str, lineno: int) -> _Fields | str:
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            return "invalid-json"
        if not isinstance(row, dict) or not {"source", "target"} <= set(row):
            return "wrong-field-count"
        if not all(isinstance(row.get(k, ""), str) for k in ("source", "target", "id", "group")):
            return "non-string-field"
        return _Fields(row["source"], row["target"], row.get("id"), row.get("group"))

    return parse


_PARSERS = {"cmudict": _cmudict, "tsv": _tsv, "jsonl": _jsonl}
