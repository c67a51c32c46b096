"""The datasets of a run (issue 29): the prepared train, dev and test splits as MLflow dataset
inputs, so the run table's Datasets column names them, each with its DVC digest.

The digest is the md5 DVC records for the file (``dvc.lock`` lists ``data/prepared`` as a
folder whose listing holds each file's md5), the source names the file and the raw snapshot
it was prepared from (with the raw file's sha256, as pinned by ``data.sha256``), and the
profile counts rows and groups (from the prepared manifest). The audit compares what the run
holds with these.
"""

from __future__ import annotations

import json
from pathlib import Path

from seqcore.artifacts.manifests import PreparedManifest, manifest_path
from seqcore.config import Config
from seqcore.hashing import file_hash

#: Prepared split -> MLflow's ``mlflow.data.context`` tag (the words the MLflow UI shows).
CONTEXTS = {"train": "training", "dev": "validation", "test": "testing"}
SOURCE_TYPE = "dvc"


def dataset_inputs(cfg: Config) -> list[dict[str, str]]:
    """One entry per prepared split the manifest counts: name, digest, source_type, source,
    profile (JSON texts) and context; empty without a prepared manifest. A split it counts
    whose file is gone is FileNotFoundError, not a dataset silently left out (issue 54)."""
    folder = Path(cfg.paths.prepared)
    if not manifest_path(folder).exists():
        return []
    manifest = PreparedManifest.load(manifest_path(folder))
    stem = Path(manifest.raw.label).stem
    out = []
    for split, context in CONTEXTS.items():
        path = folder / f"{split}.jsonl"
        if split not in manifest.counts.rows:
            continue
        source = {"path": path.as_posix(), "raw": manifest.raw.path,
                  "raw_sha256": manifest.raw.sha256, "data.source": manifest.raw.source}
        profile = {"rows": manifest.counts.rows.get(split),
                   "groups": manifest.counts.groups.get(split)}
        out.append({"name": f"{stem}-{split}", "digest": file_hash(path, "md5"),
                    "source_type": SOURCE_TYPE, "source": json.dumps(source, sort_keys=True),
                    "profile": json.dumps(profile, sort_keys=True), "context": context})
    return out
