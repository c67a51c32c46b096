"""What users see in the MLflow UI (issue 55), in a real headless browser (Debian's chromium)
against a real ``mlflow server`` on the tiny result's store: the link the evaluate stage
prints opens the runs in MLflow's model-training view, on the headline metrics in their
order (each beside the baseline's), and a run's page opens on the same figures."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest

from pipeline.run_naming import headline_line
from pipeline.tracking import VIEW_METRICS, runs_link
from tests.pipeline_helpers import copy_result, result_runs
from tests.servers import browse, local_ui

pytestmark = pytest.mark.slow  # a server and a browser


@pytest.fixture(scope="module")
def ui(audit_result: tuple[Path, str],
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, mlflow.entities.Run]]:
    """The UI's URL and the result's run (the server reads a copy of the store)."""
    repo = copy_result(audit_result[0], tmp_path_factory.mktemp("ui") / "repo")
    store = f"sqlite:///{repo / 'mlflow.db'}"
    (run,) = result_runs(repo)[1]
    with local_ui(store, repo.parent / "server.log") as url:
        yield url, run


def test_the_printed_link_opens_the_runs_on_the_headline_columns_in_order(
        ui: tuple[str, mlflow.entities.Run], tmp_path: Path) -> None:
    url, run = ui
    # wide enough for every headline column: the grid renders only the columns in view
    dom = browse(runs_link(url, run.info.experiment_id), tmp_path / "profile", size="2600,900")
    assert "shared view" in dom  # MLflow loaded the experiment's view, not the user's default
    assert "Tool calls" not in dom  # the GenAI overview's tabs: not the training view
    headers = {m.group(2): int(m.group(1)) for m in re.finditer(
        r'aria-colindex="(\d+)" col-id="(metrics\.`[^"]+`)"', dom)}
    want = [f"metrics.`{m}`" for m in VIEW_METRICS if m in run.data.metrics]
    assert len(want) >= 5 and "metrics.`baseline.word_error_rate`" in want
    assert sorted(headers, key=headers.get) == want


def test_a_run_page_opens_on_the_headline_figures_with_the_baseline_beside(
        ui: tuple[str, mlflow.entities.Run], tmp_path: Path) -> None:
    url, run = ui
    page = (f"{url}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
            "?workflowType=machine_learning")
    text = re.sub(r"<[^>]+>", "\n", browse(page, tmp_path / "profile"))
    line = headline_line(run.data.metrics)
    assert "(baseline " in line and line in text.splitlines(), [
        t for t in text.splitlines() if "WER" in t][:5]
