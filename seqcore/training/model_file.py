"""The final model file: weights plus what is needed to rebuild and audit them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqcore.config import ModelConfig, as_dict, config_from_dict
from seqcore.models import build_model
from seqcore.models.base import EncoderDecoder
from seqcore.training.checkpoint import SCHEMA_VERSION, load_blob, save_blob


@dataclass(frozen=True)
class ModelInfo:
    """Everything needed to rebuild a model: its config and sizes."""

    model: ModelConfig
    src_vocab: int
    tgt_vocab: int
    pad_id: int
    max_len: int


def save_model(path: Path, model: EncoderDecoder, info: ModelInfo, meta: dict[str, Any]) -> str:
    """Write weights, model config and metadata atomically; returns the file's sha256."""
    payload = {"schema": SCHEMA_VERSION, "model": model.state_dict(),
               "model_config": as_dict(info.model),
               "sizes": {"src_vocab": info.src_vocab, "tgt_vocab": info.tgt_vocab,
                         "pad_id": info.pad_id, "max_len": info.max_len},
               "meta": meta}
    return save_blob(Path(path), payload)


def load_model(path: Path) -> tuple[EncoderDecoder, dict[str, Any]]:
    """Rebuild the model in eval mode from a model file (weights_only load, hash checked)."""
    payload = load_blob(Path(path))
    cfg = config_from_dict({"model": payload["model_config"]}).model
    s = payload["sizes"]
    model = build_model(cfg, s["src_vocab"], s["tgt_vocab"], s["pad_id"], s["max_len"])
    model.load_state_dict(payload["model"])
    model.eval()
    return model, payload["meta"]
