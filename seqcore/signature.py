"""Human-readable signatures in the style of sacrebleu: ``key:value|key:value|...``.

The contract signature names everything that changes what a sequence means to the model:
data version, tokenizers, special ids, lengths and truncation, normalisation, loss. It is
printed by every stage and stored in the checkpoint, the predictions header, metrics.json and
the MLflow run; stages compare it and stop on a mismatch.
"""

from __future__ import annotations

from typing import Any

from seqcore import __version__
from seqcore.config import Config

SIGNATURE_FORMAT = 1


def contract_fields(cfg: Config, tokenizer_contract: dict[str, Any]) -> dict[str, str]:
    """The ordered fields of the sequence-contract signature."""
    tc, seq, data = tokenizer_contract, cfg.sequence, cfg.data
    side = lambda s: f"{tc[s]['model_type']}-v{tc[s]['vocab_size']}-{tc[s]['sha256'][:8]}"  # noqa: E731
    return {
        "task": cfg.task,
        "data": tc["data_sha256"][:12],
        "src": side("src"),
        "tgt": side("tgt"),
        "pad": str(tc["special_ids"]["pad"]),
        "unk": str(tc["special_ids"]["unk"]),
        "bos": str(tc["special_ids"]["bos"]),
        "eos": str(tc["special_ids"]["eos"]),
        "maxsrc": str(seq.max_src_len),
        "maxtgt": str(seq.max_tgt_len),
        "trunc": seq.overlong,
        "norm": data.normalization,
        "case": "fold" if data.casefold else "keep",
        "stress": "keep" if data.keep_stress else "strip",
        "loss": seq.loss_norm,
        "ls": f"{seq.label_smoothing:g}",
        "fmt": str(SIGNATURE_FORMAT),
        "version": __version__,
    }


def format_signature(fields: dict[str, str]) -> str:
    """``k1:v1|k2:v2|...`` in the given order."""
    return "|".join(f"{k}:{v}" for k, v in fields.items())


def contract_signature(cfg: Config, tokenizer_contract: dict[str, Any]) -> str:
    return format_signature(contract_fields(cfg, tokenizer_contract))


def signature_diff(expected: str, got: str) -> list[str]:
    """Field-by-field differences between two signatures (empty when equal)."""
    parse = lambda s: dict(kv.split(":", 1) for kv in s.split("|"))  # noqa: E731
    a, b = parse(expected), parse(got)
    return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


#: Train-section keys that do not change what is learned (logging and bookkeeping only).
_NOT_CONTRACT = {"log_every", "keep_last", "resume", "checkpoint_every"}


def training_contract(cfg: Config, tokenizer_contract: dict[str, Any]) -> dict[str, Any]:
    """Flat dict of everything a checkpoint must agree with to be resumed."""
    from seqcore.config import as_dict, flatten  # noqa: PLC0415

    tree = {k: as_dict(getattr(cfg, k)) for k in ("data", "tokenizer", "sequence", "model",
                                                  "train")}
    flat = {k: v for k, v in flatten(tree).items()
            if not (k.startswith("train.") and k.split(".", 1)[1] in _NOT_CONTRACT)}
    flat["task"] = cfg.task
    flat["signature"] = contract_signature(cfg, tokenizer_contract)
    flat["tokenizer.src.sha256"] = tokenizer_contract["src"]["sha256"]
    flat["tokenizer.tgt.sha256"] = tokenizer_contract["tgt"]["sha256"]
    return flat
