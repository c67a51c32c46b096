"""The audit of what a run says about its inputs and outputs: its dataset inputs against the
prepared splits (seqcore/artifacts/lineage.py), and its logged and registered model against the
result's files and decode settings (pipeline/registry.py)."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from pipeline.registry import ARTIFACT, MODEL_NAME, decode_json
from seqcore.artifacts.run_record import RunRecord
from seqcore.compare import first_difference

#: The two sides of every comparison of a run: the logged run, and the record built now.
RUN, PIPELINE = "mlflow run", "pipeline record"


def dataset_diffs(run: Any, record: RunRecord) -> list[str]:
    """The run's dataset inputs against the record's (seqcore/artifacts/lineage.py): the same names,
    each with the digest (DVC's md5 of the prepared split), source, profile and context."""
    got = {}
    for entry in run.inputs.dataset_inputs if run.inputs else []:
        d = entry.dataset
        context = next((t.value for t in entry.tags if t.key == "mlflow.data.context"), None)
        got[d.name] = {"name": d.name, "digest": d.digest, "source_type": d.source_type,
                       "source": d.source, "profile": d.profile, "context": context}
    want = {d["name"]: d for d in record.datasets or []}
    diffs = [f"dataset {n}: {RUN} has it, the pipeline logs no such dataset"
             for n in sorted(set(got) - set(want))]
    diffs += [f"dataset {n}: {PIPELINE} has it (digest {want[n]['digest']}), {RUN} has nothing"
              for n in sorted(set(want) - set(got))]
    for name in sorted(set(want) & set(got)):
        diffs += [f"dataset {name}: {k}: {RUN} has {got[name][k]!r}, {PIPELINE} has {v!r}"
                  for k, v in want[name].items() if got[name].get(k) != v]
    return diffs


def model_diffs(client: Any, run: Any, record: RunRecord) -> list[str]:
    """The run's logged model (pipeline/registry.py) against the record: one model, whose
    packed files have the sha256 of the result's files (the model file, its sidecar, the
    tokenizer) and whose decode.json holds the decode settings; and, when the record names a
    registered model, one version of it from this run with the record's version tags."""
    import mlflow  # noqa: PLC0415 (slow import)

    rid = run.info.run_id
    found = list(client.search_logged_models([run.info.experiment_id],
                                             filter_string=f"source_run_id = '{rid}'"))
    want = record.model
    if want is None:
        return [f"logged model {m.name}: {RUN} has it, the pipeline logs none" for m in found]
    if len(found) != 1:
        return [f"logged model: {RUN} has {len(found)}, the pipeline logs one ({MODEL_NAME})"]
    diffs = []
    with tempfile.TemporaryDirectory(prefix="audit-model-") as tmp:
        folder = Path(mlflow.artifacts.download_artifacts(
            artifact_uri=f"{found[0].artifact_location.rstrip('/')}/artifacts/{ARTIFACT}",
            dst_path=tmp, tracking_uri=client.tracking_uri))
        got = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    expected = want["sha256"]
    for name in sorted(set(got) | set(expected) | {"decode.json"}):
        if name == "decode.json":
            diffs += first_difference(f"logged model file {name}", (RUN, PIPELINE),
                                      got.get(name, b""), decode_json(want).encode())
        elif name not in got or name not in expected:
            diffs.append(f"logged model file {name}: only in "
                         f"{RUN if name in got else 'the result'}")
        elif hashlib.sha256(got[name]).hexdigest() != expected[name]:
            diffs.append(f"logged model file {name}: {RUN} has sha256 "
                         f"{hashlib.sha256(got[name]).hexdigest()[:12]}, the result's "
                         f"{want['files'][name]} has {expected[name][:12]}")
    if want["name"]:
        versions = list(client.search_model_versions(
            f"name = '{want['name']}' and run_id = '{rid}'"))
        if len(versions) != 1:
            diffs.append(f"registered model {want['name']}: {len(versions)} versions from "
                         f"{RUN}, the pipeline registers one")
        else:
            # the run's own tags (compared with the record by tag_diffs): git.commit is the
            # commit the run was made at, not the audit's
            tags = run.data.tags
            diffs += [f"registered model {want['name']} version {versions[0].version} tag {k}: "
                      f"has {versions[0].tags.get(k)!r}, {RUN} has {tags.get(k)!r}"
                      for k in sorted(want["tags"]) if versions[0].tags.get(k) != tags.get(k)]
            # the system it names is the one the packed files make (issue 51)
            if versions[0].tags.get("system") != want.get("system"):
                diffs.append(f"registered model {want['name']} version {versions[0].version} "
                             f"tag system: has {versions[0].tags.get('system')!r}, the result "
                             f"serves {want.get('system')!r}")
    return diffs
