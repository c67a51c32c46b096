"""Dataset lineage in MLflow (issue 29, item 3): each run's Datasets are the prepared splits,
each with the md5 DVC records for it, so a run found in the UI names its data by DVC hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.pipeline_helpers import result_runs

pytestmark = pytest.mark.e2e


def dvc_file_md5s(repo: Path, out: str) -> dict[str, str]:
    """relpath -> md5 of each file of the folder ``out``, from its `.dir` listing in DVC's cache."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    md5 = next(o["md5"] for s in lock["stages"].values() for o in s.get("outs", [])
               if o["path"] == out)
    listing = repo / ".dvc/cache/files/md5" / md5[:2] / md5[2:]
    return {f["relpath"]: f["md5"] for f in json.loads(listing.read_text())}


def test_each_run_lists_the_prepared_splits_with_their_dvc_md5(
        audit_result: tuple[Path, str]) -> None:
    repo = audit_result[0]
    run = result_runs(repo)[1][0]
    got = {i.dataset.name: (i.dataset.digest, {t.key: t.value for t in i.tags},
                            json.loads(i.dataset.source), json.loads(i.dataset.profile))
           for i in run.inputs.dataset_inputs}
    md5 = dvc_file_md5s(repo, "data/prepared")
    manifest = json.loads((repo / "data/prepared/manifest.json").read_text())
    assert sorted(got) == ["cmudict-dev", "cmudict-test", "cmudict-train"]
    for split, context in (("train", "training"), ("dev", "validation"), ("test", "testing")):
        digest, tags, source, profile = got[f"cmudict-{split}"]
        assert digest == md5[f"{split}.jsonl"]
        assert tags == {"mlflow.data.context": context}
        assert source == {"path": f"data/prepared/{split}.jsonl", "raw": "data/raw/cmudict.dict",
                          "raw_sha256": manifest["raw"]["sha256"], "data.source": "cmudict"}
        assert profile == {"rows": manifest["rows"][split], "groups": manifest["groups"][split]}
