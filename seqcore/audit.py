"""Audit checks that need neither DVC nor MLflow: hashes, contracts, metrics, re-decoding.

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
from typing import Any


@dataclass
class AuditReport:
    """Differences per check, in the order the checks ran (empty list = passed)."""

    checks: dict[str, list[str]] = field(default_factory=dict)

    def add(self, name: str, diffs: list[str]) -> None:
        self.checks.setdefault(name, []).extend(diffs)

    @property
    def ok(self) -> bool:
        return not any(self.checks.values())

    def failed(self) -> list[str]:
        return [name for name, diffs in self.checks.items() if diffs]

    def render(self) -> str:
        lines = []
        for name, diffs in self.checks.items():
            lines.append(f"{'MISMATCH' if diffs else 'ok':8s} {name}")
            lines += [f"         - {d}" for d in diffs]
        lines.append("audit: " + ("PASSED" if self.ok else f"FAILED ({', '.join(self.failed())})"))
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
    """Every dependency and output md5 in a parsed dvc.lock against the files under ``root``."""
    seen: dict[str, str] = {}
    for stage, entry in lock.get("stages", {}).items():
        for kind in ("deps", "outs"):
            for item in entry.get(kind, []):
                if "md5" in item:
                    seen.setdefault(item["path"], f"{stage}.{kind}:{item['md5']}")
    diffs, ignore = [], dvcignore_patterns(root)
    for rel, where in sorted(seen.items()):
        recorded = where.rsplit(":", 1)[1]
        path = root / rel
        if not path.exists():
            diffs.append(f"{rel}: missing (dvc.lock {where.split(':')[0]} records {recorded})")
            continue
        got = dvc_md5(path, ignore)
        if got != recorded:
            diffs.append(f"{rel}: md5 {got} on disk != {recorded} in dvc.lock")
    return diffs


def lock_param_diffs(lock: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """Every parameter value recorded in dvc.lock against the current params.yaml mapping."""
    diffs = []
    for stage, entry in lock.get("stages", {}).items():
        for key, recorded in entry.get("params", {}).get("params.yaml", {}).items():
            got = lookup(params, key)
            if got != recorded:
                diffs.append(f"{stage}: {key} = {got!r} in params.yaml != {recorded!r} "
                             "in dvc.lock (changed without `dvc repro`)")
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


def tokenizer_file_diffs(tokenizer_dir: Path, contract: dict[str, Any],
                         sha256: Callable[[Path], str]) -> list[str]:
    """The tokenizer model files hash to what the tokenizer contract records."""
    diffs = []
    for side in ("src", "tgt"):
        path = tokenizer_dir / contract[side]["file"]
        got = sha256(path) if path.exists() else "missing"
        if got != contract[side]["sha256"]:
            diffs.append(f"tokenizer {side}: {path} sha256 {got[:12]} != contract "
                         f"{contract[side]['sha256'][:12]}")
    return diffs


# --- metrics --------------------------------------------------------------------------------

def number_diffs(what: str, expected: dict[str, Any], got: dict[str, Any],
                 rel_tol: float = 1e-9) -> list[str]:
    """Keys of ``expected`` whose numbers differ in ``got`` (NaN equals NaN; missing differs)."""
    diffs = []
    for key, want in sorted(expected.items()):
        have = got.get(key)
        if have is None:
            diffs.append(f"{what}: {key} missing (expected {want!r})")
        elif not _close(float(want), float(have), rel_tol):
            diffs.append(f"{what}: {key} = {have!r} != {want!r}")
    return diffs


def _close(a: float, b: float, rel_tol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-12)


def text_diffs(what: str, expected: dict[str, str], got: dict[str, str]) -> list[str]:
    """Keys of ``expected`` whose strings differ in ``got``."""
    return [f"{what}: {k} = {got.get(k)!r} != {v!r}" for k, v in sorted(expected.items())
            if got.get(k) != v]


def line_diffs(what: str, expected: list[str], got: list[str]) -> list[str]:
    """Line-by-line byte comparison of two lists of lines (first three differences shown)."""
    diffs = [f"{what}: line {i + 1} differs:\n             file:    {a[:200]}\n"
             f"             redone:  {b[:200]}"
             for i, (a, b) in enumerate(zip(expected, got)) if a != b]
    if len(expected) < len(got):
        diffs.append(f"{what}: file has {len(expected)} lines, re-decoding gave {len(got)}")
    return diffs[:3] + ([f"{what}: ... {len(diffs) - 3} more"] if len(diffs) > 3 else [])


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
            diffs.append(f"{name}: not installed (lock: {want})")
        elif have != want and have.split("+", 1)[0] != want:
            diffs.append(f"{name}: installed {have} != lock {want}")
    return diffs


# --- re-decoding ----------------------------------------------------------------------------

def redecode_lines(model: Any, examples: list[Any], decoder: Any, ids: Any, tgt_tok: Any,
                   batch_size: int, sample: int) -> list[str]:
    """Decode the first ``sample`` examples again and return predictions.jsonl lines.

    The sample is rounded up to whole decode batches so every batch is padded exactly as in
    the decode stage (padding width can change float sums, hence scores). The caller sets
    the same determinism (seed, threads) as the decode stage and passes a model in eval mode.
    """
    import tempfile  # noqa: PLC0415

    import torch  # noqa: PLC0415

    from seqcore.decoding.predictions import decode_examples, write_predictions  # noqa: PLC0415

    take = min(len(examples), -(-sample // batch_size) * batch_size)
    with torch.inference_mode():
        rows = decode_examples(model, examples[:take], decoder, ids, tgt_tok, batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "redecoded.jsonl"
        write_predictions(rows, out)
        return out.read_text(encoding="utf-8").splitlines()
