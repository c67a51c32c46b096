"""Human-readable signatures in the style of sacrebleu: ``key:value|key:value|...``.

Each stage signs what its outputs depend on, and nothing else (issue 34):

- the **tokenizer signature** (``tokenizer/contract.json``): data hash, tokenizers, special
  ids, lengths and truncation, normalisation, case, stress;
- the **contract signature** (the model file, the predictions header, results.json, the
  MLflow run): the tokenizer signature plus the loss (normalisation, label smoothing);
- the **result signature** (results.json and the MLflow run, beside every reported number):
  the contract signature plus the training contract's hash, the model file's hash and every
  decode and evaluate setting that changes the figures (:func:`result_fields`).

A later signature extends the earlier one field for field; a stage compares the fields it
inherits (:func:`inherited_diff`) and stops on a mismatch. Guards and bookkeeping keys
(:data:`NO_RESULT_KEYS`) enter no signature and no training contract.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from seqcore import __version__
from seqcore.config import Config, DecodeConfig, as_dict, flat_params, flatten
from seqcore.signature_format import format_signature, parse_signature

if TYPE_CHECKING:  # the contract class imports torch (SpecialIds); signatures need none
    from seqcore.artifacts.tokenizer_contract import TokenizerContract

#: 1: one contract signature for every stage (loss fields in the tokenizer's);
#: 2: tokenizer, contract and result signatures (issue 34).
SIGNATURE_FORMAT = 2

#: The fields every signature ends with.
TRAILER = ("fmt", "version")


def tokenizer_fields(cfg: Config, tc: TokenizerContract) -> dict[str, str]:
    """The ordered fields of the tokenizer signature: what the encoded data depends on."""
    seq, data, ids = cfg.sequence, cfg.data, tc.special_ids

    def side(name: str) -> str:
        s = tc.side(name)
        return f"{s.model_type}-v{s.vocab_size}-{s.sha256[:8]}"

    return {
        "task": cfg.task, "data": tc.data_sha256[:12], "src": side("src"), "tgt": side("tgt"),
        "pad": str(ids.pad), "unk": str(ids.unk), "bos": str(ids.bos), "eos": str(ids.eos),
        "maxsrc": str(seq.max_src_len), "maxtgt": str(seq.max_tgt_len), "trunc": seq.overlong,
        "norm": data.normalization,
        "case": ("fold" if data.casefold else "keep") + ("-tgtfold" if data.casefold_target
                                                           else ""),
        **stress_field(cfg), "fmt": str(SIGNATURE_FORMAT), "version": __version__,
    }


def stress_field(cfg: Config) -> dict[str, str]:
    """``stress``, where it applies: the CMUdict reader strips or keeps the ARPAbet stress
    digits; any other source is read as it is, so its signature claims nothing about stress
    (issue 30)."""
    if cfg.data.source != "cmudict":
        return {}
    return {"stress": "keep" if cfg.data.keep_stress else "strip"}


def inapplicable_keys(cfg: Config) -> frozenset[str]:
    """Keys that change nothing under this config's source: in no run, contract or audit."""
    return frozenset() if cfg.data.source == "cmudict" else frozenset({"data.keep_stress"})


def contract_fields(cfg: Config, tc: TokenizerContract) -> dict[str, str]:
    """The ordered fields of the contract signature: the tokenizer's, then the loss."""
    fields = tokenizer_fields(cfg, tc)
    trailer = {k: fields.pop(k) for k in TRAILER}
    return fields | {"loss": cfg.sequence.loss_norm,
                     "ls": f"{cfg.sequence.label_smoothing:g}"} | trailer


def tokenizer_signature(cfg: Config, tc: TokenizerContract) -> str:
    return format_signature(tokenizer_fields(cfg, tc))


def contract_signature(cfg: Config, tc: TokenizerContract) -> str:
    return format_signature(contract_fields(cfg, tc))


def data_signature(cfg: Config, raw_sha256: str, subset: str = "") -> str:
    """What the prepared splits depend on (printed by prepare): the raw snapshot and the data
    settings that shape the rows and splits."""
    d = cfg.data
    return format_signature({
        "task": cfg.task, "data": raw_sha256[:12], "source": d.source, "norm": d.normalization,
        "case": ("fold" if d.casefold else "keep") + ("-tgtfold" if d.casefold_target else ""),
        **stress_field(cfg), "rows": d.bad_rows,
        # subset: how the task cuts max_pairs N > 0 ("g": whole groups drawn at random, the
        # pair tasks' prepare piece, issue 55; "": the first N rows, task lm)
        "split": f"{d.split_seed}-{d.dev_fraction:g}-{d.test_fraction:g}-{d.max_pairs}"
                 + (subset if d.max_pairs else ""),
        "fmt": str(SIGNATURE_FORMAT), "version": __version__})


def result_fields(contract_sig: str, training_contract_hash: str, model_sha256: str,
                  decode: DecodeConfig | None, resampling: str | None) -> dict[str, str]:
    """The ordered fields of the result signature: the contract signature's, the training
    contract hash (the checkpoint folder's name), the model file hash, the decode settings
    that change the outputs (only those of the strategy used) and the bootstrap's.

    ``decode``: the predictions header's settings (None for ``task: lm``, which decodes
    nothing); ``resampling``: the interval signature (``bs:1000|rs:12345|...``), if any.
    """
    fields = parse_signature(contract_sig)
    trailer = {k: fields.pop(k, "") for k in TRAILER}
    fields |= {"train": training_contract_hash[:12], "model": model_sha256[:12]}
    fields |= decode_fields(decode) if decode else {"decode": "none"}
    if resampling:
        fields |= parse_signature(resampling)
    return fields | {"fmt": str(SIGNATURE_FORMAT), "version": trailer["version"]}


#: Decode settings in the result signature: (header key, field name), by strategy; the
#: ``COMMON`` ones apply to every strategy.
DECODE_FIELDS = {
    "COMMON": (("split", "split"), ("strategy", "dec"), ("min_len", "minlen"),
               ("max_len", "maxlen"), ("max_len_ratio", "ratio"),
               ("no_repeat_ngram", "norep"), ("banned_tokens", "ban"),
               ("batch_size", "dbs"), ("rescore", "rescore"), ("cpu_kernels", "cpuk")),
    "beam": (("beam_size", "beam"), ("n_best", "nbest"), ("length_norm", "lnorm"),
             ("alpha", "alpha")),
    "sample": (("temperature", "temp"), ("top_k", "topk"), ("top_p", "topp"), ("seed", "seed")),
    "greedy": (),
}


def decode_fields(decode: DecodeConfig) -> dict[str, str]:
    """The decode settings that change the predictions, as signature fields."""
    keys = DECODE_FIELDS["COMMON"] + DECODE_FIELDS.get(decode.strategy, ())
    out = {name: _text(getattr(decode, key)) for key, name in keys}
    if decode.rescore != "none":
        out["rw"] = _text(decode.rescore_weight)
    if decode.tuned_on != "none":  # the settings above were chosen on that split (issue 52)
        out["tuned"] = decode.tuned_on
    return out


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def result_signature(contract_sig: str, training_contract_hash: str, model_sha256: str,
                     decode: DecodeConfig | None, resampling: str | None) -> str:
    return format_signature(result_fields(contract_sig, training_contract_hash, model_sha256,
                                          decode, resampling))






#: Train-section keys that do not change what is learned (logging and bookkeeping only).
NOT_CONTRACT = {"log_every", "keep_last", "resume", "checkpoint_every", "ledger_every",
                "dev_decode_show", "device"}  # the device *kind* is in the contract (runtime_contract)


#: Contract keys added after checkpoints already existed, with the value that reproduces the
#: behaviour from before the key: at that value the key is left out of the training
#: contract, so a checkpoint or model file written before it still resumes and compares equal.
#: Any other value is in the contract like every key.
ADDED_KEYS = {"model.transformer.attention_kernel": "auto", "train.cpu_kernels": "native",
              "train.dev_decode_words": 0, "train.dev_decode_beam": 1,
              # minimum risk training (issue 52): off, and its settings at their defaults
              "train.mrt_steps": 0, "train.mrt_candidates": 4, "train.mrt_search": "beam",
              "train.mrt_reference": True, "train.mrt_risk": "edit", "train.mrt_alpha": 1.0,
              "train.mrt_lr": 1e-4,
              # the optimiser's kernel (issue 53), resolved: torch's unfused default
              "train.optimizer_kernel": "unfused",
              # the step as CUDA graphs (issue 53), resolved: off, the eager step
              "train.cuda_graphs": "off"}
#: Guards: thresholds (and the raw snapshot's pin) that decide whether a stage stops and
#: change no output byte. The stage that checks one declares it (a change re-checks); it
#: enters no signature, no training contract, no manifest and no MLflow run.
GUARD_KEYS = frozenset({
    "data.sha256", "data.min_split_rows", "data.max_target_share", "data.max_reject_rate",
    "data.max_copy_share", "tokenizer.max_unk_rate", "sequence.max_drop_rate",
    "train.max_consecutive_skips"})
#: Keys that change no result and so are no part of the MLflow run (whose params the audit
#: compares with params.yaml): the guards, and training's logging and checkpoint keeping
#: (proven: tests/stages/test_params_live.py NOT_RESULTS, tests/training/test_resume.py).
NO_RESULT_KEYS = GUARD_KEYS | {f"train.{k}" for k in ("log_every", "keep_last", "resume",
                                                      "checkpoint_every", "ledger_every",
                                                      "dev_decode_show")}


def guard_fields(section: str) -> frozenset[str]:
    """The guard keys of params.yaml section ``section``, as its field names."""
    return frozenset(k.split(".", 1)[1] for k in GUARD_KEYS if k.startswith(f"{section}."))


def result_params(cfg: Config) -> dict[str, Any]:
    """Every params.yaml key that can change a result, flattened (NO_RESULT_KEYS are left out
    unread): the params of the MLflow run, and the keys the audit compares."""
    return flat_params(cfg, NO_RESULT_KEYS | inapplicable_keys(cfg))


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
    runtime contract. ``train.optimizer_kernel`` enters resolved for the device kind (auto is
    fused on CUDA, unfused on CPU: seqcore.training.optim), ``train.cuda_graphs`` resolved
    (auto is off for now)."""
    runtime = runtime_contract(cfg)
    # a guard is not even read: the stage that checks it declares it, no other stage does
    tree = {k: as_dict(getattr(cfg, k), guard_fields(k)) for k in sections}
    resolved = {"train.optimizer_kernel": cfg.train.optimizer_kernel_on(
        runtime["train.device_kind"]), "train.cuda_graphs": "on" if cfg.train.cuda_graphs_on()
        else "off"}
    flat = {k: resolved.get(k, v) for k, v in flatten(tree).items()}
    flat = {k: v for k, v in flat.items()
            if not (k.startswith("train.") and k.split(".", 1)[1] in NOT_CONTRACT)
            and ADDED_KEYS.get(k, object()) != v and k not in GUARD_KEYS | inapplicable_keys(cfg)}
    flat.update(runtime)
    return flat


def training_contract(cfg: Config, tokenizer_contract: TokenizerContract) -> dict[str, Any]:
    """Flat dict of everything a seq2seq checkpoint must agree with to be resumed."""
    flat = config_contract(cfg, ("data", "tokenizer", "sequence", "model", "train"))
    flat["task"] = cfg.task
    flat["signature"] = contract_signature(cfg, tokenizer_contract)
    flat["tokenizer.src.sha256"] = tokenizer_contract.src.sha256
    flat["tokenizer.tgt.sha256"] = tokenizer_contract.tgt.sha256
    return flat


#: What each ``train.select`` exports, in words (the tie rules of seqcore.training.dev_decode).
SELECT_RULES = {
    "last": "last step",
    "best_dev": "lowest dev token NLL",
    "best_dev_wer": "lowest dev-sample WER (ties: lower dev PER, then lower dev NLL, then the "
                    "earlier step)",
    "best_dev_per": "lowest dev-sample PER (ties: lower dev WER, then lower dev NLL, then the "
                    "earlier step)",
}


def derived_params(cfg: Config) -> dict[str, str]:
    """Contract rules fixed by the shared training loop rather than params.yaml, logged next
    to the params (each task adds its own: ``Task.derived_params``).

    They restate the documented order of seqcore/training/loop.py so that a run record
    answers "where is the gradient clipped?" without reading the source.
    """
    tr = cfg.train
    return {
        "derived.signature.format": str(SIGNATURE_FORMAT),
        "derived.clip.where": "after unscale, after all micro-batches of the step",
        "derived.clip.norm": "global L2 over all parameters" if tr.clip_norm > 0 else "off",
        "derived.checkpoint.select": SELECT_RULES[tr.select],
    }
