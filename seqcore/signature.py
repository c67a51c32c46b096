"""Human-readable signatures in the style of sacrebleu: ``key:value|key:value|...``.

The contract signature names everything that changes what a sequence means to the model:
data version, tokenizers, special ids, lengths and truncation, normalisation, loss. It is
printed by every stage and stored in the checkpoint, the predictions header, metrics.json and
the MLflow run; stages compare it and stop on a mismatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from seqcore import __version__
from seqcore.config import Config

if TYPE_CHECKING:  # the contract class imports torch (SpecialIds); signatures need none
    from seqcore.artifacts.tokenizer_contract import TokenizerContract

SIGNATURE_FORMAT = 1


#: Shown for fields that only exist once the tokenizer stage has run (fetch, prepare).
PENDING = "pending"


def contract_fields(cfg: Config, tokenizer_contract: TokenizerContract | None) -> dict[str, str]:
    """The ordered fields of the sequence-contract signature.

    With ``tokenizer_contract=None`` (stages before the tokenizer) the data hash comes from
    params (``data.sha256``) and the tokenizer fields read ``pending``.
    """
    tc, seq, data = tokenizer_contract, cfg.sequence, cfg.data

    def side(name: str) -> str:
        if tc is None:
            return PENDING
        s = tc.side(name)
        return f"{s.model_type}-v{s.vocab_size}-{s.sha256[:8]}"

    ids = tc.special_ids if tc else None
    return {
        "task": cfg.task,
        "data": (tc.data_sha256 if tc else data.sha256 or PENDING)[:12],
        "src": side("src"),
        "tgt": side("tgt"),
        "pad": str(ids.pad) if ids else PENDING,
        "unk": str(ids.unk) if ids else PENDING,
        "bos": str(ids.bos) if ids else PENDING,
        "eos": str(ids.eos) if ids else PENDING,
        "maxsrc": str(seq.max_src_len),
        "maxtgt": str(seq.max_tgt_len),
        "trunc": seq.overlong,
        "norm": data.normalization,
        "case": ("fold" if data.casefold else "keep") + ("-tgtfold" if data.casefold_target
                                                           else ""),
        "stress": "keep" if data.keep_stress else "strip",
        "loss": seq.loss_norm,
        "ls": f"{seq.label_smoothing:g}",
        "fmt": str(SIGNATURE_FORMAT),
        "version": __version__,
    }


def format_signature(fields: dict[str, str]) -> str:
    """``k1:v1|k2:v2|...`` in the given order."""
    return "|".join(f"{k}:{v}" for k, v in fields.items())


def contract_signature(cfg: Config, tokenizer_contract: TokenizerContract | None) -> str:
    return format_signature(contract_fields(cfg, tokenizer_contract))


def parse_signature(sig: str) -> dict[str, str]:
    """Inverse of :func:`format_signature`."""
    return dict(kv.split(":", 1) for kv in sig.split("|") if kv)


def signature_diff(expected: str, got: str) -> list[str]:
    """Field-by-field differences between two signatures (empty when equal)."""
    a, b = parse_signature(expected), parse_signature(got)
    return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


#: Train-section keys that do not change what is learned (logging and bookkeeping only).
NOT_CONTRACT = {"log_every", "keep_last", "resume", "checkpoint_every",
                "device"}  # the device *kind* is in the contract (runtime_contract)


#: Contract keys added after checkpoints already existed, with the value that reproduces the
#: behaviour from before the key: at that value the key is left out of the training
#: contract, so a checkpoint or model file written before it still resumes and compares equal.
#: Any other value is in the contract like every key.
ADDED_KEYS = {"model.transformer.attention_kernel": "auto"}
#: Guards: thresholds that decide whether a stage stops and change no output byte, so they
#: enter no training contract (a raised guard must not make a trained model stale).
GUARD_KEYS = frozenset({"data.max_target_share", "data.max_reject_rate",
                        "data.max_copy_share"})


def guard_fields(section: str) -> frozenset[str]:
    """The guard keys of params.yaml section ``section``, as its field names."""
    return frozenset(k.split(".", 1)[1] for k in GUARD_KEYS if k.startswith(f"{section}."))


def runtime_contract(cfg: Config) -> dict[str, Any]:
    """Where training runs, as far as it changes the numbers: the device kind (cpu/cuda) and
    the collective backend (none for one process, gloo on CPU, nccl on CUDA).

    ``train.device: auto`` resolves on the machine that asks; ``train.nproc`` (the world size)
    is in the contract as a train key.
    """
    # from determinism, not training: the stages before train sign without importing it
    from seqcore.determinism import backend_for, device_kind  # noqa: PLC0415 (imports torch)

    kind = device_kind(cfg.train.device)
    return {"train.device_kind": kind, "train.backend": backend_for(kind, cfg.train.nproc)}


def config_contract(cfg: Config, sections: tuple[str, ...]) -> dict[str, Any]:
    """The part of a training contract every task shares: the flat params of ``sections``
    (train keys in NOT_CONTRACT, and ADDED_KEYS at their old behaviour, left out), then the
    runtime contract."""
    from seqcore.config import as_dict, flatten  # noqa: PLC0415

    # a guard is not even read: the stage that checks it declares it, no other stage does
    tree = {k: as_dict(getattr(cfg, k), guard_fields(k)) for k in sections}
    flat = {k: v for k, v in flatten(tree).items()
            if not (k.startswith("train.") and k.split(".", 1)[1] in NOT_CONTRACT)
            and ADDED_KEYS.get(k, object()) != v and k not in GUARD_KEYS}
    flat.update(runtime_contract(cfg))
    return flat


def training_contract(cfg: Config, tokenizer_contract: TokenizerContract) -> dict[str, Any]:
    """Flat dict of everything a seq2seq checkpoint must agree with to be resumed."""
    flat = config_contract(cfg, ("data", "tokenizer", "sequence", "model", "train"))
    flat["task"] = cfg.task
    flat["signature"] = contract_signature(cfg, tokenizer_contract)
    flat["tokenizer.src.sha256"] = tokenizer_contract.src.sha256
    flat["tokenizer.tgt.sha256"] = tokenizer_contract.tgt.sha256
    return flat


def derived_params(cfg: Config) -> dict[str, str]:
    """Contract rules fixed by code rather than params.yaml, logged next to the params.

    They restate the documented order of seqcore/training/loop.py and seqcore/contract.py so
    that a run record answers "where is the gradient clipped?" without reading the source.
    """
    tr, seq = cfg.train, cfg.sequence
    return {
        "derived.signature.format": str(SIGNATURE_FORMAT),
        "derived.clip.where": "after unscale, after all micro-batches of the step",
        "derived.clip.norm": "global L2 over all parameters" if tr.clip_norm > 0 else "off",
        "derived.batch.unit": "sequences per micro-batch",
        "derived.batch.sequences_per_step": str(tr.batch_size * tr.accum_steps),
        "derived.batch.bucketing": f"target length buckets of width {tr.bucket_width}",
        "derived.loss.denominator": "valid label tokens of all micro-batches of the step"
        if seq.loss_norm == "token-mean" else seq.loss_norm,
        "derived.eos": "every kept target ends with EOS" if seq.overlong == "drop"
        else "a truncated target has no EOS",
        "derived.teacher_forcing": "decoder input = BOS + target; labels = target + EOS",
        "derived.bptt": "n/a (no recurrence)" if cfg.model.family == "transformer"
        else "full sequence, state reset per sequence (no truncated BPTT)",
        "derived.checkpoint.select": "lowest dev token NLL" if tr.select == "best_dev"
        else "last step",
    }
