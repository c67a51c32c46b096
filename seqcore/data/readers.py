"""Raw-file readers with an explicit bad-row policy.

Every line that is dropped, altered or ignored is recorded as a Reject with file:line and a
reason code (the README lists them). Under the ``strict`` policy the first row that would be
dropped stops the read with a BadRowError; lossless fixes (a BOM, CRLF line ends) are applied
and recorded under both policies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from seqcore.data.records import BadRowError, Pair, ReadResult, Reject
from seqcore.text import Normalization, normalization_changes, normalize, unencodable_reason

Policy = Literal["strict", "skip"]
Format = Literal["cmudict", "tsv", "jsonl"]
_VARIANT = re.compile(r"^(?P<word>.+?)(\((?P<n>\d+)\))?$")
_STRESS = re.compile(r"\d")
_BOM = "\ufeff"
#: Columns a TSV header (or a JSONL object) may name; source and target are required.
FIELDS = ("source", "target", "id", "group")


class HeaderError(ValueError):
    """A TSV header names unknown or repeated columns (fatal under both policies)."""


@dataclass(frozen=True)
class _Fields:
    """Raw fields of one row before validation (None = field absent)."""

    source: str
    target: str
    id: str | None = None
    group: str | None = None


def read_pairs(
    path: Path,
    fmt: Format,
    policy: Policy,
    norm: Normalization,
    casefold: bool,
    keep_stress: bool = False,
    label: str | None = None,
    casefold_target: bool = False,
    limit: int = 0,
) -> ReadResult:
    """Read a parallel file into normalised pairs.

    Args:
        path: the raw file.
        fmt: cmudict (``word PH1 PH2 ... # comment``), tsv (``source<TAB>target``, or a header
            naming source, target and optionally id and group) or jsonl (same field names).
        policy: strict stops at the first bad row; skip drops it and records it.
        norm, casefold: the text normalisation contract; ``casefold`` folds the source.
        casefold_target: fold the target too (CMUdict phones are never case-folded).
        keep_stress: CMUdict only: keep the ARPAbet stress digits.
        label: the file name written in rejects and errors (default ``path``).
        limit: stop reading once this many pairs are kept (0 = read the whole file); the
            lines after that pair are neither read nor listed as rejects.

    Returns:
        Kept pairs (group defaults to the normalised source, so variants share a split) and
        every dropped, altered or ignored line; a kept row that Unicode normalisation
        changed is listed as altered (``nfkc-changed-source`` and the like).
    """
    result = ReadResult()
    name = label or str(path)
    parse = _PARSERS[fmt](keep_stress)
    seen: set[tuple[str, str]] = set()
    seen_ids: set[str] = set()
    for lineno, text, fixes, utf8 in read_lines(path):
        result.rejects += [Reject(name, lineno, fix, "", "altered") for fix in fixes]
        if not utf8:
            _reject(result, policy, Reject(name, lineno, "invalid-utf8", text))
            continue
        if text == "":
            result.rejects.append(Reject(name, lineno, "blank-line", "", "ignored"))
            continue
        if fmt == "cmudict" and text.startswith(";;;"):
            result.rejects.append(Reject(name, lineno, "comment", text, "ignored"))
            continue
        fields = parse(text, lineno, name)
        if fields == "header":
            continue
        reason = fields if isinstance(fields, str) else _invalid(fields)
        if reason is None:
            assert isinstance(fields, _Fields)
            src = normalize(fields.source, norm, casefold)
            tgt = normalize(fields.target, norm, casefold_target and fmt != "cmudict")
            pair = Pair(fields.id or f"{Path(name).name}:{lineno}", src, tgt,
                        fields.group or src, lineno)
            reason = ("duplicate" if (src, tgt) in seen else
                      "duplicate-id" if pair.id in seen_ids else None)
        if reason is not None:
            _reject(result, policy, Reject(name, lineno, reason, text))
            continue
        seen.add((pair.source, pair.target))
        seen_ids.add(pair.id)
        result.pairs.append(pair)
        sides = (("source", fields.source), ("target", fields.target))
        result.rejects += [Reject(name, lineno, f"{norm}-changed-{side}", text, "altered")
                           for side, value in sides if normalization_changes(value, norm)]
        if len(result.pairs) == limit:
            break
    return result


def read_lines(path: Path) -> Iterator[tuple[int, str, list[str], bool]]:
    """Yield (line number, text, fixes applied, valid UTF-8) for each line: the one line
    reader of the data policy (the pair readers here, the lm task's documents).

    Undecodable bytes are shown with backslash escapes. A final newline does not start an extra
    line. A BOM (U+FEFF) at the start of any line is stripped (files are sometimes
    concatenated), and so is a CR before the LF.
    """
    lines = path.read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for lineno, raw in enumerate(lines, start=1):
        fixes = []
        if raw.endswith(b"\r"):
            raw = raw[:-1]
            fixes.append("crlf-stripped")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            yield lineno, raw.decode("utf-8", "backslashreplace"), fixes, False
            continue
        if text.startswith(_BOM):
            text = text[len(_BOM):]
            fixes.insert(0, "bom-stripped")
        yield lineno, text, fixes, True


def _invalid(fields: _Fields) -> str | None:
    """The first problem of a parsed row's fields, or None."""
    for side, value in (("source", fields.source), ("target", fields.target)):
        if value == "":
            return f"empty-{side}"
        problem = unencodable_reason(value)
        if problem:
            return f"{problem}-{side}"
        if not value.strip():
            return f"whitespace-only-{side}"
    return None


def _reject(result: ReadResult, policy: Policy, reject: Reject) -> None:
    if policy == "strict":
        raise BadRowError(reject)
    result.rejects.append(reject)


def _cmudict(keep_stress: bool) -> Callable[[str, int, str], _Fields | str]:
    def parse(text: str, lineno: int, name: str) -> _Fields | str:
        body = text.split("#", 1)[0].split()
        if len(body) < 2:
            return "wrong-field-count"
        match = _VARIANT.match(body[0])
        word = match.group("word") if match else body[0]
        phones = " ".join(body[1:])
        if not keep_stress:
            phones = _STRESS.sub("", phones)
        return _Fields(word, phones, body[0])

    return parse


def _tsv(_: bool) -> Callable[[str, int, str], _Fields | str]:
    columns: list[str] = []

    def parse(text: str, lineno: int, name: str) -> _Fields | str:
        cells = text.split("\t")
        if lineno == 1 and "source" in cells and "target" in cells:
            unknown = [c for c in cells if c not in FIELDS]
            if unknown or len(set(cells)) != len(cells):
                raise HeaderError(f"{name}:1: header {cells} must name each of {list(FIELDS)} "
                                  f"at most once (source and target required); bad: {unknown}")
            columns.extend(cells)
            return "header"
        names = columns or ["source", "target"]
        if len(cells) != len(names):
            return "wrong-field-count"
        row = dict(zip(names, cells))
        return _Fields(row["source"], row["target"], row.get("id"), row.get("group"))

    return parse


def _jsonl(_: bool) -> Callable[[str, int, str], _Fields | str]:
    def parse(text: str, lineno: int, name: str) -> _Fields | str:
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            return "invalid-json"
        if not isinstance(row, dict) or not {"source", "target"} <= set(row) <= set(FIELDS):
            return "wrong-field-count"
        if not all(isinstance(v, str) for v in row.values()):
            return "non-string-field"
        return _Fields(row["source"], row["target"], row.get("id"), row.get("group"))

    return parse


_PARSERS = {"cmudict": _cmudict, "tsv": _tsv, "jsonl": _jsonl}
