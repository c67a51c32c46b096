"""The audit's comparators see a one-byte forgery: equal versions give no difference, a
one-byte (cell, value, element) difference gives one line naming the file, the place and both
sides, and only the declared ignored fields are ignored. A comparator calling everything equal
would pass every forgery, so each relation sits beside its exact line, written out by hand."""

from __future__ import annotations

import base64
import hashlib
import math
import shutil
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import mlflow
import pytest
import torch
from mlflow.entities import Metric, Param, RunTag

from pipeline.audit.mlflow_run import mlflow_diffs, tag_diffs
from pipeline.audit.rederive import training_diffs
from pipeline.audit.verdict import code_line
from pipeline.dvc_files import read_yaml12
from pipeline.tracking import dataset_entities
from seqcore.artifacts.model_file import ModelFile, ModelMeta
from seqcore.artifacts.reports import Results
from seqcore.artifacts.run_record import RunRecord
from seqcore.artifacts.train_log import StepLog, TrainLog
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.audit import (
    MISMATCH, NOT_RUN, OK, WARNING, AuditReport, lock_param_diffs, lookup, number_diffs,
    same_value_diffs, stage_out_diffs, tokenizer_file_diffs)
from seqcore.compare import first_difference, path_differences
from seqcore.config import Config, config_from_dict
from tests.factories import CONTRACT, whole_checkpoint
from tests.pipeline_helpers import empty_mlflow_store

SIDES = ("file", "recomputed")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def png(rgb: list[tuple[int, int, int]]) -> bytes:
    """A 1-row RGB PNG of ``rgb`` pixels, written by hand (signature, IHDR, IDAT, IEND)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data))
    row = b"\0" + bytes(c for px in rgb for c in px)  # filter byte 0, then the pixels
    ihdr = struct.pack(">IIBBBBB", len(rgb), 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(row))
            + chunk(b"IEND", b""))


PLOT = png([(255, 0, 0), (0, 0, 255)])
# Byte 19 is the low byte of the IHDR width (8 signature + 4 length + 4 "IHDR" + 3).
PLOT_FORGED = PLOT[:19] + bytes([PLOT[19] ^ 1]) + PLOT[20:]
WEIGHTS_BLOB = b"\x80\x02}q\x00(X\x01\x00\x00\x00wq\x01G?\xf0\x00\x00\x00\x00\x00\x00u."
WEIGHTS_FORGED = WEIGHTS_BLOB[:20] + bytes([WEIGHTS_BLOB[20] ^ 1]) + WEIGHTS_BLOB[21:]
VOCAB, VOCAB_FORGED = b"<pad>\x00<unk>\nab\n", b"<pad>\x00<unk>\nac\n"  # "b" is byte 13

# (name, file version, recomputed version, the one expected line): each recomputed version
# differs from the file in one byte, one character, one cell or one value.
JSONL = (b'{"id": "1", "hyp": "AY DH ER"}\n{"id": "2", "hyp": "D AO G"}\n'
         b'{"id": "3", "hyp": "K AE T"}\n')
ONE_DIFFERENCE = [
    ("reports/metrics.json", b'{"wer": 0.25, "by_split": {"test": {"per": 0.125, "n": 24}}}\n',
     b'{"wer": 0.25, "by_split": {"test": {"per": 0.125, "n": 25}}}\n',
     "reports/metrics.json: field by_split.test.n: file has 24, recomputed has 25"),
    ("data/prepared/ids.json", b'[["cat", 1], ["dog", 2]]\n', b'[["cat", 1], ["dog", 3]]\n',
     'data/prepared/ids.json: field (value): file has [["cat", 1], ["dog", 2]], '
     'recomputed has [["cat", 1], ["dog", 3]]'),
    ("predictions/test.jsonl", JSONL, JSONL.replace(b"K AE T", b"K AE D"),
     'predictions/test.jsonl: line 3: field hyp: file has "K AE T", recomputed has "K AE D"'),
    ("reports/data_rejects.tsv", b"id\tword\tphonemes\n1\tdog\tD AO G\n2\tcat\tK AE T\n",
     b"id\tword\tphonemes\n1\tdog\tD AO G\n2\tcat\tK AE D\n",
     'reports/data_rejects.tsv: line 3: column phonemes: file has "K AE T", '
     'recomputed has "K AE D"'),
    ("reports/buckets.csv", b"bucket,sequences,wer\n1-4,10,0.25\n5-8,12,0.125\n",
     b"bucket,sequences,wer\n1-4,10,0.25\n5-8,13,0.125\n",
     'reports/buckets.csv: line 3: column sequences: file has "12", recomputed has "13"'),
    ("reports/report.md", b"# Report\nWER 0.25\n", b"# Report\nWER 0.26\n",
     'reports/report.md: line 2: file has "WER 0.25", recomputed has "WER 0.26"'),
    ("reports/plots/loss.png", PLOT, PLOT_FORGED,
     f"reports/plots/loss.png: bytes differ from offset 19: file sha256 {sha(PLOT)} "
     f"({len(PLOT)} bytes), recomputed sha256 {sha(PLOT_FORGED)} ({len(PLOT_FORGED)} bytes)"),
    ("models/weights.bin", WEIGHTS_BLOB, WEIGHTS_FORGED,
     f"models/weights.bin: bytes differ from offset 20: file sha256 {sha(WEIGHTS_BLOB)} "
     f"({len(WEIGHTS_BLOB)} bytes), recomputed sha256 {sha(WEIGHTS_FORGED)} "
     f"({len(WEIGHTS_FORGED)} bytes)"),
    ("tokenizer/src.vocab", VOCAB, VOCAB_FORGED,  # text with a NUL: compared as bytes
     f"tokenizer/src.vocab: bytes differ from offset 13: file sha256 {sha(VOCAB)} (15 bytes), "
     f"recomputed sha256 {sha(VOCAB_FORGED)} (15 bytes)"),
]
KINDS = [Path(name).suffix for name, *_ in ONE_DIFFERENCE]


@pytest.mark.parametrize(("name", "left", "right", "line"), ONE_DIFFERENCE, ids=KINDS)
def test_a_file_equals_its_copy_and_a_one_byte_difference_is_one_line_naming_place_and_sides(
        name: str, left: bytes, right: bytes, line: str) -> None:
    assert first_difference(name, SIDES, left, bytes(left)) == []
    assert first_difference(name, SIDES, right, bytes(right)) == []
    assert first_difference(name, SIDES, left, right) == [line]


def test_a_missing_trailing_newline_is_a_difference() -> None:
    assert first_difference("reports/report.md", SIDES, b"WER 0.25\n", b"WER 0.25") == [
        "reports/report.md: bytes differ (line endings or a trailing newline)"]


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


TREE = {"test.jsonl": b'{"id": "1", "hyp": "K AE T"}\n',
        "sub/rows.tsv": b"id\thyp\n1\tK AE T\n2\tD AO G\n",
        "header.json": b'{"n": 2}\n'}


@pytest.mark.parametrize(("left", "right", "want"), [
    ({}, {}, []),
    ({}, {"sub/rows.tsv": b"id\thyp\n1\tK AE T\n2\tD AO D\n"},
     ['predictions/sub/rows.tsv: line 3: column hyp: file has "D AO G", recomputed has "D AO D"']),
    ({}, {"__pycache__/x.pyc": b"\0"}, []),
    ({}, {"__pycache__/x.pyc": b"\0", "header.json": b'{"n": 3}\n'},
     ["predictions/header.json: field n: file has 2, recomputed has 3"]),
    ({}, {"sub/extra.txt": b"x\n"}, ["predictions/sub/extra.txt: only in recomputed"]),
    ({"sub/extra.txt": b"x\n"}, {}, ["predictions/sub/extra.txt: only in file"]),
    ({}, None, ["predictions: missing in recomputed"]),  # None: no such folder
], ids=["test_two_identical_folders_give_no_difference",
        "test_a_file_of_a_folder_is_compared_by_its_own_kind_and_named_by_its_path",
        "test_ignored_folder_entries_are_ignored_and_a_difference_beside_them_is_not",
        "a-difference-beside-ignored-entries",
        "test_a_folder_with_one_extra_file_is_one_line_naming_it_and_its_side",
        "test_a_folder_with_one_extra_file_is_one_line_naming_it_and_its_side-reversed",
        "test_a_missing_side_is_one_line_naming_it"])
def test_each_file_of_a_folder_is_compared_by_its_kind_save_the_ignored_entries(
        left: dict[str, bytes], right: dict[str, bytes] | None, want: list[str],
        tmp_path: Path) -> None:
    a = write_tree(tmp_path / "a", TREE | left)
    b = tmp_path / "none" if right is None else write_tree(tmp_path / "b", TREE | right)
    assert path_differences("predictions", SIDES, a, b) == want


# --- the training record against its checkpoint (pipeline/audit/rederive.training_diffs) ----
HISTORY = [StepLog(1, 0, 0.5, 2.5, 10, 1.0, 0, float("nan"), 0.0),
           StepLog(2, 0, 0.25, 1.25, 12, 0.5, 0, 1.75, 0.0)]
STATE = {"step": 2, "tokens": 22, "skipped": 0, "consecutive_skips": 0, "best_dev": 1.75,
         "best_step": 2, "select": "last"}  # a checkpoint's counters, as the loop writes them
COUNTERS = TrainMetrics(steps=2, tokens=22, skipped_steps=0, best_step=2, best_dev_nll=1.75,
                        final_loss=1.25, selected_step=2)
META = ModelMeta("sig", step=2, select="last", selected_step=2, best_step=2, best_dev_nll=1.75,
                 training_contract={})


def weights(at_1_0: float = 3.0) -> dict[str, torch.Tensor]:
    return {"encoder.embed.weight": torch.tensor([[1.0, 2.0], [at_1_0, 4.0]]),
            "decoder.out.bias": torch.tensor([0.5, -0.5])}


def training_record(tmp: Path, model: dict[str, torch.Tensor] | None = None,
                    log: list[StepLog] | None = None, counters: TrainMetrics = COUNTERS,
                    history: list[StepLog] = HISTORY) -> tuple[Config, Path]:
    """A finished two-step run's files, each written as the train stage writes it: the config
    naming them and the run's last checkpoint."""
    cfg = config_from_dict({"paths": {k: str(tmp / f"{k}{ext}") for k, ext in (
        ("model", ".pt"), ("train_log", ".csv"), ("train_metrics", ".json"),
        ("results", ".json"))}})
    ckpt = tmp / "checkpoints" / "ckpt-00000002.pt"
    whole_checkpoint(state=STATE, history=[r.row() for r in history], model=weights()).save(ckpt)
    Results({"checkpoints": str(ckpt.parent)}).save(cfg.paths.results)
    TrainLog(tuple(log or HISTORY)).save(cfg.paths.train_log)
    counters.save(cfg.paths.train_metrics)
    ModelFile(model or weights(), META).save(cfg.paths.model)
    return cfg, ckpt


@pytest.mark.parametrize(("forged", "want"), [
    ({}, lambda cfg, ckpt: []),
    ({"model": weights(float(torch.nextafter(torch.tensor(3.0), torch.tensor(4.0))))},
     lambda cfg, ckpt: [  # 3.0 plus one ulp
        f"model weights: file {cfg.paths.model} and checkpoint {ckpt} differ "
        "(first tensor encoder.embed.weight)"]),
    ({"log": [HISTORY[0], replace(HISTORY[1], loss=1.5)]}, lambda cfg, ckpt: [  # loss 1.25 -> 1.5
        f"{cfg.paths.train_log}: line 3, column loss: file {cfg.paths.train_log} has '1.5', "
        f"checkpoint {ckpt} has '1.25'"]),
    ({"counters": replace(COUNTERS, tokens=23)}, lambda cfg, ckpt: [
        f"{cfg.paths.train_metrics}: field tokens: file has 23, checkpoints and model file "
        "give 22"]),
], ids=["test_a_training_record_that_matches_its_checkpoint_gives_no_difference",
        "test_model_weights_differing_in_one_element_are_one_line_naming_both_files_and_the_tensor",
        "test_a_train_log_cell_differing_from_the_checkpoint_history_is_one_line_naming_it",
        "test_a_train_metrics_counter_differing_from_the_checkpoint_is_one_line_naming_it"])
def test_a_training_file_differing_from_its_checkpoint_is_one_line_naming_both_and_the_place(
        forged: dict, want: Callable[[Config, Path], list[str]], tmp_path: Path) -> None:
    cfg, ckpt = training_record(tmp_path, **forged)
    assert training_diffs(cfg, META, ckpt.parent) == want(cfg, ckpt)


def test_dev_decoding_figures_and_a_wer_selection_are_checked_against_the_checkpoint(
        tmp_path: Path) -> None:
    # issue 52: the training metrics' dev-decoding figures come from the history; under
    # select: best_dev_wer the model file must hold the step that selection chooses there
    decoded = [replace(HISTORY[0], dev_wer=0.5, dev_per=0.25, dev_exact_multi_ref=0.5),
               replace(HISTORY[1], dev_wer=0.5, dev_per=0.2, dev_exact_multi_ref=0.5)]
    counters = replace(COUNTERS, best_dev_wer=0.5, best_dev_wer_step=2, selected_dev_wer=0.5,
                       selected_dev_per=0.2)
    cfg, ckpt = training_record(tmp_path, log=decoded, counters=counters, history=decoded)
    assert training_diffs(cfg, META, ckpt.parent) == []
    tm = cfg.paths.train_metrics
    replace(counters, best_dev_wer_step=1).save(tm)  # step 1 has no dev NLL: not a candidate
    assert training_diffs(cfg, META, ckpt.parent) == [
        f"{tm}: field best_dev_wer_step: file has 1, checkpoint {ckpt} gives 2"]
    counters.save(tm)
    diffs = training_diffs(cfg, replace(META, select="best_dev_wer", selected_step=1), ckpt.parent)
    assert (f"model file meta: selected step 1, but checkpoint {ckpt} chooses step 2 "
            "under train.select best_dev_wer") in diffs


# --- the MLflow run against the pipeline record (pipeline/audit/mlflow_run.mlflow_diffs) --------
RUN_ID = "r1"
LOCK = "stages:\n  train:\n    outs:\n    - path: models/model.pt\n      md5: aa\n" \
       "  evaluate:\n    outs:\n    - path: reports/metrics.json\n      md5: bb\n"
PREDICTIONS = "id\thyp\n1\tK AE T\n2\tD AO G\n"
RECORD = RunRecord(
    uri="sqlite:///unused.db", experiment="seqcore-g2p", run_name="g2p-ab12cd34",
    params={"train.lr": 0.001, "model.family": "transformer", "decode.beam_size": 5},
    metrics={"wer": 0.25, "per": 0.125},
    steps=[("train.loss", 1, 2.5), ("train.loss", 2, 1.25), ("train.lr", 1, 0.5),
           ("train.lr", 2, 0.25)],
    tags={"contract.signature": "g2p|data:ab|v:1", "env.python": "3.11.9",
          "dvc.lock.sha256": sha(LOCK.encode())},
    texts={"predictions/test.tsv": PREDICTIONS, "dvc.lock": LOCK},
    images={"plots/loss.png": base64.b64encode(PLOT).decode()},
    datasets=[{"name": f"cmudict-{split}", "digest": f"{i}" * 32, "source_type": "dvc",
               "source": f'{{"path": "data/prepared/{split}.jsonl"}}',
               "profile": f'{{"rows": {100 + i}}}', "context": context}
              for i, (split, context) in enumerate((("train", "training"), ("test", "testing")))])


@dataclass
class LoggedRun:
    """What an MLflow store holds for RECORD, by hand: params as text, each step metric's last
    value beside the final metrics, each history, every tag and the artifact bytes."""

    params: dict[str, str] = field(default_factory=lambda: {
        "train.lr": "0.001", "model.family": "transformer", "decode.beam_size": "5"})
    metrics: dict[str, float] = field(default_factory=lambda: {
        "wer": 0.25, "per": 0.125, "train.loss": 1.25, "train.lr": 0.25})
    history: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: {
        "train.loss": [(1, 2.5), (2, 1.25)], "train.lr": [(1, 0.5), (2, 0.25)]})
    tags: dict[str, str] = field(default_factory=lambda: {
        "contract.signature": "g2p|data:ab|v:1", "env.python": "3.11.9",
        "dvc.lock.sha256": sha(LOCK.encode()), "mlflow.runName": "g2p-ab12cd34",
        "mlflow.user": "someone", "mlflow.source.type": "LOCAL"})
    artifacts: dict[str, bytes] = field(default_factory=lambda: {
        "predictions/test.tsv": PREDICTIONS.encode(), "dvc.lock": LOCK.encode(),
        "plots/loss.png": PLOT})
    datasets: list[dict[str, str]] = field(default_factory=lambda: [
        dict(d) for d in RECORD.datasets or []])


def audit_run(logged: LoggedRun, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The audit's lines comparing ``logged``, in a real sqlite store, with RECORD (RUN_ID
    for the random run id)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{shutil.copyfile(empty_mlflow_store(), tmp / 'mlflow.db')}"
    client = mlflow.MlflowClient(uri)
    exp = client.create_experiment("seqcore-g2p", (tmp / "mlartifacts").as_uri())
    tags = dict(logged.tags)
    run_id = client.create_run(exp, run_name=tags.pop("mlflow.runName")).info.run_id
    client.log_batch(run_id, params=[Param(k, v) for k, v in logged.params.items()],
                     tags=[RunTag(k, v) for k, v in tags.items()],
                     metrics=[Metric(k, v, 0, 0) for k, v in logged.metrics.items()
                              if k not in logged.history]
                     + [Metric(k, v, 0, step) for k, entries in logged.history.items()
                        for step, v in entries])
    write_tree(tmp / "logged", logged.artifacts)
    client.log_artifacts(run_id, str(tmp / "logged"))
    if logged.datasets:
        client.log_inputs(run_id, datasets=dataset_entities(logged.datasets))
    client.set_terminated(run_id)
    cfg = config_from_dict({"paths": {"mlflow_pending": str(tmp / "pending.json")},
                            "mlflow": {"tracking_uri": uri}})
    (tmp / "dvc.lock").write_text(LOCK)
    diffs = mlflow_diffs(uri, cfg, client.get_run(run_id), RECORD, read_yaml12(tmp / "dvc.lock"))
    return [d.replace(run_id, RUN_ID) for d in diffs]


def _set(mapping: str, key: str, value: object) -> Callable[[LoggedRun], None]:
    return lambda run: getattr(run, mapping).__setitem__(key, value)


def logged_lock(old: str, new: str) -> Callable[[LoggedRun], None]:
    """The run's dvc.lock artifact with ``old`` replaced by ``new``, and its sha256 tag."""
    def edit(run: LoggedRun) -> None:
        run.artifacts["dvc.lock"] = LOCK.replace(old, new).encode()
        run.tags["dvc.lock.sha256"] = sha(run.artifacts["dvc.lock"])
    return edit


FORGED_PREDICTIONS = "id\thyp\n1\tK AE T\n2\tD AO D\n".encode()
# Not compared: the environment, MLflow's own tags, the dvc experiment's name and an audit's
# verdict written later (`pipeline.audit --run`, issue 33).
IGNORED_TAGS = {"env.python": "3.11.10", "mlflow.user": "someone-else", "dvc.exp.name": "exp-1",
                "audit.status": "passed", "audit.checks": "mlflow run: ok"}
OLD_LOCK = "test_the_logged_dvc_lock_is_compared_on_the_stages_before_evaluate_only"
RUN_DIFFERENCES = [
    ("test_a_run_logged_as_recorded_gives_no_difference", lambda run: None, []),
    ("param", _set("params", "train.lr", "0.002"),
     ["run r1 param: train.lr: pipeline record has '0.001', mlflow run has '0.002'"]),
    ("extra-param", _set("params", "train.seed", "1"),
     ["run r1 param train.seed: mlflow run has '1', not in the current contract"]),
    ("metric", _set("metrics", "per", 0.126),
     ["run r1 metric: per: pipeline record has 0.125, mlflow run has 0.126"]),
    ("extra-metric", _set("metrics", "bleu", 0.5),
     ["run r1 metric bleu: mlflow run has 0.5, the pipeline logs no such metric"]),
    ("step-history", _set("history", "train.loss", [(1, 2.5), (2, 1.5)]),
     ["run r1 step metric train.loss: entry 2 (step, value): mlflow run has (2, 1.5), "
      "train log has (2, 1.25) (2 vs 2 entries)"]),
    ("tag", _set("tags", "contract.signature", "g2p|data:ac|v:1"),
     ["run r1 tag contract.signature: mlflow run has 'g2p|data:ac|v:1', pipeline record has "
      "'g2p|data:ab|v:1'"]),
    ("run-name", _set("tags", "mlflow.runName", "g2p-ab12cd35"),
     ["run r1 tag mlflow.runName: mlflow run has 'g2p-ab12cd35', pipeline record has "
      "'g2p-ab12cd34'"]),
    ("tsv-artifact", _set("artifacts", "predictions/test.tsv", FORGED_PREDICTIONS),
     ['run r1 artifact predictions/test.tsv: line 3: column hyp: mlflow run has "D AO D", '
      'file has "D AO G"']),
    ("png-artifact", _set("artifacts", "plots/loss.png", PLOT_FORGED),
     [f"run r1 artifact plots/loss.png: bytes differ from offset 19: mlflow run sha256 "
      f"{sha(PLOT_FORGED)} ({len(PLOT_FORGED)} bytes), file sha256 {sha(PLOT)} "
      f"({len(PLOT)} bytes)"]),
    ("extra-artifact", _set("artifacts", "notes.txt", b"x\n"),
     ["run r1 artifact notes.txt: mlflow run has it, the pipeline logs no such file"]),
    # issue 29: the Datasets column, tied to DVC's md5 of each prepared split
    ("dataset-digest", lambda run: run.datasets[0].__setitem__("digest", "f" * 32),
     [f"run r1 dataset cmudict-train: digest: mlflow run has '{'f' * 32}', pipeline record "
      f"has '{'0' * 32}'"]),
    ("dataset-missing", lambda run: run.datasets.pop(),
     [f"run r1 dataset cmudict-test: pipeline record has it (digest {'1' * 32}), mlflow run "
      "has nothing"]),
    ("dataset-context", lambda run: run.datasets[1].__setitem__("context", "training"),
     ["run r1 dataset cmudict-test: context: mlflow run has 'training', pipeline record has "
      "'testing'"]),
    ("test_environment_and_mlflow_own_tags_are_ignored_and_a_tag_beside_them_is_not",
     lambda run: run.tags.update(IGNORED_TAGS), []),
    ("a-tag-beside-ignored-tags",
     lambda run: run.tags.update(IGNORED_TAGS | {"contract.signature": "g2p|data:ab|v:2"}),
     ["run r1 tag contract.signature: mlflow run has 'g2p|data:ab|v:2', pipeline record has "
      "'g2p|data:ab|v:1'"]),
    # the run logs (and tags the sha256 of) dvc.lock as evaluate saw it, before its own entry:
    # evaluate's entry is not compared, an upstream stage's is
    (f"{OLD_LOCK}-evaluate-entry", logged_lock("md5: bb", "md5: bc"), []),
    (f"{OLD_LOCK}-upstream-entry", logged_lock("md5: aa", "md5: ab"),
     ["run r1 artifact dvc.lock: its stages before evaluate differ from the workspace "
      "dvc.lock's"]),
    ("test_a_dvc_lock_tag_that_is_not_the_logged_lock_hash_is_one_line",
     _set("tags", "dvc.lock.sha256", sha(b"another lock")),
     [f"run r1 tag dvc.lock.sha256: mlflow run has {sha(b'another lock')!r}, the run's "
      f"dvc.lock artifact has sha256 {sha(LOCK.encode())!r}"]),
]


@pytest.mark.parametrize(("edit", "want"), [row[1:] for row in RUN_DIFFERENCES],
                         ids=[row[0] for row in RUN_DIFFERENCES])
def test_each_compared_value_differing_in_the_mlflow_run_is_one_line_naming_place_and_sides(
        edit: Callable[[LoggedRun], None], want: list[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    logged = LoggedRun()
    edit(logged)
    assert audit_run(logged, tmp_path, monkeypatch) == want


def test_who_made_the_run_is_not_compared_with_who_audits_it_but_must_be_there() -> None:
    # The audit rebuilds the record as the auditor (mlflow.user is the auditor's login).
    record = replace(RECORD, tags=RECORD.tags | {"mlflow.user": "alice"})
    logged = {**record.tags, "mlflow.runName": record.run_name, "mlflow.user": "root"}
    assert tag_diffs(record, logged, sha(LOCK.encode())) == []
    del logged["mlflow.user"]
    assert tag_diffs(record, logged, sha(LOCK.encode())) == [
        "tag mlflow.user: pipeline record has 'alice', mlflow run has nothing"]


def test_the_audit_names_the_code_that_audits_and_whether_the_results_code_differs(
        tmp_path: Path) -> None:
    # issue 33: audit a colleague's result with your own checkout (--root) and be told so
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for root in (mine, theirs):
        write_tree(root, {"seqcore/a.py": b"x = 1\n", "pipeline/b.py": b"y = 2\n"})
    assert code_line(mine, mine).endswith("audits the result in this checkout: the same code")
    assert code_line(mine, theirs).endswith(f"the result in {theirs}: the same code")
    write_tree(theirs, {"seqcore/a.py": b"x = 2\n", "pipeline/c.py": b""})
    line = code_line(mine, theirs)
    assert line.endswith("its code differs in 2 file(s): pipeline/c.py, seqcore/a.py"), line
    assert f"code at {mine} (commit none)" in line  # not a git checkout


def test_numbers_compare_equal_only_within_the_stated_tolerance_and_nan_only_to_nan() -> None:
    sides = ("file", "run")
    assert number_diffs("m", sides, {"a": math.nan}, {"a": math.nan}) == []
    assert number_diffs("m", sides, {"a": math.nan}, {"a": 1.0}) == [
        "m: a: file has nan, run has 1.0"]
    assert number_diffs("m", sides, {"a": 1.0}, {"a": math.nan}) != []
    assert number_diffs("m", sides, {"a": 0.0}, {"a": 1e-13}) == []  # absolute 1e-12 near 0
    assert number_diffs("m", sides, {"a": 1.0}, {"a": 1.05}, rel_tol=0.1) == []
    assert number_diffs("m", sides, {"a": 1.0}, {"a": 1.05}) != []
    assert number_diffs("m", sides, {"a": 1.0}, {}) == ["m: a: file has 1.0, run has nothing"]


def test_rebuilt_outs_name_the_first_divergent_stage_and_a_missing_out() -> None:
    lock = {"stages": {"a": {"outs": [{"path": "x", "md5": "1"}]},
                       "b": {"outs": [{"path": "y", "md5": "2"}, {"path": "z", "md5": "3"}]}}}
    assert stage_out_diffs(["a", "b"], lock, lock) == []
    rebuilt = {"stages": {"a": {"outs": [{"path": "x", "md5": "1"}]},
                          "b": {"outs": [{"path": "y", "md5": "9"}]}}}
    assert stage_out_diffs(["a", "b"], lock, rebuilt) == [
        "first divergent stage: b", "b: y: rebuilt md5 9, dvc.lock records 2",
        "b: z: rebuilt md5 missing, dvc.lock records 3"]
    assert stage_out_diffs(["a", "b"], lock, {})[0] == "first divergent stage: a"
    # a stage without outs, or one the lock does not hold, has nothing to compare
    assert stage_out_diffs(["v", "a"], {"stages": {"v": {"cmd": "x"}, **lock["stages"]}},
                           lock) == []
    assert stage_out_diffs(["a"], {}, lock) == []


def test_lock_params_are_looked_up_by_dotted_key_and_a_missing_one_differs() -> None:
    params = {"train": {"lr": 0.5, "opt": {"beta": 0.9}}}
    assert lookup(params, "train.opt.beta") == 0.9
    assert lookup(params, "train.lr.x") is None and lookup(params, "model") is None
    lock = {"stages": {"train": {"params": {"params.yaml": {"train.lr": 0.5, "train.steps": 3}}}}}
    assert lock_param_diffs(lock, params) == [
        "train: train.steps: params.yaml has None, dvc.lock records 3 (changed without "
        "`dvc repro`)"]
    # a lock without stages, a stage without params or without params.yaml: nothing to compare
    assert lock_param_diffs({}, params) == []
    assert lock_param_diffs({"stages": {"a": {}, "b": {"params": {}}}}, params) == []


def test_the_audit_report_fails_on_a_mismatch_or_a_check_not_run_and_only_warns_else() -> None:
    report = AuditReport(only=("a", "b", "c", "d"))
    report.add("a", [])
    report.warn("b", ["env differs"])
    report.seconds["a"] = 1.25
    assert report.ok and report.wants("a") and not report.wants("e")
    assert report.verdict() == "PASSED with warnings (b) [only: a, b, c, d]"
    report.add("c", ["x: differs\n--- a\n+++ b"])
    report.not_run("d", "no model")
    report.add("d", [])  # a check not run stays NOT RUN
    assert report.status == {"a": OK, "b": WARNING, "c": MISMATCH, "d": NOT_RUN}
    assert report.failed() == ["c", "d"] and not report.ok
    assert report.render().splitlines() == [
        "ok       a (1.2 s)", "WARNING  b", "         - env differs", "MISMATCH c",
        "         - x: differs", "           --- a", "           +++ b", "NOT RUN  d",
        "         - no model",
        "audit: FAILED (c, d) with warnings (b) [only: a, b, c, d]"]
    strict = AuditReport()
    strict.warn("e", ["env differs"], strict=True)
    assert strict.failed() == ["e"] and strict.verdict() == "FAILED (e)"
    two = AuditReport()
    two.warn("e", ["x"])
    two.warn("f", ["y"])
    assert two.verdict() == "PASSED with warnings (e, f)"


def test_every_place_must_hold_the_first_places_value() -> None:
    assert same_value_diffs("sig", {}) == []
    assert same_value_diffs("sig", {"lock": "a", "model": "a", "run": "b"}) == [
        "sig: run has 'b' but lock has 'a'"]


def test_each_tokenizer_model_must_hash_to_its_contract_and_a_missing_one_is_named(
        tmp_path: Path) -> None:
    (tmp_path / "src.model").write_bytes(b"src")
    hashes = {tmp_path / "src.model": CONTRACT.src.sha256}
    assert tokenizer_file_diffs(tmp_path, CONTRACT, hashes.__getitem__) == [
        f"tokenizer tgt: file {tmp_path / 'tgt.model'} has sha256 missing, tokenizer contract "
        f"records {CONTRACT.tgt.sha256}"]
    (tmp_path / "tgt.model").write_bytes(b"tgt")
    hashes[tmp_path / "tgt.model"] = "f" * 64
    assert tokenizer_file_diffs(tmp_path, CONTRACT, hashes.__getitem__) == [
        f"tokenizer tgt: file {tmp_path / 'tgt.model'} has sha256 {'f' * 64}, tokenizer "
        f"contract records {CONTRACT.tgt.sha256}"]
