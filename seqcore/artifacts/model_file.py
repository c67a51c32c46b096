"""``models/model.pt``: the final weights plus what is needed to rebuild and audit them.

A ``torch.save`` of plain containers and tensors (loaded ``weights_only=True``, its sha256
checked against the ``.sha256`` sidecar), written atomically by the checkpoint module's blob
writer. An encoder-decoder file carries its model config and sizes; a ``task: lm`` file its
RNN LM shape and character vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from seqcore.artifacts.base import ArtifactError, check_version, fields_error
from seqcore.blobs import UnusableCheckpoint, load_blob, save_blob
from seqcore.config import ModelConfig, as_dict, config_from_dict
from seqcore.models import build_model
from seqcore.models.base import EncoderDecoder
from seqcore.models.rnnlm import RNNLMShape


@dataclass(frozen=True)
class ModelInfo:
    """Everything needed to rebuild an encoder-decoder: its config and sizes."""

    model: ModelConfig
    src_vocab: int
    tgt_vocab: int
    pad_id: int
    max_len: int


@dataclass(frozen=True)
class LMInfo:
    """Everything needed to rebuild the ``task: lm`` RNN LM: its shape and vocabulary."""

    shape: RNNLMShape
    vocab: list[str]


@dataclass(frozen=True)
class ModelMeta:
    """What the train stage records about the model (read by decode, evaluate, the audit).

    Attributes:
        training_contract: the flat contract the checkpoints were keyed by
            (seqcore.signature.training_contract), with the tokenizer hashes and thread count.
        best_dev_nll: None when undefined (no dev evaluation ran).
    """

    signature: str
    step: int
    select: str
    selected_step: int
    best_step: int
    best_dev_nll: float | None
    training_contract: dict[str, Any]

    def tokenizer_sha256(self) -> dict[str, str | None]:
        """The tokenizer model-file hashes the model was trained with, by side (None when
        the contract has none, as an lm model's)."""
        return {s: self.training_contract.get(f"tokenizer.{s}.sha256") for s in ("src", "tgt")}

    def trained_on(self) -> dict[str, Any]:
        """Where the model was trained: device kind, process count, backend (None if absent)."""
        return {k: self.training_contract.get(f"train.{k}")
                for k in ("device_kind", "nproc", "backend")}

    @property
    def threads(self) -> int:
        """The thread count the model was trained with (float sums depend on the split)."""
        return self.training_contract["train.threads"]

    @property
    def max_src_len(self) -> int:
        """The longest source the model was trained on."""
        return self.training_contract["sequence.max_src_len"]


@dataclass(frozen=True)
class ModelFile:
    """The parsed model file: weights, how to rebuild them (``info`` or ``lm``) and meta."""

    #: The ``schema`` field; 2 as the checkpoints it was introduced with (kept on its own).
    SCHEMA_VERSION: ClassVar[int] = 2

    weights: dict[str, torch.Tensor]
    meta: ModelMeta
    info: ModelInfo | None = None
    lm: LMInfo | None = None
    #: The file it was read from (for messages; empty for one built in memory).
    source: str = field(default="", compare=False)

    def build(self) -> EncoderDecoder:
        """The encoder-decoder in eval mode with these weights (for ``info`` files); weights
        that do not fit the model their config describes (another seqcore's names or shapes)
        are refused in one line naming the file."""
        if self.info is None:
            raise ValueError("an lm model file has no encoder-decoder to build")
        i = self.info
        model = build_model(i.model, i.src_vocab, i.tgt_vocab, i.pad_id, i.max_len)
        try:
            missing, unexpected = model.load_state_dict(self.weights, strict=False)
        except RuntimeError as err:  # a shape mismatch
            raise self._unfit(str(err).splitlines()[-1].strip()) from None
        if missing or unexpected:
            raise self._unfit(f"{len(missing)} weight(s) missing ({', '.join(missing[:2])}), "
                              f"{len(unexpected)} unexpected ({', '.join(unexpected[:2])})")
        model.eval()
        return model

    def _unfit(self, why: str) -> ArtifactError:
        return ArtifactError(f"{self.source or 'model file'}: its weights do not fit the model its "
                             f"config describes: {why}; it was written by another version of "
                             "seqcore: re-run the train stage (dvc repro)")

    def save(self, path: str | Path) -> str:
        """Write atomically with its sha256 sidecar; returns the file's sha256."""
        payload: dict[str, Any] = {"schema": self.SCHEMA_VERSION, "model": self.weights}
        if self.info is not None:
            i = self.info
            payload |= {"model_config": as_dict(i.model),
                        "sizes": {"src_vocab": i.src_vocab, "tgt_vocab": i.tgt_vocab,
                                  "pad_id": i.pad_id, "max_len": i.max_len}}
        if self.lm is not None:
            payload |= {"lm_shape": asdict(self.lm.shape), "vocab": self.lm.vocab}
        payload["meta"] = asdict(self.meta)
        return save_blob(Path(path), payload)

    @classmethod
    def load(cls, path: str | Path) -> ModelFile:
        """Read a model file (weights_only, hash checked, schema version checked)."""
        payload = load_blob(Path(path))
        check_version(path, "model file", payload.get("schema"), cls.SCHEMA_VERSION)
        try:
            info = lm = None
            if "model_config" in payload:
                s = payload["sizes"]
                info = ModelInfo(config_from_dict({"model": payload["model_config"]}).model,
                                 s["src_vocab"], s["tgt_vocab"], s["pad_id"], s["max_len"])
            if "lm_shape" in payload:
                lm = LMInfo(RNNLMShape(**payload["lm_shape"]), payload["vocab"])
            saved = cls(payload["model"], ModelMeta(**payload["meta"]), info, lm, str(path))
        except (KeyError, TypeError) as err:
            raise fields_error(path, "model", err) from None
        bad = next((name for name, t in saved.weights.items()
                    if t.is_floating_point() and not torch.isfinite(t).all()), None)
        if bad is not None:  # a diverged run (or an edited file) would decode garbage, exit 0
            raise UnusableCheckpoint(f"{path}: weight {bad} holds NaN or infinity; the model is "
                                     "unusable: retrain it (dvc repro -f train)")
        return saved
