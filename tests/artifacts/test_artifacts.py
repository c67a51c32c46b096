"""Typed artifacts (seqcore/artifacts): each file between stages is read and written by one
class; what it writes it reads back equal, the bytes are the stages' stable JSON, and a file it
cannot read is refused in one line naming the file. (The import rule: tests/test_layers.py.)"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from seqcore.artifacts.base import ArtifactError, read_json
from seqcore.artifacts.coverage import Coverage, SideVocab, SplitCoverage, UnkStats
from seqcore.artifacts.manifests import (
    EncodedManifest, PrepareCounts, PreparedManifest, RawSource, SplitCounts)
from seqcore.artifacts.model_file import LMInfo, ModelFile, ModelInfo, ModelMeta
from seqcore.artifacts.predictions import (
    BaselineSettings, PredictionRow, Predictions, PredictionsHeader)
from seqcore.artifacts.reports import Headline, Metrics, Results
from seqcore.artifacts.run_record import RunRecord
from seqcore.artifacts.tokenizer_contract import (
    RoundTrip, SideContract, TextNormalization, TokenizerContract)
from seqcore.artifacts.train_log import LOG_COLUMNS, StepLog, TrainLog
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.blobs import UnusableCheckpoint, save_blob
from seqcore.config import BaselineConfig, DecodeConfig, ModelConfig, TransformerConfig
from seqcore.contract import SpecialIds
from seqcore.errors import UnreadableFile
from seqcore.jsonl import read_jsonl
from seqcore.models import build_model
from seqcore.models.rnnlm import RNNLMShape
from tests.factories import REPO

CONTRACT = TokenizerContract(
    SpecialIds(pad=0, unk=1, bos=2, eos=3), ("<pad>", "<unk>", "<s>", "</s>"),
    TextNormalization("nfkc", True), "d" * 64,
    SideContract("src.model", "a" * 64, "char", 33, 40, 1.0),
    SideContract("tgt.model", "b" * 64, "word", 40, 44, 1.0, auto_chosen="word: 40 symbols"),
    {"src": RoundTrip(3, 0, {}, []), "tgt": RoundTrip(3, 1, {"other": 1},
                                                      [{"where": "f:1", "text": "x"}])},
    "task:g2p|fmt:1")
META = ModelMeta("task:g2p|fmt:1", 6, "best_dev", 3, 3, 1.25,
                 {"train.threads": 1, "tokenizer.src.sha256": "a" * 64,
                  "tokenizer.tgt.sha256": "b" * 64})
ROW = PredictionRow("w1", "g", "cat", "K AE T", "K AE T", [5, 6, 7], ["K", "AE", "T"], -0.5,
                    -0.2, 3, True, [{"hypothesis": "K AH T", "tokens": [5, 8, 7]}])
LM_SHAPE = RNNLMShape("gru", 7, 4, 8, 1, 0.0, 0)


def saved(artifact: Any, path: Path) -> dict:
    """``artifact`` saved at ``path``; the JSON written, checked to be the stages' stable form."""
    artifact.save(path)
    data = json.loads(path.read_text())
    assert path.read_text() == json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return data


def test_tokenizer_contract_reads_back_what_it_writes_in_the_stable_json_form(
        tmp_path: Path) -> None:
    data = saved(CONTRACT, tmp_path / "contract.json")
    assert TokenizerContract.load(tmp_path / "contract.json") == CONTRACT
    assert data["format"] == 2 and "casefold_target" not in data["normalization"]
    assert "auto_chosen" not in data["src"] and data["tgt"]["auto_chosen"]


def test_model_file_reads_back_weights_build_info_and_meta(tmp_path: Path) -> None:
    model = ModelConfig(transformer=TransformerConfig(d_model=8, n_heads=2, enc_layers=1,
                                                      dec_layers=1, d_ff=16))
    info = ModelInfo(model, 12, 12, 0, 16)
    fresh = build_model(info.model, info.src_vocab, info.tgt_vocab, info.pad_id, info.max_len)
    weights = {k: torch.full_like(v, 0.5) for k, v in fresh.state_dict().items()}
    sha = ModelFile(weights, META, info).save(tmp_path / "model.pt")
    assert (tmp_path / "model.pt.sha256").read_text().strip() == sha
    back = ModelFile.load(tmp_path / "model.pt")
    assert (back.meta, back.info, back.lm) == (META, info, None)
    assert all(torch.equal(back.weights[k], v) for k, v in weights.items())
    assert all(torch.equal(p, torch.full_like(p, 0.5)) for p in back.build().parameters())
    assert back.meta.tokenizer_sha256() == {"src": "a" * 64, "tgt": "b" * 64}


def test_lm_model_file_reads_back_its_shape_and_vocabulary(tmp_path: Path) -> None:
    lm = LMInfo(LM_SHAPE, ["a", "b", "c"])
    ModelFile({"w": torch.ones(2)}, META, lm=lm).save(tmp_path / "lm.pt")
    back = ModelFile.load(tmp_path / "lm.pt")
    assert (back.lm, back.info, back.meta) == (lm, None, META)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_model_file_with_non_finite_weights_is_refused_in_one_line(
        tmp_path: Path, bad: float) -> None:
    # its sha256 sidecar matches: the file is intact, the weights are not (a diverged run)
    weights = {"a": torch.ones(3), "b.weight": torch.tensor([1.0, bad]), "steps": torch.tensor([3])}
    ModelFile(weights, META, lm=LMInfo(LM_SHAPE, ["a"])).save(tmp_path / "model.pt")
    with pytest.raises(UnusableCheckpoint) as refused:
        ModelFile.load(tmp_path / "model.pt")
    assert str(refused.value) == (f"{tmp_path / 'model.pt'}: weight b.weight holds NaN or "
                                  "infinity; the model is unusable: retrain it (dvc repro -f "
                                  "train)")


def test_predictions_and_their_header_read_back_what_they_write(tmp_path: Path) -> None:
    pred = tmp_path / "test.jsonl"
    Predictions([ROW, ROW]).save(pred)
    assert Predictions.load(pred).rows == [ROW, ROW]
    for header in (PredictionsHeader(DecodeConfig(strategy="greedy", banned_tokens=(7,)),
                                     "c" * 64, 2, "task:g2p|fmt:1", {"device_kind": "cpu"},
                                     {"src": "a", "tgt": "b"}),
                   PredictionsHeader(BaselineSettings.of(BaselineConfig(), "phonetisaurus", 500),
                                     "f" * 64, 2, "baseline:phonetisaurus")):
        header.save(pred)
        assert PredictionsHeader.load(pred) == header
    lm = PredictionsHeader(DecodeConfig(), "c" * 64, 0, task="lm", note="nothing")
    lm.save(pred)
    written = json.loads(pred.with_suffix(".header.json").read_text())
    assert set(written) == {"schema_version", "decode", "model_sha256", "rows", "task", "note"}
    assert written["schema_version"] == 1
    assert PredictionsHeader.load(pred) == lm


def test_a_header_written_before_tuned_on_existed_reads_as_settings_set_by_hand(
        tmp_path: Path) -> None:
    # decode.tuned_on (issue 52) came after headers were written: a header without it meant
    # settings chosen by hand, and still reads (other missing keys do not)
    pred, path = tmp_path / "test.jsonl", tmp_path / "test.header.json"
    PredictionsHeader(DecodeConfig(tuned_on="dev"), "c" * 64, 0, task="lm").save(pred)
    data = json.loads(path.read_text())
    assert data["decode"].pop("tuned_on") == "dev"
    path.write_text(json.dumps(data))
    assert PredictionsHeader.load(pred).decode == DecodeConfig(tuned_on="none")


def test_reports_read_back_what_they_write(tmp_path: Path) -> None:
    metrics = Metrics({"examples": 24, "test_sequences": 24, "exact_match": 0.25,
                       "hypothesis_unk": {"rate": 0.0}})
    assert saved(metrics, tmp_path / "metrics.json") == metrics.values
    assert Metrics.load(tmp_path / "metrics.json") == metrics
    assert metrics.count("examples") == 24 and metrics.count("missing") is None
    results = Results({"signature": "task:g2p|fmt:1", "checkpoints": "checkpoints/abc"})
    saved(results, tmp_path / "results.json")
    back = Results.load(tmp_path / "results.json")
    assert back == results and (back.signature, back.checkpoints) == (
        "task:g2p|fmt:1", "checkpoints/abc")
    for head, keys in ((Headline(3.5, 0.25, 0.125), ["per", "ppl", "wer"]),
                       (Headline(3.5, error_rates=False), ["ppl"])):
        assert list(saved(head, tmp_path / "headline.json")) == keys
        assert Headline.load(tmp_path / "headline.json") == head


def record(images: dict[str, str] | None) -> RunRecord:
    return RunRecord("sqlite:///x.db", "exp", "run", {"a.b": [1, 2]}, {"wer": 0.5},
                     [("train.loss", 1, 2.5), ("train.loss", 2, 2.0)], {"t": "v"},
                     {"params.yaml": "task: g2p\n"}, images)


def test_run_records_read_back_what_they_write_and_keep_their_order(tmp_path: Path) -> None:
    path = tmp_path / "pending.json"
    records = [record({"plots/a.png": "AAAA"}), record(None)]
    RunRecord.save_all(path, records)
    assert RunRecord.load_all(path) == records
    assert "images" not in json.loads(path.read_text())[1]


COVERAGE = Coverage(
    {"train": SplitCoverage(UnkStats(9, 0, 40, 0), UnkStats(9, 1, 30, 2), 10, 9, 1),
     "test": SplitCoverage(UnkStats(0, 0, 0, 0), UnkStats(0, 0, 0, 0), 0, 0, 0)},
    {"src": SideVocab("char", 33), "tgt": SideVocab("word", 43)})
PREPARED = PreparedManifest(
    RawSource("data/raw/cmudict.dict", "d" * 64, "cmudict", "data/raw/cmudict.dict"),
    {"source": "cmudict", "max_pairs": 400}, {"train": "a" * 64, "dev": "b" * 64},
    "reports/data_rejects.tsv",
    PrepareCounts(410, 400, 10, {"train": 360, "dev": 40}, {"train": 300, "dev": 35},
                  {"dropped": {"empty target": 1}, "altered": {}}, {"sources_with_variants": 2}))
ENCODED = EncodedManifest(
    {"train": SplitCounts(360, 358, 1, {"dropped": {"source too long": 2}})},
    {"dropped": {"source too long": 2}}, "reports/length_rejects.tsv", 32, 32, "drop")
TRAINED = TrainMetrics(6, 1200, 0, 3, 1.25, 2.5, 3)
LM_TRAINED = TrainMetrics(4, 80, 0, 0, math.inf, 3.0, 4,
                          report={"lm": {"dev_ppl_carried": 9.5, "test_ppl_carried": math.nan}})


@pytest.mark.parametrize("artifact", [COVERAGE, PREPARED, ENCODED, TRAINED],
                         ids=["coverage", "prepared-manifest", "encoded-manifest",
                              "train-metrics"])
def test_data_and_training_records_read_back_what_they_write_in_the_stable_json_form(
        artifact: Coverage | PreparedManifest | EncodedManifest | TrainMetrics,
        tmp_path: Path) -> None:
    # the manifests carry their version; the files DVC shows as metrics do not (its tables
    # would list the field beside the figures)
    assert saved(artifact, tmp_path / "record.json").get("schema_version") == (
        1 if isinstance(artifact, (PreparedManifest, EncodedManifest)) else None)
    assert type(artifact).load(tmp_path / "record.json") == artifact


Write = Callable[[Path], object]
Load = Callable[[Path], object]


def text(content: str) -> Write:
    return lambda path: path.write_text(content)


def header(edit: Callable[[dict], dict]) -> Write:
    """Writes an lm predictions header at ``path`` (test.header.json), then ``edit`` of it."""
    def write(path: Path) -> None:
        PredictionsHeader(DecodeConfig(), "c" * 64, 0, task="lm").save(path.parent / "test.jsonl")
        path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    return write


def load_header(path: Path) -> PredictionsHeader:
    return PredictionsHeader.load(path.parent / "test.jsonl")


@pytest.mark.parametrize(("save", "load"), [
    (PREPARED.save, PreparedManifest.load), (ENCODED.save, EncodedManifest.load),
    (Results({"signature": "task:g2p|fmt:1"}).save, Results.load),
    (header(lambda d: d), load_header)],
    ids=["prepared-manifest", "encoded-manifest", "results", "predictions-header"])
def test_a_file_written_before_it_carried_its_version_reads_as_version_1(
        save: Write, load: Load, tmp_path: Path) -> None:
    # the outputs of locks before 2026-12-05 have no schema_version field: version 1
    path = tmp_path / "test.header.json"
    save(path)
    written = load(path)
    data = json.loads(path.read_text())
    assert data.pop("schema_version") == 1
    path.write_text(json.dumps(data))
    assert load(path) == written


def test_coverage_and_manifests_keep_their_file_layout(tmp_path: Path) -> None:
    data = saved(COVERAGE, tmp_path / "coverage.json")
    assert set(data) == {"train", "test", "tokenizer"}
    assert data["train"]["tgt"] == {"rows": 9, "rows_with_unk": 1, "tokens": 30,
                                    "unk_tokens": 2, "unk_rate": round(2 / 30, 6)}
    assert data["train"]["drop_rate"] == 0.1 and data["test"]["src"]["unk_rate"] == 0.0
    data = saved(PREPARED, tmp_path / "prepared.json")
    assert data["raw"]["label"] == "data/raw/cmudict.dict"
    assert data["rows"] == {"train": 360, "dev": 40} and data["cut_by_max_pairs"] == 10
    assert saved(ENCODED, tmp_path / "encoded.json")["counts"]["train"]["kept"] == 358


def test_undefined_training_figures_are_written_as_null_with_their_reason_and_kept_on_rewrite(
        tmp_path: Path) -> None:
    path = tmp_path / "train_metrics.json"
    data = saved(LM_TRAINED, path)
    assert data["best_dev_nll"] is None and "no dev evaluation" in data["best_dev_nll_null_reason"]
    assert data["lm"]["test_ppl_carried"] is None and data["lm"]["test_ppl_carried_null_reason"]
    back = TrainMetrics.load(path)
    assert back.best_dev_nll is None and back.report["lm"]["dev_ppl_carried"] == 9.5
    before = path.read_bytes()
    back.save(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize(("name", "cls"), [
    pytest.param("coverage.json", Coverage, id="coverage.json"),
    pytest.param("train_metrics.json", TrainMetrics, id="train_metrics.json"),
    pytest.param("train_log.csv", TrainLog,
                 id="test_committed_train_log_is_rewritten_to_the_same_bytes")])
def test_committed_default_run_records_are_rewritten_to_the_same_bytes(
        name: str, cls: type, tmp_path: Path) -> None:
    committed = REPO / "reports" / name
    back = cls.load(committed)
    if cls is TrainLog:
        assert back.rows[-1].step == len(back.rows)
    back.save(tmp_path / name)
    assert (tmp_path / name).read_bytes() == committed.read_bytes()


# -- the training log (reports/train_log.csv) ---------------------------------------------------

STEPS = (StepLog(1, 0, 7.5e-06, 8.95240238734654, 1792, 6.378137588500977, 0, math.nan, 0.0),
         StepLog(2, 0, 1.5e-05, 2.5, 2048, math.inf, 1, 1.0 / 3, 0.25),
         StepLog(3, 1, 2.25e-05, 2.0, 1536, 0.5, 1, math.nan, 1e-20))


def csv_writer_bytes(rows: tuple[StepLog, ...]) -> bytes:
    """What the train stage wrote before the artifact: csv.writer of each StepLog's row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(LOG_COLUMNS)
    writer.writerows(r.row() for r in rows)
    return out.getvalue().encode()


def test_train_log_writes_the_bytes_of_csv_writer_and_reads_them_back_nan_cells_included(
        tmp_path: Path) -> None:
    path = tmp_path / "train_log.csv"
    with TrainLog.writer(path, STEPS[:1]) as out:  # as the train stage: resumed rows, then new
        for entry in STEPS[1:]:
            out.append(entry)
    assert path.read_bytes() == csv_writer_bytes(STEPS)
    # dev NLL, the scheduled-sampling probability, then the dev decoding's three (issue 52)
    assert path.read_text().splitlines()[1].endswith(",nan,0.0,nan,nan,nan")
    back = TrainLog.load(path)
    assert [r.row()[:7] + r.row()[8:9] for r in back.rows] == [
        r.row()[:7] + r.row()[8:9] for r in STEPS]
    assert all(math.isnan(v) for r in back.rows for v in r.row()[9:])
    assert math.isnan(back.rows[0].dev_nll) and back.rows[1].dev_nll == 1.0 / 3
    assert [type(v) for v in back.rows[0].row()] == [type(v) for v in STEPS[0].row()]
    assert back.cells() == TrainLog(STEPS).cells()  # the text the audit compares
    back.save(tmp_path / "again.csv")
    assert (tmp_path / "again.csv").read_bytes() == path.read_bytes()


# -- a file this code cannot read: refused in one line naming it --------------------------------

def decode(edit: Callable[[dict], dict]) -> Write:
    return header(lambda d: d | {"decode": edit(d["decode"])})


def refusal(old_id: str, name: str, write: Write, load: Load, match: str) -> object:
    return pytest.param(name, write, load, match, id=old_id)


RECORDS = (Coverage, PreparedManifest, EncodedManifest, TrainMetrics)
OLD_REPORT = "test_report_of_another_version_is_refused_in_one_line_naming_the_file"
OLD_RECORD = ("test_data_or_training_record_of_another_version_is_refused_in_one_line_naming_"
              "the_file")
ANOTHER_VERSION = [
    refusal("test_tokenizer_contract_of_another_format_is_refused_in_one_line_naming_the_file",
            "contract.json", text(json.dumps(CONTRACT.as_json() | {"format": 3})),
            TokenizerContract.load, "schema version 3"),
    refusal("test_model_file_of_another_schema_is_refused_in_one_line_naming_the_file",
            "model.pt", lambda path: save_blob(path, {"schema": 1, "model": {}, "meta": {}}),
            ModelFile.load, "schema version 1"),
    refusal("test_predictions_header_of_another_version_is_refused_in_one_line_naming_the_file",
            "test.header.json", text(json.dumps({"schema_version": 2, "decode": {},
                                                 "model_sha256": "c", "rows": 0})),
            load_header, "schema version 2"),
    *[refusal(f"{OLD_REPORT}-{cls.__name__}", "report.json",
              text(json.dumps({"schema_version": 9, "ppl": 1.0})), cls.load, "schema version 9")
      for cls in (Metrics, Results, Headline)],
    refusal("test_run_record_of_another_version_is_refused_in_one_line_naming_the_file",
            "pending.json", text(json.dumps([record(None).as_json() | {"schema_version": 2}])),
            RunRecord.load_all, "schema version 2"),
    *[refusal(f"{OLD_RECORD}-{cls.__name__}", "record.json",
              text(json.dumps({"schema_version": 2, "steps": 1})), cls.load, "schema version 2")
      for cls in RECORDS],
]


OLD_DECODE = "test_a_header_whose_decode_settings_this_code_cannot_read_is_refused_in_one_line"
OLD_MISSING = ("test_data_or_training_record_with_a_field_missing_is_refused_in_one_line_naming_"
               "the_file")
OLD_LOG = ("test_train_log_with_a_column_missing_or_a_bad_cell_is_refused_in_one_line_naming_the_"
           "file")
LOG_HEADER = ",".join(LOG_COLUMNS)
STEPS_CSV = csv_writer_bytes(STEPS).decode().splitlines()
NOT_A_HEADER = "not a predictions header file .*"
# The decode settings are typed: a header whose settings lack a field, carry another, or hold
# a value the decode section does not allow is refused, not signed with a default in its place.
FIELD_WRONG = [
    refusal(f"{OLD_DECODE}-missing", "test.header.json",
            decode(lambda d: {k: v for k, v in d.items() if k != "rescore"}), load_header,
            NOT_A_HEADER + "decode.rescore: missing"),
    refusal(f"{OLD_DECODE}-unknown", "test.header.json", decode(lambda d: d | {"beam_width": 5}),
            load_header, NOT_A_HEADER + "decode.beam_width"),
    refusal(f"{OLD_DECODE}-bad choice", "test.header.json",
            decode(lambda d: d | {"strategy": "sampling"}), load_header,
            NOT_A_HEADER + "decode.strategy"),
    refusal(f"{OLD_DECODE}-wrong type", "test.header.json",
            decode(lambda d: d | {"max_len": "32"}), load_header, NOT_A_HEADER + "decode.max_len"),
    # the producing environment left the header in issue 34 (the MLflow run holds it)
    refusal("test_predictions_header_with_a_field_this_code_does_not_write_is_refused_in_one_line",
            "test.header.json", header(lambda d: d | {"environment": {"os": "x"}}), load_header,
            NOT_A_HEADER + "environment"),
    *[refusal(f"{OLD_MISSING}-{cls.__name__}", "record.json",
              text(json.dumps({"steps": 1, "tokenizer": {}, "counts": {}})), cls.load, "not a")
      for cls in RECORDS],
    *[refusal(f"{OLD_LOG}-{old}", "train_log.csv", text(content), TrainLog.load, re.escape(says))
      for old, content, says in [
          ("missing-column", "step,epoch,lr,loss,tokens,grad_norm,skipped,ss_prob\n"
           "1,0,0.1,2.0,10,1.0,0,0.0\n", "missing ['dev_nll']"),
          ("unknown-column", LOG_HEADER + ",wall\n", "unknown ['wall']"),
          ("short-row", LOG_HEADER + "\n1,0,0.1,2.0,10,1.0,0,nan\n",
           "line 2, column ss_prob: '' is not a number"),
          ("fractional-step", LOG_HEADER + "\n1.5,0,0.1,2,10,1,0,nan,0\n",
           "line 2, column step: '1.5' is not an integer"),
          ("empty", "", "missing ['step'")]],
    # clock time never enters a DVC-tracked file; the column logs before issue 12 carried is
    # an unknown one now (issue 26: no reader needs the old format)
    refusal("test_a_train_log_with_a_wall_clock_column_is_refused_in_one_line", "train_log.csv",
            text("\n".join([STEPS_CSV[0] + ",tokens_per_s", STEPS_CSV[1] + ",812.5"]) + "\n"),
            TrainLog.load,
            r"train_log.csv: not a training log this code reads .*unknown \['tokens_per_s'\]"),
]


@pytest.mark.parametrize(("name", "write", "load", "match"), ANOTHER_VERSION + FIELD_WRONG)
def test_a_file_of_another_schema_version_or_with_a_bad_field_is_refused_in_one_line_naming_it(
        name: str, write: Write, load: Load, match: str, tmp_path: Path) -> None:
    path = tmp_path / name
    write(path)
    with pytest.raises(ArtifactError, match=match) as err:
        load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_cut_or_undecodable_file_is_one_line_naming_it_and_its_line(tmp_path: Path) -> None:
    # issue 54: json's and the codec's errors name no file; the readers do
    (tmp_path / "empty.json").write_bytes(b"")
    with pytest.raises(UnreadableFile, match=r"empty\.json: not valid JSON") as err:
        read_json(tmp_path / "empty.json")
    assert "\n" not in str(err.value) and "dvc repro" in str(err.value)
    (tmp_path / "rows.jsonl").write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": 3')
    with pytest.raises(UnreadableFile, match=r"rows\.jsonl: line 3: not valid JSON"):
        read_jsonl(tmp_path / "rows.jsonl", dict)
    (tmp_path / "bytes.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(UnreadableFile, match=r"bytes\.json: not UTF-8 \(byte 0xff at offset 0\)"):
        read_json(tmp_path / "bytes.json")
