"""Declared reads are actual reads (STYLE rule 14, issue 12): a stage's dvc.yaml ``deps`` are
exactly its import closure and its ``params`` the config keys it reads, both ways (an undeclared
read lets ``dvc repro`` skip a changed stage; an unread one re-runs it for nothing)."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
import yaml

from seqcore.config import Config, DecodeConfig, as_dict, config_from_dict, flatten
from seqcore.data.examples import Example
from seqcore.decoding.factory import make_decoder
from seqcore.models.transformer import Transformer, TransformerShape
from seqcore.training.setups import position_range
from tests.factories import IDS, REPO
from tests.pipeline_helpers import (
    CODE_ROOTS, TINY_PARAMS, copy_repo, import_closure, merge, run_python)

STAGES = ("fetch", "prepare", "tokenizer", "baseline", "train", "decode", "evaluate")


def dvc_stages() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def declared_code(stage: dict) -> set[str]:
    """The stage's code deps (templated data paths are not code)."""
    deps = (d if isinstance(d, str) else next(iter(d)) for d in stage.get("deps", []))
    return {d.rstrip("/") for d in deps if d.split("/")[0] in CODE_ROOTS}


@pytest.mark.parametrize("stage", STAGES)
def test_stage_deps_are_exactly_the_import_closure_of_its_entry_module(stage: str) -> None:
    closure = import_closure(f"pipeline.{stage}")
    deps = declared_code(dvc_stages()[stage])
    undeclared = sorted(p for p in closure
                        if not any(p == d or p.startswith(d + "/") for d in deps))
    assert not undeclared, f"{stage}: imported but not in dvc.yaml deps: {undeclared}"
    for dep in sorted(deps):
        files = {str(p.relative_to(REPO)) for p in (REPO / dep).rglob("*.py")} \
            if (REPO / dep).is_dir() else {dep}
        unused = sorted(files - closure)
        assert not unused, f"{stage}: dvc.yaml dep {dep} holds modules it never imports: {unused}"




def declared_params(stage: dict) -> set[str]:
    """Leaf keys the stage declares (a section name covers its keys, ``params.yaml:`` all)."""
    keys, out = set(flatten(as_dict(Config()))), set()
    for entry in stage.get("params", []):
        names = [entry] if isinstance(entry, str) else \
            [n for values in entry.values() for n in (values or [""])]
        for name in names:
            out |= {k for k in keys if not name or k == name or k.startswith(name + ".")}
    return out


@pytest.fixture(scope="module")
def recorded_reads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Each stage run in order on tiny params in a copy of the repository, with its reads."""
    repo = copy_repo(tmp_path_factory.mktemp("reads"), merge(TINY_PARAMS, {
        "train": {"max_steps": 2, "eval_every": 2, "checkpoint_every": 2}}))
    env = dict(os.environ, PYTHONPATH=str(REPO), MLFLOW_HTTP_REQUEST_MAX_RETRIES="0",
               MLFLOW_TRACKING_URI=f"sqlite:///{repo / 'mlflow.db'}")
    res = run_python(repo, "-m", "tests.programs.config_reads", *STAGES, env=env,
                     python=sys.executable, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return {k: set(v) for k, v in json.loads(res.stdout.strip().splitlines()[-1]).items()}


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES)
def test_stage_params_are_exactly_the_config_keys_it_reads(
        recorded_reads: dict[str, set[str]], stage: str) -> None:
    # paths.* reach dvc.yaml through templating: a changed path changes the deps/outs.
    read = {k for k in recorded_reads[stage] if not k.startswith("paths.")}
    declared = {k for k in declared_params(dvc_stages()[stage]) if not k.startswith("paths.")}
    assert not read - declared, f"{stage} reads undeclared params: {sorted(read - declared)}"
    assert not declared - read, f"{stage} declares params it never reads: {sorted(declared - read)}"


def test_model_position_range_depends_on_the_sequence_contract_not_on_decode() -> None:
    short, long_ = (config_from_dict({"decode": {"max_len": n}}) for n in (8, 64))
    assert position_range(short.sequence) == position_range(long_.sequence) == 33
    wide = config_from_dict({"sequence": {"max_src_len": 40, "max_tgt_len": 20}})
    assert position_range(wide.sequence) == 41


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_decoders_use_exactly_the_positions_of_their_length_cap(
        strategy: str, use_cache: bool) -> None:
    """A cap of max_positions tokens (EOS never allowed) fits; one more does not."""
    limit = 6
    model = Transformer(TransformerShape(12, 12, 16, 2, 1, 1, 32, 0.0, True, "learned", True,
                                         limit, 0)).eval()
    examples = [Example(str(i), str(i), "", "", [4 + i] * limit, [5], True) for i in range(2)]
    src = torch.tensor([ex.src for ex in examples])

    def decode(cap: int) -> list:
        cfg = DecodeConfig(strategy=strategy, beam_size=2, max_len=cap, min_len=cap - 1)
        return make_decoder(cfg, IDS, use_cache)(model, src, torch.ones_like(src, dtype=torch.bool),
                                                 examples)

    assert max(len(n[0].tokens) for n in decode(limit)) == limit
    with pytest.raises(ValueError, match=f"position {limit} >= max_len {limit}"):
        decode(limit + 1)
