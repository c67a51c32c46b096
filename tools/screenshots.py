"""Screenshots of the MLflow UI: a baseline and two experiments (docs/experiments.md), and the
committed default result (docs/mlflow.md).

Builds a throwaway copy of this repository with tiny params, runs the baseline (`dvc repro`,
committed) and two `dvc exp run --temp` experiments, starts `mlflow ui` on 127.0.0.1 over the
copy's store and drives headless Chromium (Debian's `chromium` package) through the DevTools
protocol: the run table (with the headline metric and changed-param columns) and the
compare view with "Show diff only". Usage, from the repository root:

    python tools/screenshots.py                 # writes docs/img/mlflow_runs.png, _compare.png
    python tools/screenshots.py --keep /tmp/ui  # keep the copy (and its mlflow.db) there
    python tools/screenshots.py --result        # the committed default (after `dvc pull`):
                                                # mlflow_model.png, _datasets.png,
                                                # _headline.png, _run.png, _run_charts.png

``--result`` logs the workspace's result once more, with the evaluate stage's own code, to a
fresh store (so the pictures show one run and one model version, not a developer's history),
then shoots the registered model's page, the run table with its Datasets column and the
run's page.
"""

from __future__ import annotations

import argparse
import contextlib
import base64
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import websocket  # websocket-client: the DevTools protocol is JSON over a websocket
import yaml

TINY = {"data": {"max_pairs": 400},
        "model": {"transformer": {"d_model": 32, "n_heads": 2, "enc_layers": 1, "dec_layers": 1,
                                  "d_ff": 64}},
        "train": {"max_steps": 6, "batch_size": 32, "eval_every": 3, "checkpoint_every": 3,
                  "warmup_steps": 2},
        "decode": {"max_len": 12}}
EXPERIMENTS = {"lr-half": ["-S", "train.lr=0.5"],
               "beam3": ["-S", "decode.strategy=beam", "-S", "decode.beam_size=3"]}
COLUMNS = ["metrics.`word_error_rate`", "metrics.`token_error_rate`",
           "metrics.`test_perplexity`", "params.`train.lr`", "params.`decode.strategy`",
           "params.`decode.beam_size`"]


def sh(cwd: Path, *cmd: str) -> str:
    env_path = f"{Path(sys.executable).parent}:{Path('/usr/bin')}:{Path('/bin')}"
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False,
                         env={"PATH": env_path, "HOME": str(Path.home())})
    if res.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return res.stdout


def overlay(base: dict, over: dict) -> dict:
    return base | {k: overlay(base.get(k, {}), v) if isinstance(v, dict) else v
                   for k, v in over.items()}


def build_store(repo: Path, work: Path) -> None:
    """A copy of the repository's files (tiny params), its baseline run and two experiments."""
    files = sh(repo, "git", "ls-files", "--cached", "--others", "--exclude-standard").split("\n")
    for name in filter(None, files):
        if (repo / name).is_file() and not name.startswith(("tests/", "docs/img/")):
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, work / name)
    params = yaml.safe_load((work / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(overlay(params, TINY), sort_keys=False))
    (work / "dvc.lock").unlink(missing_ok=True)
    git = ("git", "-c", "user.name=seqcore-dev", "-c", "user.email=dev@seqcore")
    sh(work, "git", "init", "-q")
    sh(work, "git", "add", "-A")
    sh(work, *git, "commit", "-qm", "tiny params")
    sh(work, "dvc", "repro")
    sh(work, "git", "add", "-A")
    sh(work, *git, "commit", "-qm", "baseline")
    for name, sets in EXPERIMENTS.items():
        sh(work, "dvc", "exp", "run", "--temp", "-n", name, *sets)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, seconds: float = 120) -> bytes:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 (127.0.0.1 only)
                return r.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class Page:
    """One Chromium tab driven through the DevTools protocol."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=60)
        self.next_id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def js(self, expr: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expr, returnByValue=True,
                        awaitPromise=True)
        return res.get("result", {}).get("value")

    def open(self, url: str, settle: float = 2.0) -> None:
        self.call("Page.navigate", url=url)
        time.sleep(settle)

    def wait_text(self, text: str, seconds: float = 120) -> None:
        """Wait until the page shows ``text`` (the UI loads its data after the page)."""
        deadline = time.monotonic() + seconds
        while not self.js(f"document.body.innerText.includes({json.dumps(text)})"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the page never showed {text!r}")
            time.sleep(0.5)
        time.sleep(2)  # let the layout settle

    def click_text(self, text: str) -> bool:
        """Click the innermost visible element whose text is exactly ``text``."""
        return bool(self.js(f"""(() => {{
            const els = [...document.querySelectorAll('button, label, span, div, a')]
              .filter(e => e.textContent.trim() === {json.dumps(text)} && e.offsetParent);
            const el = els[els.length - 1]; if (!el) return false; el.click(); return true;
        }})()"""))

    def shot(self, out: Path, width: int, height: int) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        time.sleep(1.5)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        out.write_bytes(base64.b64decode(data))
        print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")


@contextlib.contextmanager
def ui_and_browser(db: Path) -> Iterator[tuple[str, Page]]:
    """`mlflow ui` over ``db`` and headless Chromium on free 127.0.0.1 ports: the UI's base URL
    and a tab; both stopped on exit."""
    ui_port, cdp_port = free_port(), free_port()
    base = f"http://127.0.0.1:{ui_port}"
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        procs = [subprocess.Popen([str(Path(sys.executable).with_name("mlflow")), "ui",
                                   "--backend-store-uri", f"sqlite:///{db}", "--host",
                                   "127.0.0.1", "--port", str(ui_port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                 subprocess.Popen(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                                   f"--remote-debugging-port={cdp_port}",
                                   "--remote-allow-origins=*",  # Chromium 111+ asks for it
                                   f"--user-data-dir={profile}", "--no-first-run",
                                   "about:blank"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        try:
            wait_http(f"{base}/health")
            tabs = json.loads(wait_http(f"http://127.0.0.1:{cdp_port}/json/list"))
            page = Page(next(t for t in tabs if t["type"] == "page")["webSocketDebuggerUrl"])
            page.call("Page.enable")
            yield base, page
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)


def screenshots(db: Path, out: Path) -> None:
    """Start mlflow ui and Chromium, take the two screenshots, stop both."""
    import mlflow  # noqa: PLC0415 (slow import)

    client = mlflow.MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("seqcore-g2p")
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    with ui_and_browser(db) as (base, page):
        page.call("Emulation.setDeviceMetricsOverride", width=1400, height=520,
                  deviceScaleFactor=1, mobile=False)
        runs_url = (f"{base}/#/experiments/{exp.experiment_id}/runs"
                    "?workflowType=machine_learning")
        # The run table's columns are browser state (localStorage), chosen once by a user
        # with "Columns": set them, and close the assistant panel, before the app loads.
        page.open(f"{base}/health")
        key = ("MLflowLocalStorage-1.1-ExperimentPage-" + json.dumps([exp.experiment_id])
               + "-ReactComponentState")
        state = {"selectedColumns": COLUMNS}
        page.js(f"""localStorage.setItem({json.dumps(key)}, {json.dumps(json.dumps(state))});
            localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');
            localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');""")
        page.open(runs_url)
        page.wait_text("lr-half")
        page.shot(out / "mlflow_runs.png", 1400, 440)
        ids = json.dumps([r.info.run_id for r in runs])
        page.open(f"{base}/#/compare-runs?runs={ids}&experiments="
                  f"{json.dumps([exp.experiment_id])}&workflowType=machine_learning")
        page.wait_text("Show diff only")
        page.click_text("Visualizations")  # fold the plots: names, params, metrics on top
        switched = page.js("""[...document.querySelectorAll('[role=switch]')]
            .filter(b => b.getAttribute('aria-checked') !== 'true')
            .map(b => b.click()).length""")  # "Show diff only" of params, metrics, tags
        print(f"switched on {switched} 'Show diff only' toggles")
        time.sleep(2)
        page.shot(out / "mlflow_compare.png", 1400, 1000)


def result_store(repo: Path, work: Path) -> Path:
    """A fresh store holding the workspace's result: the evaluate stage run again with
    MLFLOW_TRACKING_URI pointing there (it logs the run and registers the model)."""
    db = work / "mlflow.db"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(Path.home()),
           "MLFLOW_TRACKING_URI": f"sqlite:///{db}"}
    res = subprocess.run([sys.executable, "-m", "pipeline.evaluate"], cwd=repo, env=env,
                         capture_output=True, text=True, check=False)
    if res.returncode:
        sys.exit(f"pipeline.evaluate failed:\n{res.stderr[-2000:]}")
    return db


def result_screenshots(db: Path, out: Path) -> None:
    """The registered model's page, the run table (Datasets column), the run table as the
    evaluate stage's printed link opens it (the headline columns), the run page and its
    charts."""
    import mlflow  # noqa: PLC0415 (slow import)

    from pipeline.tracking import runs_link  # noqa: PLC0415 (the repository's own code)

    client = mlflow.MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("seqcore-g2p")
    (run,) = client.search_runs([exp.experiment_id])
    with ui_and_browser(db) as (base, page):
        page.open(f"{base}/health")
        page.js("""localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');
            localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');""")
        page.call("Emulation.setDeviceMetricsOverride", width=1400, height=700,
                  deviceScaleFactor=1, mobile=False)
        page.open(f"{base}/#/models/seqcore-g2p")
        page.wait_text("Version 1")
        page.shot(out / "mlflow_model.png", 1400, 520)
        page.open(f"{base}/#/experiments/{exp.experiment_id}/runs"
                  "?workflowType=machine_learning")
        page.wait_text("cmudict-train")
        page.shot(out / "mlflow_datasets.png", 1400, 440)
        # the link the evaluate stage prints: the experiment's shared view, headline columns
        page.open(runs_link(base, exp.experiment_id))
        page.wait_text("baseline.word_error_rate")
        page.shot(out / "mlflow_headline.png", 1400, 440)
        # a run's own link opens the UI's GenAI view unless it asks for this one
        page.open(f"{base}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}"
                  "?workflowType=machine_learning")
        page.wait_text("word_error_rate")
        page.shot(out / "mlflow_run.png", 1400, 1100)
        # its charts: the loss/ and optim/ sections first, the single-value figures last
        page.open(f"{base}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}"
                  "/model-metrics?workflowType=machine_learning")
        page.wait_text("loss/train")
        page.shot(out / "mlflow_run_charts.png", 1400, 900)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img", help="folder for the PNGs (%(default)s)")
    parser.add_argument("--keep", help="build the store in this (new) folder and keep it")
    parser.add_argument("--result", action="store_true",
                        help="shoot the workspace's result (registered model, datasets, run)")
    args = parser.parse_args()
    repo, out = Path.cwd(), Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.result:
        with tempfile.TemporaryDirectory() as tmp:
            result_screenshots(result_store(repo, Path(tmp)), out)
        return
    if args.keep:
        work = Path(args.keep).resolve()
        if not (work / "mlflow.db").exists():
            work.mkdir(parents=True, exist_ok=True)
            build_store(repo, work)
        screenshots(work / "mlflow.db", out)
        return
    with tempfile.TemporaryDirectory() as tmp:
        build_store(repo, Path(tmp))
        screenshots(Path(tmp) / "mlflow.db", out)


if __name__ == "__main__":
    main()
