"""A bad params.yaml stops every stage at once: one line naming the key, the value and the
valid choices or range, exit status 2, no traceback, and nothing written (issue 13). Each case
runs a real stage in an empty folder, spread over the stages: all load through pipeline.stage."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from seqcore.contract import SpecialIds
from seqcore.tokenizer import TokenizerSettingsError, choose_settings, train_sentencepiece
from tests.factories import REPO
from tests.pipeline_helpers import merge, run_python

PARAMS = yaml.safe_load((REPO / "params.yaml").read_text())


def run_stage(stage: str, folder: Path, params_text: str) -> subprocess.CompletedProcess:
    (folder / "params.yaml").write_text(params_text)
    return run_python(folder, "-m", f"pipeline.{stage}", python=sys.executable, timeout=120,
                      env=dict(os.environ, PYTHONPATH=str(REPO)))


def over(overrides: dict) -> str:
    """The repository's params.yaml with ``overrides`` merged in."""
    return yaml.safe_dump(merge(PARAMS, overrides), sort_keys=False)


def with_line_after(anchor: str, line: str) -> str:
    text = (REPO / "params.yaml").read_text()
    assert anchor in text
    return text.replace(anchor, f"{anchor}\n{line}", 1)


LR_LINE = (REPO / "params.yaml").read_text().splitlines().index("  lr: 0.003") + 1
USER_FILE = {"data": {"source": "tsv", "path": "data/external/words.tsv", "sha256": ""},
             "paths": {"raw": "data/raw/words.tsv"}}
NO_FILE = ("data.path = 'data/external/words.tsv': no such file (relative paths start at the "
           "repository root)")
EMPTY = ("empty; expected a mapping of sections (task, data, tokenizer, ...), as in the "
         "repository's params.yaml")
STORE = ("must be a store URI starting with sqlite://, http://, https://, postgresql://, "
         "mysql://, mssql://, file://, databricks:// (a run kept while the store is down is "
         "replayed to it)")

#: (stage, params.yaml text, the stderr line after "params.yaml: ")
CASES = [
    ("validate", over({"train": {"max_steps": "many"}}), "train.max_steps = 'many': expected int"),
    ("validate", over({"train": {"max_steps": -5}}), "train.max_steps = -5: must be >= 1"),
    ("validate", over({"model": {"family": "tranformer"}}), "model.family = 'tranformer': must "
     "be one of transformer, gru, lstm; did you mean transformer?"),
    ("validate", over({"decode": {"strategy": "nucleus"}}),
     "decode.strategy = 'nucleus': must be one of greedy, beam, sample"),
    ("validate", over({"train": {"warmup_steps": -1}}), "train.warmup_steps = -1: must be >= 0"),
    ("validate", over({"train": {"clip_norm": -1.0}}), "train.clip_norm = -1.0: must be >= 0"),
    ("validate", over({"model": {"transformer": {"d_model": -8}}}),
     "model.transformer.d_model = -8: must be >= 1"),
    ("fetch", over({"model": {"transformer": {"dropout": 1.5}}}),
     "model.transformer.dropout = 1.5: must be in [0, 1)"),
    ("fetch", over({"data": {"test_fraction": -0.5}}),
     "data.test_fraction = -0.5: must be in [0, 1)"),
    ("fetch", with_line_after("  lr: 0.003", "  lrr: 0.5"),
     "train.lrr = 0.5: unknown key; did you mean train.lr?"),
    ("prepare", "train:\n  lr: 1.0\n   lrr: 0.5\n",
     "not valid YAML at line 3, column 7: mapping values are not allowed here"),
    ("prepare", over({"model": {"transformer": {"d_model": 130}}}),
     "model.transformer.d_model = 130: must be divisible by model.transformer.n_heads (4)"),
    ("train", over({"train": {"lr": -1.0}}), "train.lr = -1.0: must be > 0"),
    # issue 31: what a later stage would refuse (or silently get wrong), refused up front
    ("validate", "", EMPTY),
    ("validate", "# nothing but a comment\n", EMPTY),
    ("validate", "- train\n- lr\n", "(whole file) = ['train', 'lr']: expected a mapping of keys to "
     "values"),
    ("validate", with_line_after("  lr: 0.003", "  lr: 50.0"), f"not valid YAML at line "
     f"{LR_LINE + 1}, column 3: duplicate key 'lr' (first at line {LR_LINE}; YAML would keep only "
     "the last value)"),
    ("validate", over({"tokenizer": {"pad_id": 100}}), "tokenizer.pad_id = 100: must be < "
     "tokenizer.src_vocab_size (40): SentencePiece ids run from 0 to the vocabulary size - 1"),
    ("validate", over({"decode": {"banned_tokens": [5, 999]}}),
     "decode.banned_tokens = [5, 999]: ids must be < tokenizer.tgt_vocab_size (44)"),
    ("validate", over({"mlflow": {"tracking_uri": "ftp://host/runs"}}),
     f"mlflow.tracking_uri = 'ftp://host/runs': {STORE}"),
    ("validate", over({"mlflow": {"tracking_uri": "mlflow.db"}}),
     f"mlflow.tracking_uri = 'mlflow.db': {STORE}"),
    ("validate", over(USER_FILE), NO_FILE),
    ("fetch", over(USER_FILE), NO_FILE),
    ("tracking", over({"train": {"lr": -1.0}}), "train.lr = -1.0: must be > 0"),  # the replay
    # issue 49: CPU bf16 runs oneDNN kernels the portable CPU kernel profile cannot pin
    ("validate", over({"train": {"amp": "bf16"}}), "train.amp = 'bf16': runs CPU-specific oneDNN "
     "kernels, which train.cpu_kernels: portable cannot pin; set train.cpu_kernels: native (or "
     "train.amp: none)"),
    ("validate", over({"train": {"cpu_kernels": "fast"}}),
     "train.cpu_kernels = 'fast': must be one of portable, native"),
    # issue 53: torch's fused Adam is CPU-specific too
    ("validate", over({"train": {"optimizer_kernel": "fused"}}), "train.optimizer_kernel = "
     "'fused': is torch's CPU-specific fused Adam, which train.cpu_kernels: portable cannot "
     "pin; set train.cpu_kernels: native (or train.optimizer_kernel: auto)"),
    ("validate", over({"data": {"source": "tsv", "path": "/tmp"},
                       "paths": {"raw": "data/raw/tmp"}}),
     "data.path = '/tmp': a folder; name the data file in it"),
]


@pytest.mark.parametrize("stage, text, line", CASES,
                         ids=[f"{c[0]}-{c[2].split(': ')[0].split(' =')[0]}" for c in CASES])
def test_bad_config_stops_the_stage_with_one_line_and_status_2(tmp_path: Path, stage: str,
                                                              text: str, line: str) -> None:
    res = run_stage(stage, tmp_path, text)
    assert res.returncode == 2, res.stderr
    assert res.stderr == f"params.yaml: {line}\n"
    assert "Traceback" not in res.stderr + res.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written


@pytest.mark.parametrize("text, lines", [
    pytest.param((REPO / "params.yaml").read_text(), ["[validate] params ok"],
                 id="test_validate_stage_accepts_the_repository_params"),
    pytest.param(over({"decode": {"strategy": "greedy", "n_best": 3, "top_k": 5, "beam_size": 8}}),
                 ["[validate] warning: decode.n_best = 3 is ignored: only decode.strategy beam "
                  "reads it (decode.strategy is greedy)",
                  "[validate] warning: decode.top_k = 5 is ignored: only decode.strategy sample "
                  "reads it (decode.strategy is greedy)",
                  "[validate] params ok"],  # beam_size: set for beam by default, never warned about
                 id="test_settings_the_strategy_ignores_warn_in_one_line_each_and_do_not_stop")])
def test_good_params_pass_validate_with_one_warning_per_ignored_setting(
        tmp_path: Path, text: str, lines: list[str]) -> None:
    res = run_stage("validate", tmp_path, text)
    assert (res.returncode, res.stderr) == (0, "".join(f"{line}\n" for line in lines))


def test_a_special_id_beyond_an_auto_vocabulary_stops_the_tokenizer_in_one_line(
        tmp_path: Path) -> None:
    texts = ["k ae t", "d ao g"] * 20
    settings, _ = choose_settings(texts, "char", "auto", 1.0)
    with pytest.raises(TokenizerSettingsError, match=rf"^tokenizer: special id 100 \(tokenizer"
                       rf"\.pad_id/unk_id/bos_id/eos_id\) must be < the vocabulary size "
                       rf"{settings.vocab_size} chosen for this side"):
        train_sentencepiece(texts, settings, SpecialIds(100, 1, 2, 3), tmp_path / "m.model")


# -- issue 31: `validate` refuses all a later stage would. Derived from the stages' source so the
# two cannot drift: every config check a stage calls, validate calls too, and gives its line.

CHECK_MODULES = (REPO / "seqcore/config.py", REPO / "pipeline/stage.py")
STAGES = list(yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"])
FUNCS = {n.name: n for p in CHECK_MODULES  # their top-level functions, by name
         for n in ast.parse(p.read_text(encoding="utf-8")).body if isinstance(n, ast.FunctionDef)}


def _called(node: ast.AST) -> set[str]:
    """The plain names called in ``node`` (the stages import the checks by name)."""
    return {c.func.id for c in ast.walk(node)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}


def config_checks() -> set[str]:
    """The functions of CHECK_MODULES that can refuse a configuration, directly (raise
    ConfigError, _fail, exit with CONFIG_ERROR_STATUS) or through another of them."""
    checks = {name for name, f in FUNCS.items()
              if any(isinstance(n, ast.Name) and n.id in ("ConfigError", "CONFIG_ERROR_STATUS")
                     for n in ast.walk(f)) or "_fail" in _called(f)}
    while more := {name for name, f in FUNCS.items() if _called(f) & checks} - checks:
        checks |= more
    return checks


def checks_called_by(stage: str) -> set[str]:
    """The checks the stage calls, and those they call (stage_main calls load)."""
    checks = config_checks()
    found = _called(ast.parse((REPO / f"pipeline/{stage}.py").read_text(encoding="utf-8")))
    found &= checks
    while more := {c for f in found for c in _called(FUNCS[f]) & checks} - found:
        found |= more
    return found


def test_the_derivation_finds_the_shared_loader_and_the_workspace_check() -> None:
    # guards the derivation itself: were it to find nothing, the next test could not fail
    assert {"load", "stage_main", "load_config", "check_workspace"} <= config_checks()
    assert {"stage_main", "load", "check_workspace"} <= checks_called_by("validate")


@pytest.mark.parametrize("stage", [s for s in STAGES if s != "validate"])
def test_every_check_a_stage_makes_on_its_params_validate_makes_too(stage: str) -> None:
    assert checks_called_by(stage) - checks_called_by("validate") == set()
    assert "load" in checks_called_by(stage)  # each stage loads its params through stage.load


LATER = [(stage, text, line) for stage, text, line in CASES
         if stage in STAGES and stage != "validate"]


@pytest.mark.parametrize("stage, text, line", LATER,
                         ids=[f"{c[0]}-{c[2].split(': ')[0].split(' =')[0]}" for c in LATER])
def test_validate_stops_on_what_a_later_stage_stops_on(tmp_path: Path, stage: str, text: str,
                                                      line: str) -> None:
    res = run_stage("validate", tmp_path, text)
    assert (res.returncode, res.stderr) == (2, f"params.yaml: {line}\n")
