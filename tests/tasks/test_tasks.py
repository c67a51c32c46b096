"""Tasks behind one interface (issue 11, STYLE rule 15): stages ask the task, never its name;
the lm task honours the parallel tasks' data policy and signs with their fields."""
from __future__ import annotations

import importlib
import inspect
import re
import typing
from pathlib import Path

import pytest

from seqcore.config import Config, config_from_dict
from seqcore.signature import contract_fields
from seqcore.signature_format import parse_signature
from seqcore.tasks import PIECE_STAGES, TASKS, Task, TaskError, get_task
from seqcore.tasks.lm.corpus import lm_corpus
from seqcore.tasks.lm.documents import Document
from seqcore.tasks.lm.setup import lm_setup
from tests.factories import CONTRACT, REPO, written
from tests.pipeline_helpers import import_closure

LM = {"task": "lm", "model": {"family": "gru", "rnn": {"embed_dim": 4, "hidden": 8}},
      "train": {"batch_size": 2, "bptt_len": 5, "threads": 1}}


def lm_config(tmp_path: Path, text: bytes, **data: object) -> Config:
    """An lm config reading ``text`` as the user's text file."""
    path = written(tmp_path / "corpus.txt", text)
    return config_from_dict(LM | {"data": {"source": "text", "path": str(path), **data},
                                  "paths": {"raw": f"data/raw/{path.name}"}})


def test_an_unknown_task_name_is_one_line_naming_the_known_tasks() -> None:
    with pytest.raises(TaskError) as err:
        get_task("nmt")
    message = str(err.value)
    assert "\n" not in message and "'nmt'" in message
    assert all(name in message for name in ("g2p", "lm", "parallel"))


def test_every_task_value_of_the_config_has_a_task() -> None:
    names = typing.get_args(typing.get_type_hints(Config)["task"])
    assert sorted(names) == sorted(TASKS)
    assert all(task.name == name for name, task in TASKS.items())


#: stage -> the method of seqcore.tasks.Task that asks for its piece (named as in the module).
PIECES = {"prepare": "scored_splits", "tokenizer": "coverage_problems", "baseline": "baseline",
          "train": "training_setup", "decode": "decode", "evaluate": "evaluate"}
#: The audit's piece (no stage): method of Task -> function of ``<package>.audit``.
AUDIT_PIECES = {"audit_contract": "contract_diffs", "audit_counts": "count_diffs"}


@pytest.mark.parametrize(("module", "method", "function"), [
    *(pytest.param(stage, PIECES[stage], PIECES[stage], id=stage) for stage in PIECE_STAGES),
    *(pytest.param("audit", m, f, id=m) for m, f in AUDIT_PIECES.items())])
def test_every_task_has_its_piece_for_each_stage_and_the_audit_with_the_interface_arguments(
        module: str, method: str, function: str) -> None:
    wanted = list(inspect.signature(getattr(Task, method)).parameters)[1:]  # no self
    for task in TASKS.values():
        piece = getattr(importlib.import_module(f"{task.package}.{module}"), function)
        assert list(inspect.signature(piece).parameters) == wanted, (task.name, method)


@pytest.mark.parametrize("stage", PIECE_STAGES)
def test_a_stage_asks_its_task_only_for_its_own_piece(stage: str) -> None:
    # tests/stages/test_declared_reads.py declares <package>.<stage> for stage <stage> only: the
    # stage's module and the pipeline plumbing it imports (e.g. pipeline/ranks.py for train)
    # ask for no other stage's piece
    source = "".join((REPO / path).read_text() for path in sorted(import_closure(
        f"pipeline.{stage}")) if path.startswith("pipeline/"))
    asked = {s for s, method in PIECES.items() if f"get_task(cfg.task).{method}(" in source}
    assert asked == {stage}


def test_no_code_outside_the_tasks_branches_on_the_task_name() -> None:
    # issue 26: every rule about a task lives in its package (seqcore/tasks/<package>/),
    # the params rules included (Task.config_problems, Task.ignored_settings)
    files = [p for root in ("pipeline", "seqcore") for p in sorted((REPO / root).rglob("*.py"))
             if (REPO / "seqcore" / "tasks") not in p.parents]
    branches = [f"{p.relative_to(REPO)}:{i}" for p in files
                for i, line in enumerate(p.read_text().splitlines(), 1)
                if re.search(r"\btask\s*[!=]=|[!=]=\s*cfg\.task\b", line)]
    assert len(files) > 50 and branches == []


def test_lm_bad_row_under_strict_stops_with_file_and_line(tmp_path: Path) -> None:
    cfg = lm_config(tmp_path, b"one line\nanother\n\n\xff\xfe broken\nlast\n", bad_rows="strict")
    with pytest.raises(TaskError) as err:
        lm_corpus(cfg)
    message = str(err.value)
    assert "\n" not in message
    assert f"{cfg.data.path}:4: invalid-utf8" in message and "data.bad_rows" in message


def test_lm_bad_row_under_skip_is_dropped_and_listed(tmp_path: Path) -> None:
    cfg = lm_config(tmp_path, b"one line\nanother\n\n\xff\xfe broken\nlast\n", bad_rows="skip")
    corpus = lm_corpus(cfg)
    assert [d.text for d in corpus.documents] == ["one line\nanother", "last"]
    assert [(r.where(), r.reason) for r in corpus.rejects] == [
        (f"{cfg.data.path}:4", "invalid-utf8")]


def test_lm_max_pairs_keeps_the_first_n_rows_of_text(tmp_path: Path) -> None:
    corpus = lm_corpus(lm_config(tmp_path, b"a1\na2\n\nb1\nb2\n\nc1\n", max_pairs=3))
    assert [d.text for d in corpus.documents] == ["a1\na2", "b1"] and corpus.rows == 3


def test_lm_max_pairs_keeps_the_first_n_cmudict_entries(tmp_path: Path) -> None:
    raw = tmp_path / "cmudict.dict"
    raw.write_text(";;; comment\nab AE1 B\nac AE1 K\nba B AA1\nca K AA1\n")
    cfg = config_from_dict(LM | {"data": {"max_pairs": 3}, "paths": {"raw": str(raw)}})
    assert [d.text for d in lm_corpus(cfg).documents] == ["ab AE1 B\nac AE1 K", "ba B AA1"]


def test_lm_signature_has_the_fields_of_the_parallel_signature_in_order() -> None:
    cfg = config_from_dict(LM)
    docs = [Document(c, f"{c}x{c}y {c}z\n" * 4) for c in "abc"]
    lm = parse_signature(lm_setup(cfg, docs).signature)
    # A parallel signature of text read as it is (not the CMUdict source): no stress field.
    text = config_from_dict({"data": {"source": "tsv", "path": "data/external/t.tsv"},
                             "paths": {"raw": "data/raw/t.tsv"}})
    pairs = contract_fields(text, CONTRACT)
    assert list(lm) == list(pairs) and "stress" not in lm
    assert "stress" in contract_fields(config_from_dict({}), CONTRACT)
    assert (lm["task"], lm["fmt"], lm["version"]) == ("lm", pairs["fmt"], pairs["version"])
    assert lm["trunc"] == "bptt-5" and lm["src"] == lm["tgt"]


def test_each_task_states_its_own_rules_in_the_run_and_no_other_tasks() -> None:
    """The MLflow run's ``derived.*`` claims come from the task (issue 26): an lm run is a
    stream with truncated BPTT, never "no truncated BPTT" or an encoder-decoder shift."""
    lm = get_task("lm").derived_params(config_from_dict(LM))
    pair = get_task("g2p").derived_params(config_from_dict({"model": {"family": "gru"}}))
    assert lm.keys() == pair.keys()
    assert lm["derived.bptt"].startswith("truncated BPTT over segments of 5 characters")
    assert lm["derived.batch.sequences_per_step"] == "2 streams x 5 characters"
    assert "target" not in lm["derived.teacher_forcing"]
    assert pair["derived.bptt"] == "full sequence, state reset per sequence (no truncated BPTT)"
    assert pair["derived.teacher_forcing"] == "decoder input = BOS + target; labels = target + EOS"
    assert lm["derived.clip.where"] == pair["derived.clip.where"]  # the shared loop's
