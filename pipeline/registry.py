"""The result's model in MLflow (issue 29): what the run record keeps about it, logging it as
a pyfunc from code with the run, and registering a version in the Model Registry.

The logged model packs the DVC-tracked files themselves (the model file and its sha256
sidecar, the tokenizer contract and models) and the decode settings; the record keeps each
file's sha256, the audit compares the logged files with them, and a replay refuses a file
that changed since the run was recorded.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import itertools
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import seqcore
from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.run_record import RunRecord
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, as_dict, registered_model_name
from seqcore.hashing import sha256_file

#: The pyfunc's code (MLflow copies it into the model and runs it at load) and the library
#: it imports (packed beside it, so the model loads where seqcore is not installed).
MODEL_CODE = Path(__file__).with_name("mlflow_model.py")
LIBRARY = Path(seqcore.__file__).parent
#: The model's name within its run (the UI's Logged models list).
MODEL_NAME = "model"
#: The logged model's one artifact: a folder of the model file and its sidecar, the tokenizer
#: contract and models, and ``decode.json`` (the decode settings).
ARTIFACT = "result"
#: Run tags that tie a registered version to its result (also written on the version).
VERSION_TAGS = ("metrics.signature", "data.sha256", "model.sha256", "git.commit")
#: Distributions the model needs, pinned to the versions that logged it.
REQUIREMENTS = ("mlflow", "torch", "sentencepiece", "numpy", "pandas", "pyyaml")


def decode_json(decode: dict[str, Any]) -> str:
    """``decode.json`` of the logged model: the decode section it answers with."""
    return json.dumps({"decode": decode}, indent=1, sort_keys=True) + "\n"


def model_entry(cfg: Config, header: PredictionsHeader, pred_path: Path, tc: TokenizerContract,
                tags: dict[str, str]) -> dict[str, Any] | None:
    """What the run record keeps about the result's MLflow model; None when nothing was
    decoded (task lm: no decoder to serve)."""
    if header.signature is None:
        return None
    tok = Path(cfg.paths.tokenizer)
    files = {"model.pt": cfg.paths.model, "model.pt.sha256": f"{cfg.paths.model}.sha256",
             "contract.json": str(cfg.paths.tokenizer_contract),
             "src.model": str(tok / tc.side("src").file),
             "tgt.model": str(tok / tc.side("tgt").file)}
    return {"name": registered_model_name(cfg), "files": files,
            "sha256": {name: sha256_file(path) for name, path in files.items()},
            "decode": as_dict(cfg.decode),
            # the logged model's input example (MLflow checks the model on it)
            "example": first_sources(pred_path, 2),
            "tags": {k: tags[k] for k in VERSION_TAGS if k in tags}}


def first_sources(pred_path: Path, count: int) -> list[str]:
    """The sources of the first ``count`` prediction rows (not the whole file: evaluate has
    scored it already)."""
    with open(pred_path, encoding="utf-8") as f:
        return [json.loads(line)["source"] for line in itertools.islice(f, count)]


def packed_folder(model: dict[str, Any], root: Path) -> Path:
    """The logged model's artifact folder, under ``root``: each file as recorded.

    Raises:
        ValueError: a file changed since the run was recorded (one line naming it).
    """
    folder = root / ARTIFACT
    folder.mkdir()
    for name, path in model["files"].items():
        data = Path(path).read_bytes()
        if hashlib.sha256(data).hexdigest() != model["sha256"][name]:
            raise ValueError(f"{path} changed since the run was recorded (sha256 "
                             f"{model['sha256'][name][:12]}): its model is not logged")
        (folder / name).write_bytes(data)
    (folder / "decode.json").write_text(decode_json(model["decode"]), encoding="utf-8")
    return folder


def requirements() -> list[str]:
    return [f"{name}=={importlib.metadata.version(name)}" for name in REQUIREMENTS]


def log_model(client: Any, record: RunRecord, run_id: str, experiment_id: str) -> str | None:
    """Log the record's model with run ``run_id`` and register a version of it; returns the
    version (None when ``mlflow.registered_model`` is none). Only through ``client``: the
    fluent API would set the process's tracking URI (and MLFLOW_TRACKING_URI) for good."""
    with warnings.catch_warnings():
        # MLflow's advice when its pyfunc modules load and a model is saved (type hints, an
        # input example) does not apply: the schema is the signature, and a result with no
        # predictions has no example
        warnings.simplefilter("ignore", UserWarning)
        return _log_model(client, record, run_id, experiment_id)


def _log_model(client: Any, record: RunRecord, run_id: str, experiment_id: str) -> str | None:
    import mlflow  # noqa: PLC0415 (slow import, only when logging)
    import pandas as pd  # noqa: PLC0415
    from mlflow.entities import LoggedModelOutput  # noqa: PLC0415
    from mlflow.models import ModelSignature  # noqa: PLC0415
    from mlflow.types import ColSpec, Schema  # noqa: PLC0415

    model = record.model
    assert model is not None
    signature = ModelSignature(
        inputs=Schema([ColSpec("string", "source")]),
        outputs=Schema([ColSpec("string", "source"), ColSpec("string", "prediction", False),
                        ColSpec("double", "score", False), ColSpec("string", "problem")]))
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "model"
        mlflow.pyfunc.save_model(
            local, python_model=str(MODEL_CODE),
            artifacts={ARTIFACT: str(packed_folder(model, Path(tmp)))},
            code_paths=[str(LIBRARY)], signature=signature, pip_requirements=requirements(),
            input_example=pd.DataFrame({"source": model["example"]}) if model["example"]
            else None)
        logged = client.create_logged_model(experiment_id, MODEL_NAME, source_run_id=run_id)
        client.log_model_artifacts(logged.model_id, str(local))
        client.finalize_logged_model(logged.model_id, "READY")
    # the run page's "Logged models" (the fluent log_model records the same output)
    client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, 0)])
    if not model["name"]:
        return None
    if not client.search_registered_models(f"name = '{model['name']}'"):
        client.create_registered_model(model["name"])
    # The source is the logged model's artifact location, not ``models:/<id>``: MLflow's SQL
    # registry resolves that URI with a client on the process's *global* tracking URI, which
    # MLflow 3 defaults to a relative sqlite:///mlflow.db, inside `dvc exp run --temp` a new
    # database in the temporary copy, where the model is not found and the run was left
    # RUNNING without its version (issue 55). Either way the version stores this location.
    version = client.create_model_version(model["name"], logged.artifact_location,
                                          run_id=run_id, tags=model["tags"],
                                          model_id=logged.model_id)
    print(f"[mlflow] model registered as {model['name']} version {version.version}",
          file=sys.stderr)
    return str(version.version)
