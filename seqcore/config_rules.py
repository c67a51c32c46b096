"""The rules between params.yaml keys, and the task's own rules: checked when the params load
(seqcore.config), after each key's type and range (seqcore.config_ranges).

Each rule yields a ``Problem`` (key, value, what is allowed) when it is broken; the loader
stops on the first, in one line. Also here: what the workspace lacks for the params (a
user's data file: validate and fetch stop on it) and the settings the params set but nothing
reads (warnings).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from seqcore.config_ranges import Problem
from seqcore.credentials import has_credentials
from seqcore.kernels import LEVEL_FLAGS, cpu_flags

if TYPE_CHECKING:
    from seqcore.config import Config

#: What train.device and decode.device accept.
DEVICE_SPEC = re.compile(r"auto|cpu|cuda(:[0-9]+)?")
#: MLflow stores a run can be logged to and replayed into (``postgresql+psycopg`` counts as
#: postgresql); anything else, a bare path included, is refused by validate.
TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "file",
                    "databricks")


#: Why ``train.optimizer_kernel: fused`` cannot train under the portable CPU kernels: validate
#: says it for ``train.device: cpu``, the optimiser for a device that resolved to the CPU.
FUSED_ON_PORTABLE = ("is torch's CPU-specific fused Adam, which train.cpu_kernels: portable "
                     "cannot pin; set train.cpu_kernels: native (or train.optimizer_kernel: "
                     "auto)")


def problems(cfg: Config) -> Iterator[Problem]:
    """The rules between keys, then the task's own (seqcore.tasks), in order: each problem
    when it is reached (the loader reports the first; each field is already of its type and
    within its range)."""
    tok, data, dec, tr = cfg.tokenizer, cfg.data, cfg.decode, cfg.train
    ids = [tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id]
    if len(set(ids)) != 4:
        yield Problem("tokenizer.pad_id/unk_id/bos_id/eos_id", ids, "must be distinct")
    if data.dev_fraction + data.test_fraction >= 1:
        yield Problem("data.dev_fraction", data.dev_fraction, "",
                      f"data.dev_fraction + data.test_fraction = {data.dev_fraction} + "
                      f"{data.test_fraction}: must be < 1")
    if data.keep_stress and data.source != "cmudict":
        yield Problem("data.keep_stress", True, "applies to data.source cmudict only (any other "
                      "source is read as it is: nothing to keep or strip)")
    if data.source != "cmudict" and not data.path:
        yield Problem("data.path", data.path, f"required when data.source is {data.source}")
    yield from _raw_name(cfg)
    if dec.n_best > dec.beam_size and dec.strategy == "beam":
        yield Problem("decode.n_best", dec.n_best, f"must be <= decode.beam_size ({dec.beam_size})")
    if dec.min_len >= dec.max_len:
        yield Problem("decode.min_len", dec.min_len, f"must be < decode.max_len ({dec.max_len})")
    transformer = cfg.model.transformer
    if transformer.d_model % transformer.n_heads:
        yield Problem("model.transformer.d_model", transformer.d_model,
                      f"must be divisible by model.transformer.n_heads ({transformer.n_heads})")
    edges = cfg.evaluate.bucket_edges
    if edges != "auto" and list(edges) != sorted(set(edges)):
        yield Problem("evaluate.bucket_edges", list(cfg.evaluate.bucket_edges),
                      "must be strictly increasing")
    for side in ("src", "tgt"):
        size = getattr(tok, f"{side}_vocab_size")
        if isinstance(size, int) and max(ids) >= size:
            name = ("pad_id", "unk_id", "bos_id", "eos_id")[ids.index(max(ids))]
            yield Problem(f"tokenizer.{name}", max(ids), f"must be < tokenizer.{side}_vocab_size "
                          f"({size}): SentencePiece ids run from 0 to the vocabulary size - 1")
    if isinstance(tok.tgt_vocab_size, int) and any(t >= tok.tgt_vocab_size
                                                   for t in dec.banned_tokens):
        yield Problem("decode.banned_tokens", list(dec.banned_tokens),
                      f"ids must be < tokenizer.tgt_vocab_size ({tok.tgt_vocab_size})")
    if tok.eos_id in dec.banned_tokens:
        yield Problem("decode.banned_tokens", list(dec.banned_tokens),
                      f"must not contain tokenizer.eos_id ({tok.eos_id})")
    if tr.ss_schedule == "exponential" and not tr.ss_k < 1:
        yield Problem("train.ss_k", tr.ss_k,
                      "must be in (0, 1) when train.ss_schedule is exponential")
    if tr.select in ("best_dev_wer", "best_dev_per") and tr.dev_decode_words == 0:
        yield Problem("train.select", tr.select, "needs dev decoding while training: set "
                      "train.dev_decode_words > 0 (or use best_dev or last)")
    for key, spec in (("train.device", tr.device), ("decode.device", dec.device)):
        if not DEVICE_SPEC.fullmatch(spec):
            yield Problem(key, spec, "must be one of auto, cpu, cuda, cuda:N")
    if tr.nproc > 1 and ":" in tr.device:
        yield Problem("train.device", tr.device, "pins one GPU; with train.nproc > 1 use cuda "
                      "or auto (rank r uses cuda:LOCAL_RANK)")
    if tr.amp == "fp16" and tr.device == "cpu":
        yield Problem("train.amp", tr.amp,
                      "needs CUDA (train.device cuda or auto); use bf16 on CPU")
    # CPU bf16 runs oneDNN's GEMMs, chosen by the CPU's bf16 units (avx512_bf16, AMX): no
    # portable profile pins them (seqcore.kernels, issue 49)
    if tr.amp == "bf16" and tr.device == "cpu" and tr.cpu_kernels == "portable":
        yield Problem("train.amp", tr.amp, "runs CPU-specific oneDNN kernels, which "
                      "train.cpu_kernels: portable cannot pin; set train.cpu_kernels: native "
                      "(or train.amp: none)")
    if tr.optimizer_kernel == "fused" and tr.device == "cpu" and tr.cpu_kernels == "portable":
        yield Problem("train.optimizer_kernel", tr.optimizer_kernel, FUSED_ON_PORTABLE)
    if tr.cuda_graphs == "on":
        yield from _graph_problems(cfg)
    scheme = cfg.mlflow.tracking_uri.split("://", 1)[0].split("+", 1)[0] \
        if "://" in cfg.mlflow.tracking_uri else ""
    if scheme not in TRACKING_SCHEMES:
        yield Problem("mlflow.tracking_uri", cfg.mlflow.tracking_uri,
                      "must be a store URI starting with "
                      f"{', '.join(s + '://' for s in TRACKING_SCHEMES)}"
                      " (a run kept while the store is down is replayed to it)")
    if not cfg.mlflow.registered_model.strip() or "/" in cfg.mlflow.registered_model:
        yield Problem("mlflow.registered_model", cfg.mlflow.registered_model,
                      "must be auto, none or a Model Registry name (not empty, no '/')")
    if has_credentials(cfg.mlflow.tracking_uri):  # params.yaml is committed and logged (#15)
        yield Problem("mlflow.tracking_uri", "(not shown)", "",
                      "mlflow.tracking_uri: carries a password or token; params.yaml is "
                      "committed, so set MLFLOW_TRACKING_URI (or MLFLOW_TRACKING_USERNAME "
                      "and MLFLOW_TRACKING_PASSWORD) in the environment instead")


def _graph_problems(cfg: Config) -> Iterator[Problem]:
    """What ``train.cuda_graphs: on`` needs (seqcore.training.graphs): a GPU, shapes that a
    padded batch fixes and no decision on the host inside a step (the transformer, so a pair
    task: the lm task's models are RNNs)."""
    tr = cfg.train
    needs = (
        ("train.device", tr.device, tr.device == "cpu", "a CUDA device (cuda or auto)"),
        ("model.family", cfg.model.family, cfg.model.family != "transformer",
         "the transformer (the RNNs pack their batches by length on the host)"),
        ("train.nproc", tr.nproc, tr.nproc != 1, "one process"),
        ("train.amp", tr.amp, tr.amp == "fp16", "none or bf16 (fp16's grad scaler decides "
                                                "on the host)"),
        ("train.ss_schedule", tr.ss_schedule, tr.ss_schedule != "off",
         "off (scheduled sampling's first pass is not captured)"),
        ("train.optimizer_kernel", tr.optimizer_kernel, tr.optimizer_kernel == "unfused",
         "fused or auto (the fused Adam skips a non-finite step on the device)"))
    for key, value, refused, what in needs:
        if refused:
            yield Problem(key, value, f"train.cuda_graphs: on needs {what}")


def workspace_problem(cfg: Config) -> str | None:
    """What the workspace lacks for these params (validate and fetch stop on it): a user's
    data file, as a file. Not part of load_config: an audit or a colleague's clone reads
    params without the user's input file."""
    if cfg.data.source == "cmudict":
        return None
    path = Path(cfg.data.path)
    if path.is_dir():
        return f"data.path = {cfg.data.path!r}: a folder; name the data file in it"
    if not path.is_file():
        return (f"data.path = {cfg.data.path!r}: no such file (relative paths start at the "
                "repository root)")
    return None


def host_problem(cfg: Config) -> str | None:
    """What this CPU lacks for the params' CPU kernel profiles (validate stops on it): the
    portable profile needs AVX2 (seqcore.kernels), asked of a stage that computes on the
    CPU. Not part of load_config: params are read on other machines too (an audit, a GPU)."""
    flags = cpu_flags()
    if not flags or LEVEL_FLAGS["AVX2"] <= flags:
        return None  # an AVX2 CPU, or no /proc/cpuinfo to tell (the stage then checks)
    for key, profile, device in (("train.cpu_kernels", cfg.train.cpu_kernels, cfg.train.device),
                                 ("decode.cpu_kernels", cfg.decode.cpu_kernels,
                                  cfg.decode.device)):
        if profile == "portable" and not device.startswith(("cuda", "auto")):
            return (f"{key} = 'portable': this CPU has no AVX2, and the portable profile's "
                    f"bytes need it; set {key}: native (reproducible on this CPU kind only)")
    return None


#: Decode settings each strategy reads; a changed value under another strategy does nothing.
_STRATEGY_ONLY = {"n_best": ("beam", 1), "temperature": ("sample", 1.0),
                  "top_k": ("sample", 0), "top_p": ("sample", 1.0)}


def ignored_settings(cfg: Config) -> list[str]:
    """Warnings (one line each) for decode settings the chosen strategy never reads, when
    they differ from their defaults: validate and decode print them, nothing stops. The beam
    width, length penalty and alpha are not listed: the default params set them for beam
    search, and switching to greedy must not warn. With the task's own settings:
    seqcore.tasks.ignored_settings."""
    dec = cfg.decode
    return [f"decode.{key} = {getattr(dec, key)!r} is ignored: only decode.strategy {reader} "
           f"reads it (decode.strategy is {dec.strategy})"
           for key, (reader, default) in _STRATEGY_ONLY.items()
           if dec.strategy != reader and getattr(dec, key) != default]


#: Scheduled sampling's cap above which label smoothing beside it gets a warning: both soften
#: the targets the model learns from, and past a small share of fed model tokens the two
#: together are a known way to train a model that is confident of nothing (the seed text's
#: warning; issue 52).
SS_CAP_WITH_SMOOTHING = 0.25


def risky_settings(cfg: Config) -> list[str]:
    """Warnings (one line each) for settings that are allowed but known to work badly
    together: validate prints them, nothing stops."""
    tr, ls = cfg.train, cfg.sequence.label_smoothing
    if tr.ss_schedule != "off" and ls > 0 and tr.ss_cap > SS_CAP_WITH_SMOOTHING:
        return [f"sequence.label_smoothing = {ls:g} with scheduled sampling up to "
                f"train.ss_cap = {tr.ss_cap:g} (above {SS_CAP_WITH_SMOOTHING:g}): both soften "
                "the targets; lower one of them, or compare on dev (python -m pipeline.compare)"]
    return []


def _raw_name(cfg: Config) -> Iterator[Problem]:
    """A user's raw snapshot is named after the user's file, never after CMUdict (issue 13)."""
    data, raw = cfg.data, Path(cfg.paths.raw)
    if data.source != "cmudict" and raw.name != Path(data.path).name:
        yield Problem("paths.raw", str(raw), f"must be named after data.path {data.path}; set "
                      f"paths.raw: {(raw.parent / Path(data.path).name).as_posix()}")
