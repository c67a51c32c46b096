"""Audit checks that need neither DVC nor MLflow: the report, dvc.lock records, contracts,
values (DVC's own hashes are in pipeline/audit/lock.py).

Each check returns a list of human-readable differences; an empty list means it passed.
``pipeline/audit/core.py`` gathers the inputs (including ``dvc status`` and the MLflow run) and
prints an :class:`AuditReport`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
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
    #: the checks asked for (``--only``); empty: every check. The verdict names them, so a
    #: partial audit never reads as a whole one.
    only: tuple[str, ...] = ()
    #: the MLflow run the audit compared (None when no run was read)
    run_id: str | None = None
    #: what a check did, shown under its line whatever its status (e.g. the replay's seed)
    notes: dict[str, list[str]] = field(default_factory=dict)

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

    def wants(self, name: str) -> bool:
        """Whether check ``name`` is to run (every check unless ``only`` names some)."""
        return not self.only or name in self.only

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
            lines += ["         " + n for n in self.notes.get(name, [])]
            lines += ["         - " + d.replace("\n", "\n           ") for d in diffs]
        lines.append("audit: " + self.verdict())
        return "\n".join(lines)

    def verdict(self) -> str:
        """``PASSED``, or ``FAILED (checks)``, with its warnings and ``--only`` list."""
        warned = [n for n, s in self.status.items() if s == WARNING]
        return (("PASSED" if self.ok else f"FAILED ({', '.join(self.failed())})")
                + (f" with warnings ({', '.join(warned)})" if warned else "")
                + (f" [only: {', '.join(self.only)}]" if self.only else ""))


# --- dvc.lock -------------------------------------------------------------------------------

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


def json_diffs(what: str, sides: tuple[str, str], expected: Mapping[str, Any],
               got: Mapping[str, Any]) -> list[str]:
    """``text_diffs`` of the values' JSON texts: a training contract or decode settings
    against the copy a file records (a tuple and the list JSON made of it compare equal)."""
    return text_diffs(what, sides, {k: json.dumps(v) for k, v in expected.items()},
                      {k: json.dumps(v) for k, v in got.items()})


def nonblank_lines(path: Path) -> int:
    """Lines of a JSONL file that hold a record (blank lines are not records)."""
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


# --- environment ----------------------------------------------------------------------------

_LOCK_LINE = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)")


#: Packages whose version decides a result's bytes: a requirements lock that pins none of
#: them was emptied or cut off, and the package check must not pass on it.
RESULT_PACKAGES = ("numpy", "sentencepiece", "sacrebleu", "mlflow", "dvc")


def version_diffs(lock_text: str, installed: Callable[[str], str | None],
                  required: tuple[str, ...] = RESULT_PACKAGES) -> list[str]:
    """Every ``name==version`` of a requirements lock against ``installed(name)``.

    A local build tag is ignored (``torch 2.13.0+cpu`` satisfies ``torch==2.13.0``), as pip's
    own ``==`` does.
    """
    diffs = []
    pinned = set()
    for line in lock_text.splitlines():
        m = _LOCK_LINE.match(line.strip())
        if not m:
            continue
        name, want = m.groups()
        pinned.add(name.lower())
        have = installed(name)
        if have is None:
            diffs.append(f"{name}: requirements.lock has {want}, not installed")
        elif have != want and have.split("+", 1)[0] != want:
            diffs.append(f"{name}: requirements.lock has {want}, installed {have}")
    # an emptied or cut-off lock checks nothing, or only its first half: not a pass (issue 54)
    diffs += [f"{name}: requirements.lock pins no version of it (cut off or edited? restore "
              "it: git checkout requirements.lock)" for name in required if name not in pinned]
    return diffs
