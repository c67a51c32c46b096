"""Experiments the way docs/experiments.md runs them: each from the baseline, checkpoints that
never make a stage stale, a readable `dvc exp show`, and MLflow runs that tell apart."""

from __future__ import annotations

import json
import os
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import yaml

from pipeline.git_state import commit_copy
from pipeline.record import split_counts, tracking_uri
from pipeline.run_naming import run_name
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.config import config_from_dict, flatten
from seqcore.g2p import is_illegal_phoneme
from seqcore.metrics.evaluation import evaluate_predictions, prediction_metrics
from seqcore.metrics.failures import FailureRules, failure_modes
from seqcore.metrics.recompute import eval_spec
from seqcore.metrics.report import render_report, training_summary
from seqcore.progress import in_chunks
from tests.factories import REPO, make_rows
from tests.pipeline_helpers import (
    TINY_PARAMS, copy_result, doc_blocks, doc_commands, dvc, dvc_process, result_runs,
    run_artifact)

DOC = REPO / "docs/experiments.md"


def documented_experiments() -> dict[str, list[str]]:
    """The `dvc exp run --temp -n NAME -S KEY=VALUE ...` lines of docs/experiments.md's first
    block, by name, with their sets (issue 30: the test runs what users read). The tiny
    result decodes greedily, so an experiment that sets beam settings also sets
    ``decode.strategy=beam`` (the default run decodes with beam search)."""
    _, first = doc_blocks(DOC, "bash")[0]
    out = {}
    for command in doc_commands(first):
        args = shlex.split(command)
        if args[:4] == ["dvc", "exp", "run", "--temp"]:
            sets = [a for before, a in zip(args, args[1:]) if before == "-S"]
            if any(x.startswith("decode.beam_size=") for x in sets):
                sets.append("decode.strategy=beam")
            out[args[args.index("-n") + 1]] = sets
    return out


EXPERIMENTS = documented_experiments()


def changed(name: str) -> dict[str, object]:
    """The params an experiment sets, typed as params.yaml holds them."""
    return {k: yaml.safe_load(v) for k, v in (x.split("=", 1) for x in EXPERIMENTS[name])}


# -- unit level -------------------------------------------------------------------------------
def test_run_name_leads_with_the_experiment_then_changed_params_and_stays_short() -> None:
    assert run_name("lr-half", {"train.lr": (1.0, 0.5)}, "abcd1234") == "lr-half lr=0.5"
    assert run_name(None, {}, "abcd1234") == "baseline-abcd1234"
    many = {f"decode.p{i}": (0, "x" * 20) for i in range(5)}
    assert len(run_name("exp", many, "abcd1234")) <= 40


def test_counts_and_denominators_are_not_charted_metrics() -> None:
    metrics, counts = split_counts({"exact_match": 0.5, "examples": 24, "test_perplexity": 2.0,
                                    "failures.empty.count": 0, "failures.empty.rate": 0.0})
    assert metrics == {"exact_match": 0.5, "test_perplexity": 2.0, "failures.empty.rate": 0.0}
    assert counts == {"examples": 24, "failures.empty.count": 0}


def test_report_leads_with_wer_per_perplexity_then_the_training_summary(tmp_path: Path) -> None:
    spec = eval_spec(config_from_dict({}), is_illegal_phoneme)
    ev = evaluate_predictions(make_rows(), spec)
    split_figures = ("token_nll", "perplexity", "ppl_denominator_tokens", "sequence_mean_nll",
                     "sequences", "tf_token_accuracy")
    metrics = {"split": "test", "signature": "task:g2p|v:1"} | prediction_metrics(ev) \
        | {f"test_{k}": 1.5 for k in split_figures}
    log = tmp_path / "log.csv"
    log.write_text("step,epoch,lr,loss,tokens,grad_norm,skipped,dev_nll,ss_prob\n"
                   "1,0,0.1,2.0,100,1.0,0,nan,0.0\n2,1,0.1,1.5,100,1.0,0,0.9,0.0\n")
    summary = training_summary(TrainMetrics(steps=2, tokens=200, skipped_steps=0, best_step=2,
                                            best_dev_nll=0.5, final_loss=0.7,
                                            selected_step=2), log)
    assert "2 steps, 2 epoch(s)" in summary[0] and "wall time in the MLflow run" in summary[0]
    text = render_report(metrics, ev, {}, spec.rules.describe(), {}, summary)
    head = text.split("## Headline")[0]
    assert head.index("WER") < head.index("PER") < head.index("perplexity") < head.index("steps")
    bucket_header = next(ln for ln in text.splitlines() if ln.startswith("| bucket |"))
    assert bucket_header.count("|") - 1 <= 8  # fits a page; buckets.csv has every column


def test_report_names_the_error_rates_after_the_task() -> None:
    # Issue 30: a parallel result's tokens are not phonemes; a G2P result's are.
    spec = eval_spec(config_from_dict({}), None)
    ev = evaluate_predictions(make_rows(), spec)
    heads = {task: render_report({"split": "test", "signature": f"task:{task}|v:1"}
                                 | prediction_metrics(ev), ev, {}, spec.rules.describe(), {}, []
                                 ).split("## Headline")[0] for task in ("g2p", "parallel")}
    assert "PER (phoneme error rate)" in heads["g2p"] and "WER (word" in heads["g2p"]
    assert "sequence error rate (1 - exact_match)" in heads["parallel"]
    assert "token error rate against the closest" in heads["parallel"]
    assert "PER" not in heads["parallel"] and "WER" not in heads["parallel"]


def test_failure_examples_show_each_source_once() -> None:
    rows = make_rows()
    twins = [type(r)(**{**r.__dict__, "id": r.id + "b"}) for r in rows]  # same sources again
    modes = failure_modes(rows + twins, FailureRules(2, 3, 10), None)
    for kind in ("empty", "truncated"):
        sources = [e["source"] for e in modes[kind]["examples"]]
        assert sources and len(sources) == len(set(sources)), kind


def test_progress_prints_periodic_lines_off_a_terminal(capsys: pytest.CaptureFixture) -> None:
    chunks = list(in_chunks(list(range(100)), 2, "decode"))
    assert sum(len(c) for c in chunks) == 100 and all(len(c) % 2 == 0 for c in chunks)
    lines = capsys.readouterr().err.splitlines()
    assert 2 <= len(lines) <= 11 and lines[-1].startswith("[decode] 100/100 examples")


def test_offline_plot_template_inlines_the_chart_library() -> None:
    html = runpy.run_path(str(REPO / "tools/offline_plots.py"))["template_html"]()
    assert "{plot_divs}" in html and "window.vegaEmbed" in html
    assert "<script src" not in html and "{scripts}" not in html  # no CDN tags


# -- end to end: a committed baseline and two `--temp` experiments ------------------------------
@pytest.fixture(scope="module")
def exps(audit_result: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[Path, dict[str, str]]:
    repo = copy_result(audit_result[0], tmp_path_factory.mktemp("exps") / "repo")
    commit_copy(repo, "baseline", "t")
    logs = {name: dvc(repo, "exp", "run", "--temp", "-n", name,
                      *(a for x in sets for a in ("-S", x)))
            for name, sets in EXPERIMENTS.items()}
    return repo, logs


@pytest.mark.e2e
def test_each_temp_experiment_starts_from_the_baseline(exps: tuple[Path, dict[str, str]]) -> None:
    repo, _ = exps
    base = flatten(yaml.safe_load((repo / "params.yaml").read_text()))
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True,
                              text=True, check=True).stdout  # workspace untouched
    shown = json.loads(dvc(repo, "exp", "show", "--json", "--no-pager").strip())
    params = {e["name"]: flatten(e["data"]["params"]["params.yaml"]["data"])
              for row in shown for x in row.get("experiments") or [] for e in x["revs"]}
    assert set(EXPERIMENTS) == {"lr-half", "beam3"}  # the page's two experiments
    for name in EXPERIMENTS:
        assert params[name] == base | changed(name), name


@pytest.mark.e2e
def test_checkpoints_never_make_a_stage_stale(exps: tuple[Path, dict[str, str]]) -> None:
    repo, logs = exps
    assert "Running stage 'train'" in logs["lr-half"]
    ran = [ln.split("'")[1] for ln in logs["beam3"].splitlines() if ln.startswith("Running stage")]
    # validate re-checks params.yaml on any edit (it writes nothing); of the real stages only
    # decode and evaluate re-run
    assert ran == ["validate", "decode", "evaluate"]
    (repo / "checkpoints/0123456789ab").mkdir(parents=True)  # what a new training contract adds
    (repo / "checkpoints/0123456789ab/ckpt-00000001.pt").write_bytes(b"x")
    assert "up to date" in dvc(repo, "status")


@pytest.mark.e2e
def test_documented_exp_show_fits_120_columns(exps: tuple[Path, dict[str, str]]) -> None:
    repo, _ = exps
    env = dict(os.environ, COLUMNS="120",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    # the page's `dvc exp show` command (the test runs what users read)
    cmd = shlex.split(next(ln for ln in DOC.read_text().splitlines()
                           if ln.startswith("dvc exp show --")))
    res = dvc_process(repo, *cmd[1:], "--no-pager", env=env)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert max(len(ln) for ln in out.splitlines()) <= 120 and "…" not in out, out
    for column in ("wer", "per", "ppl", "train.lr", "decode.strategy", "decode.beam_size",
                   "lr-half", "beam3"):
        assert column in out, column
    for name in ("headline.json", "metrics.json", "train_metrics.json"):
        numbers = flatten(json.loads((repo / "reports" / name).read_text()))
        assert all(isinstance(v, (int, float)) for v in numbers.values()), name
    assert "|" in json.loads((repo / "reports/results.json").read_text())["signature"]


@pytest.mark.e2e
def test_mlflow_runs_are_named_described_and_tagged(exps: tuple[Path, dict[str, str]],
                                                    tmp_path: Path) -> None:
    repo, _ = exps
    client = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    exp = client.get_experiment_by_name("seqcore-g2p")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert exp.artifact_location == (repo / "mlruns/seqcore-g2p").as_uri()  # not in a temp dir
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    lr = changed("lr-half")["train.lr"]
    named = {n.split()[0] for n in runs}
    assert len(runs) == 3 and {"lr-half", "beam3"} <= named
    assert f"lr-half lr={lr}" in runs
    note = runs[f"lr-half lr={lr}"].data.tags["mlflow.note.content"]
    base = TINY_PARAMS["train"]["lr"]  # the tiny result's rate, which the experiment halves
    assert "WER" in note and "PER" in note and f"`train.lr`: {base} → {lr}" in note
    # the report's lead is the description (issue 29): the table with intervals, the baseline
    assert "| WER (word error rate, 1 - exact_match) |" in note and "## Beside the baseline" in note
    assert "## Headline" not in note and note.endswith("artifact `reports/report.md`.")
    # issue 55: a --temp experiment's run was left RUNNING without its registered version
    # (the registry resolved the model's URI against the temporary copy)
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    versions = {v.run_id for v in client.search_model_versions("name = 'seqcore-g2p'")}
    assert versions == {r.info.run_id for r in runs.values()}
    for run in runs.values():
        tags = run.data.tags
        assert {"mlflow.source.name", "mlflow.source.type", "mlflow.user",
                "mlflow.source.git.commit"} <= set(tags)
        assert not [k for k in tags if k.startswith("count.")]  # in counts.json instead
        assert "examples" not in run.data.metrics and "word_error_rate" in run.data.metrics
        counts = run_artifact(client, run.info.run_id, "counts.json", tmp_path)
        assert json.loads(counts)["examples"] > 0
        plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
        assert "plots/training_curve.png" in plots


def test_a_relative_sqlite_store_is_the_users_repo_also_inside_a_temp_experiment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # a `dvc exp run --temp` works in a copy under .dvc/tmp/exps
    monkeypatch.setenv("DVC_ROOT", "/home/user/repo")  # set by DVC to the user's repository
    assert tracking_uri("sqlite:///mlflow.db") == "sqlite:////home/user/repo/mlflow.db"


@pytest.mark.e2e
def test_compare_finds_results_by_revision_experiment_folder_and_mlflow_run(
        exps: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    from pipeline.compare import main  # noqa: PLC0415 (imports dvc and mlflow)

    repo, _ = exps
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    beam_run = next(r for r in result_runs(repo)[1] if r.data.tags.get("dvc.exp.name") == "beam3")
    test_rows = len((repo / "predictions/test.jsonl").read_text().splitlines())

    def compare(a: str, b: str) -> dict:
        main([a, b, "--samples", "200", "--out", str(repo / "cmp")])
        out = capsys.readouterr().out
        assert f"{test_rows} rows in" in out and "| word_error_rate |" in out, out
        return json.loads((repo / "cmp/compare.json").read_text())

    # the committed baseline (git + the DVC cache) against the workspace: the same file
    same = compare("HEAD", ".")["headline"]["word_error_rate"]
    assert same["delta"] == 0 and same["p_bootstrap"] == 1 == same["p_randomization"]
    # an experiment by name, then the same experiment by its MLflow run id
    by_name = compare("HEAD", "beam3")
    assert by_name["b"]["origin"] == "revision beam3 (through DVC)"
    greedy = json.loads((repo / "reports/metrics.json").read_text())
    assert by_name["headline"]["word_error_rate"]["a"] == greedy["word_error_rate"]
    by_run = compare("beam3", beam_run.info.run_id)
    assert by_run["b"]["origin"] == f"MLflow run {beam_run.info.run_id}: revision beam3"
    assert by_run["headline"]["token_error_rate"]["delta"] == 0
