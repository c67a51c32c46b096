"""Stage prepare: parse raw rows into pairs, apply the bad-row policy, split by group hash."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.stage import load, signature, write_json
from seqcore.data.readers import read_pairs
from seqcore.data.records import BadRowError, write_pairs, write_rejects
from seqcore.data.splits import SPLITS, split_of
from seqcore.hashing import sha256_file


def main() -> None:
    cfg = load(__doc__)
    d = cfg.data
    raw = Path(cfg.paths.raw)
    fmt = "cmudict" if d.source == "cmudict" else d.source
    try:
        result = read_pairs(raw, fmt, d.bad_rows, d.normalization, d.casefold, d.keep_stress)
    except BadRowError as err:
        sys.exit(f"[prepare] bad row (data.bad_rows: strict): {err}")
    pairs = result.pairs[: d.max_pairs] if d.max_pairs else result.pairs
    out = Path(cfg.paths.prepared)
    out.mkdir(parents=True, exist_ok=True)
    counts, hashes = {}, {}
    for split in SPLITS:
        rows = [p for p in pairs
                if split_of(p.group, d.split_seed, d.dev_fraction, d.test_fraction) == split]
        path = out / f"{split}.jsonl"
        write_pairs(rows, path)
        counts[split], hashes[split] = len(rows), sha256_file(path)
    write_rejects(Path(cfg.paths.rejects), result.rejects)
    manifest = {"raw": {"path": str(raw), "sha256": sha256_file(raw)},
                "read": len(result.pairs), "kept": len(pairs),
                "cut_by_max_pairs": len(result.pairs) - len(pairs),
                "rows": counts, "sha256": hashes, "rejects": result.counts()}
    write_json(out / "manifest.json", manifest)
    print(f"[prepare] {counts} rejects={result.counts()}", file=sys.stderr)
    signature(cfg, "prepare", upstream=False)


if __name__ == "__main__":
    main()
