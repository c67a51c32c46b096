"""Stage prepare: parse raw rows into pairs, apply the bad-row policy, split by group hash."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.stage import stage_main
from seqcore.artifacts.manifests import PreparedManifest, RawSource, manifest_path
from seqcore.config import Config, as_dict
from seqcore.data.prepare import copy_share, dominant_target, prepare_pairs
from seqcore.data.records import BadRowError, write_pairs, write_rejects
from seqcore.data.splits import SPLITS
from seqcore.hashing import sha256_file
from seqcore.signature import data_signature, guard_fields
from seqcore.tasks import get_task


def run(cfg: Config) -> None:
    """Prepared splits, their manifest and the rejects file from the raw file."""
    d = cfg.data
    raw = Path(cfg.paths.raw)
    # Rejects name the user's own file (a byte copy of it, so the line numbers agree).
    label = d.path or str(raw)
    try:
        prepared = prepare_pairs(raw, d, label)
    except BadRowError as err:
        sys.exit(f"[prepare] bad row (data.bad_rows: strict): {err}\n"
                 "fix the row, or set data.bad_rows: skip to drop and list such rows")
    except ValueError as err:  # HeaderError, or a data.source that is not a parallel file
        sys.exit(f"[prepare] {err}")
    # First, so that every stop below leaves the reasons on disk.
    write_rejects(Path(cfg.paths.rejects), prepared.rejects)
    summary = prepared.summary()
    dropped = summary.rejects["dropped"]
    lost, seen = sum(dropped.values()), prepared.read + sum(dropped.values())
    if seen and lost / seen > d.max_reject_rate:
        sys.exit(f"[prepare] {lost} of the {seen} rows read from {label} were dropped "
                 f"({lost / seen:.1%}: {_reasons(dropped)}), more than data.max_reject_rate "
                 f"{d.max_reject_rate}: a run would learn from what is left without a word; "
                 f"every row is listed in {cfg.paths.rejects}. Fix the file (e.g. save it as "
                 "UTF-8 with one TAB per row), or raise data.max_reject_rate")
    # The splits the task scores (seqcore.tasks): too few rows there and the run either dies
    # late or reports noise (issue 13).
    fractions = get_task(cfg.task).scored_splits(d)
    small = [f"{s} has {len(prepared.splits[s])} rows (data.{s}_fraction {f})"
             for s, f in fractions.items() if len(prepared.splits[s]) < d.min_split_rows]
    if small:
        lost_note = (f" ({lost} rows dropped: {_reasons(dropped)}; see {cfg.paths.rejects})"
                     if lost else "")
        sys.exit(f"[prepare] {' and '.join(small)} of {sum(map(len, prepared.splits.values()))} "
                 f"kept rows{lost_note}, fewer than data.min_split_rows {d.min_split_rows}; "
                 f"raise data.dev_fraction / data.test_fraction or add rows (to {raw})")
    train = prepared.splits["train"]
    target, share = dominant_target(train)
    if share > d.max_target_share:
        sys.exit(f"[prepare] one target, {target!r}, is {share:.1%} of the {len(train)} train "
                 f"rows, more than data.max_target_share {d.max_target_share}: a model that "
                 f"always writes it would look trained; check the targets of {label}, or "
                 "raise data.max_target_share")
    copies = copy_share(train)
    if copies > d.max_copy_share:
        sys.exit(f"[prepare] {copies:.1%} of the {len(train)} train rows have a target equal "
                 f"to their source (spaces and case aside), more than data.max_copy_share "
                 f"{d.max_copy_share}: a model that copies its input would look trained; check "
                 f"the columns of {label}, or raise data.max_copy_share")
    out = Path(cfg.paths.prepared)
    out.mkdir(parents=True, exist_ok=True)
    hashes = {}
    for split in SPLITS:
        path = out / f"{split}.jsonl"
        write_pairs(prepared.splits[split], path)
        hashes[split] = sha256_file(path)
    # a guard (data.sha256, fetch's pin, among them) changes no output, so the manifest does
    # not hold it
    settings = as_dict(d, guard_fields("data"))
    raw_sha = sha256_file(raw)
    PreparedManifest(RawSource(str(raw), raw_sha, d.source, label), settings, hashes,
                     cfg.paths.rejects, summary).save(manifest_path(out))
    print(f"[prepare] {summary.rows} rejects={summary.rejects}", file=sys.stderr)
    subset = get_task(cfg.task).data_subset()
    print(f"[prepare] data: {data_signature(cfg, raw_sha, subset)}", file=sys.stderr)


def _reasons(counts: dict[str, int]) -> str:
    """``invalid-utf8 100, duplicate 3``: the reasons, most frequent first."""
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(),
                                                            key=lambda kv: (-kv[1], kv[0])))


if __name__ == "__main__":
    stage_main("prepare", __doc__, run)
