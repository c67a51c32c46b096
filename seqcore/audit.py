"""Audit checks that need neither DVC nor MLflow: the report, lock hashes, contracts, values.

Each check returns a list of human-readable differences; an empty list means it passed.
``pipeline/audit.py`` gathers the inputs (including ``dvc status`` and the MLflow run) and
prints an :class:`AuditReport`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the contract class imports torch; the audit checks need none
    from seqcore.artifacts.tokenizer_contract import TokenizerContract


OK, MISMATCH, NOT_RUN, WARNING = "ok", "MISMATCH", "NOT RUN", "WARNING"


@dataclass
class AuditReport:
    """Per check, in the order the checks ran: its status and its lines.

    MISMATCH and NOT RUN (a check that could not run) fail the audit; WARNING does not.
    """

    checks: dict[str, list[str]] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, diffs: list[str]) -> None:
        """A check that ran: ok when ``diffs`` is empty, else MISMATCH."""
        self.checks.setdefault(name, []).extend(diffs)
        if self.status.get(name) != NOT_RUN:
            self.status[name] = MISMATCH if self.checks[name] else OK

    def not_run(self, name: str, reason: str) -> None:
        """A check that could not run (a missing or unreadable input): the audit fails."""
        self.checks.setdefault(name, []).append(reason)
        self.status[name] = NOT_RUN

    def warn(self, name: str, lines: list[str], strict: bool = False) -> None:
        """Differences that fail the audit only when ``strict``."""
        self.add(name, lines)
        if lines and not strict:
            self.status[name] = WARNING

    @property
    def ok(self) -> bool:
        return not self.failed()

    def failed(self) -> list[str]:
        return [n for n, s in self.status.items() if s in (MISMATCH, NOT_RUN)]

    def render(self) -> str:
        lines = []
        for name, diffs in self.checks.items():
            took = f" ({self.seconds[name]:.1f} s)" if name in self.seconds else ""
            lines.append(f"{self.status[name]:8s} {name}{took}")
            lines += ["         - " + d.replace("\n", "\n           ") for d in diffs]
        warned = [n for n, s in self.status.items() if s == WARNING]
        lines.append("audit: " + ("PASSED" if self.ok else f"FAILED ({', '.join(self.failed())})")
                     + (f" with warnings ({', '.join(warned)})" if warned else ""))
        return "\n".join(lines)


# --- DVC hashes -----------------------------------------------------------------------------

def md5_file(path: Path) -> str:
    """md5 of a file's bytes (DVC 3 ``hash: md5``)."""
    h = hashlib.md5()  # noqa: S324 (DVC's content address, not a security hash)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dvcignore_patterns(root: Path) -> tuple[list[str], list[str]]:
    """Directory-name and file-name patterns of ``root/.dvcignore``.

    Only the simple forms are understood: ``name/`` (a directory of that name anywhere) and a
    glob without a slash (``*.pyc``), which is what this project's .dvcignore uses.
    """
    path = root / ".dvcignore"
    lines = path.read_text().splitlines() if path.exists() else []
    rules = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    return [r.rstrip("/") for r in rules if r.endswith("/")], [r for r in rules
                                                               if not r.endswith("/")]


def dvc_md5(path: Path, ignore: tuple[list[str], list[str]] = ([], [])) -> str:
    """The md5 DVC records for a file, or for a directory its ``<md5>.dir`` tree hash.

    The tree hash is the md5 of the JSON list ``[{"md5": ..., "relpath": ...}]`` sorted by
    relpath (dvc_data ``Tree.as_bytes``), leaving out what ``.dvcignore`` ignores
    (``ignore`` = dvcignore_patterns); tests compare it with a real ``dvc.lock``.
    """
    if path.is_file():
        return md5_file(path)
    dirs, globs = ignore
    entries = []
    for dirpath, subdirs, files in os.walk(path):
        subdirs[:] = [d for d in subdirs if not any(fnmatch.fnmatch(d, p) for p in dirs)]
        for name in files:
            if any(fnmatch.fnmatch(name, p) for p in globs):
                continue
            full = Path(dirpath) / name
            entries.append({"md5": md5_file(full), "relpath": full.relative_to(path).as_posix()})
    entries.sort(key=lambda e: e["relpath"])
    listing = json.dumps(entries, sort_keys=True).encode("utf-8")
    return hashlib.md5(listing).hexdigest() + ".dir"  # noqa: S324


def lock_hash_diffs(root: Path, lock: dict[str, Any]) -> list[str]:
    """Every dependency and output md5 in a parsed dvc.lock against the files under ``root``.

    A path appears in several records (an out of one stage, a dep of the next): each record
    is compared, so a stale record in any stage is found.
    """
    records: dict[str, list[tuple[str, str]]] = {}
    for stage, entry in lock.get("stages", {}).items():
        for kind in ("deps", "outs"):
            for item in entry.get(kind, []):
                if "md5" in item:
                    records.setdefault(item["path"], []).append((f"{stage}.{kind}", item["md5"]))
    diffs, ignore = [], dvcignore_patterns(root)
    for rel, recs in sorted(records.items()):
        path = root / rel
        got = dvc_md5(path, ignore) if path.exists() else "missing"
        diffs += [f"{rel}: workspace has md5 {got}, dvc.lock {where} records {recorded}"
                  for where, recorded in recs if got != recorded]
    return diffs


def stage_out_diffs(order: list[str], recorded: dict[str, Any],
                    rebuilt: dict[str, Any]) -> list[str]:
    """Every out md5 of ``recorded`` (a dvc.lock) against ``rebuilt``; the first line names
    the first stage in ``order`` whose outs diverge."""
    diffs: list[str] = []
    first = None
    for stage in order:
        want = recorded.get("stages", {}).get(stage, {})
        have = {o["path"]: o.get("md5") for o in
                rebuilt.get("stages", {}).get(stage, {}).get("outs", [])}
        for out in want.get("outs", []):
            got = have.get(out["path"], "missing")
            if got != out.get("md5"):
                first = first or stage
                diffs.append(f"{stage}: {out['path']}: rebuilt md5 {got}, dvc.lock records "
                             f"{out.get('md5')}")
    return ([f"first divergent stage: {first}"] if first else []) + diffs


def lock_param_diffs(lock: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """Every parameter value recorded in dvc.lock against the current params.yaml mapping."""
    diffs = []
    for stage, entry in lock.get("stages", {}).items():
        for key, recorded in entry.get("params", {}).get("params.yaml", {}).items():
            got = lookup(params, key)
            if got != recorded:
                diffs.append(f"{stage}: {key}: params.yaml has {got!r}, dvc.lock records "
                             f"{recorded!r} (changed without `dvc repro`)")
    return diffs


def lookup(tree: dict[str, Any], dotted: str) -> Any:
    """``tree["a"]["b"]`` for ``"a.b"``; None when a key is missing."""
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def upstream_lock_digest(lock: dict[str, Any], last_stage: str = "evaluate") -> str:
    """sha256 of dvc.lock's stages before ``last_stage``: what the evaluate stage saw.

    DVC rewrites dvc.lock after each stage, so while evaluate runs the file holds the final
    entries of every upstream stage but not yet evaluate's own.
    """
    stages = {k: v for k, v in lock.get("stages", {}).items() if k != last_stage}
    return hashlib.sha256(json.dumps(stages, sort_keys=True).encode()).hexdigest()


# --- contract -------------------------------------------------------------------------------

def same_value_diffs(what: str, values: dict[str, Any]) -> list[str]:
    """All places must hold the same value; ``values`` maps place -> value (first = reference)."""
    if not values:
        return []
    ref_place, ref = next(iter(values.items()))
    return [f"{what}: {place} has {value!r} but {ref_place} has {ref!r}"
            for place, value in values.items() if value != ref]


def tokenizer_file_diffs(tokenizer_dir: Path, contract: TokenizerContract,
                         sha256: Callable[[Path], str]) -> list[str]:
    """The tokenizer model files hash to what the tokenizer contract records."""
    diffs = []
    for side in ("src", "tgt"):
        entry = contract.side(side)
        path = tokenizer_dir / entry.file
        got = sha256(path) if path.exists() else "missing"
        if got != entry.sha256:
            diffs.append(f"tokenizer {side}: file {path} has sha256 {got}, tokenizer contract "
                         f"records {entry.sha256}")
    return diffs


# --- metrics --------------------------------------------------------------------------------

def number_diffs(what: str, sides: tuple[str, str], expected: dict[str, Any],
                 got: dict[str, Any], rel_tol: float = 1e-9) -> list[str]:
    """Keys of ``expected`` (side 0) whose numbers differ in ``got`` (side 1); NaN equals NaN,
    a missing key differs."""
    diffs = []
    for key, want in sorted(expected.items()):
        have = got.get(key)
        if have is None or not _close(float(want), float(have), rel_tol):
            diffs.append(f"{what}: {key}: {sides[0]} has {want!r}, {sides[1]} has "
                         f"{'nothing' if have is None else repr(have)}")
    return diffs


def _close(a: float, b: float, rel_tol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-12)


def text_diffs(what: str, sides: tuple[str, str], expected: dict[str, str],
               got: dict[str, str]) -> list[str]:
    """Keys of ``expected`` (side 0) whose strings differ in ``got`` (side 1)."""
    return [f"{what}: {k}: {sides[0]} has {v!r}, {sides[1]} has "
            f"{'nothing' if k not in got else repr(got[k])}"
            for k, v in sorted(expected.items()) if got.get(k) != v]


# --- environment ----------------------------------------------------------------------------

_LOCK_LINE = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)")


def version_diffs(lock_text: str, installed: Callable[[str], str | None]) -> list[str]:
    """Every ``name==version`` of a requirements lock against ``installed(name)``.

    A local build tag is ignored (``torch 2.13.0+cpu`` satisfies ``torch==2.13.0``), as pip's
    own ``==`` does.
    """
    diffs = []
    for line in lock_text.splitlines():
        m = _LOCK_LINE.match(line.strip())
        if not m:
            continue
        name, want = m.groups()
        have = installed(name)
        if have is None:
            diffs.append(f"{name}: requirements.lock has {want}, not installed")
        elif have != want and have.split("+", 1)[0] != want:
            diffs.append(f"{name}: requirements.lock has {want}, installed {have}")
    return diffs
