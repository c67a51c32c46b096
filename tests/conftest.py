"""Shared fixtures: tiny configs, oracle data and a temporary copy of the repository."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from seqcore.kernels import PORTABLE_ENV

# The portable CPU kernel profile (seqcore.kernels) acts only when set before torch's first
# kernel: set here, before torch is imported, it holds in every test process and every stage
# the tests start, so a portable stage need not start itself again (it would, and pass).
os.environ.update(PORTABLE_ENV)

import pytest  # noqa: E402 (after the profile's environment)
import torch  # noqa: E402

from seqcore.contract import SpecialIds
from seqcore.determinism import deterministic_kernels
from tests.factories import IDS
from tests.pipeline_helpers import (
    AUDIT_SAMPLE, TINY_PARAMS, copy_repo, copy_result, dvc, merge)
from tests.servers import Team, team_stack


def pytest_itemcollected(item: pytest.Item) -> None:
    """An e2e test is slow too (`make test-fast`, ``-m "not slow"``, leaves it out)."""
    if item.get_closest_marker("e2e"):
        item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    # One thread per test: `make test` runs a pytest worker per core (-n auto --dist
    # loadfile), and two workers of two OpenMP threads each on two cores wait for each other
    # (10-40x slower); no test's result depends on the thread count.
    torch.set_num_threads(1)
    deterministic_kernels()
    torch.manual_seed(0)


@pytest.fixture
def ids() -> SpecialIds:
    return IDS


@pytest.fixture(scope="session")
def audit_result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A tiny repository after a real `dvc repro` (shared by the audit tests; copy it before
    changing anything), and the repro's output."""
    repo = copy_repo(tmp_path_factory.mktemp("result"), merge(TINY_PARAMS, {
        "evaluate": {"prediction_sample": AUDIT_SAMPLE}, "decode": {"batch_size": 8}}))
    return repo, dvc(repo, "repro")


@pytest.fixture
def result_copy(audit_result: tuple[Path, str], tmp_path: Path) -> Path:
    """A copy of the result for one test (its MLflow store points into the copy)."""
    return copy_result(audit_result[0], tmp_path / "result")


@pytest.fixture
def result_files(audit_result: tuple[Path, str], tmp_path: Path) -> Path:
    """The result's files for one test: a stage that stops may leave its outputs half
    cleared, as under `dvc repro`, which removes them before it runs a stage."""
    return shutil.copytree(audit_result[0], tmp_path / "repo", symlinks=True)


@pytest.fixture(scope="session")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    """S3 (moto), PostgreSQL and an MLflow server on both, once per session (starting them
    takes about 20 s): the team tests and the tracking test over HTTP share them."""
    with team_stack(tmp_path_factory.mktemp("mlflow") / "server.log") as stack:
        yield stack
