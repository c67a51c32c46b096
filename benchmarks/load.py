"""A bounded load test of the served model (issue 54): `mlflow models serve` of a registered
version on 127.0.0.1, hit by 1, 8 and 32 concurrent clients with batches of 1 and 256 words,
valid and broken inputs mixed, a fixed number of requests per setting (it stops by itself).

    python -m benchmarks.load                          # the committed result, after make repro
    python -m benchmarks.load --requests 64 --clients 1 8 --batches 1 16

Every response is checked against the answer the same request got alone (a request's rows
are decoded together, so the reference is the same body, sent sequentially first): a lost
request, a broken input answered, or a broken input that changes a valid neighbour's answer
is counted, never skipped. Prints one Markdown row per setting: throughput
(words/s, requests/s), p50/p99 latency, failures, and the server's resident memory (the
serving process and its workers, from /proc) before and after. A benchmark, not a test:
run it alone; tests/mlflow/test_registry.py runs a small version of it in the suite.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Inputs the served model must refuse, each with its own problem: empty, unseen characters,
#: far longer than any training source.
BROKEN = ["", "ß☃q", "a" * 500]


@dataclass(frozen=True)
class Outcome:
    """What one setting gave."""

    seconds: float
    latencies: list[float]
    words: int
    failures: list[str]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants (MB, from /proc; 0 when gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{p}/task").iterdir():
                children = (task / "children").read_text().split()
                todo += [int(c) for c in children]
    return total / 1024


@contextlib.contextmanager
def served(model_uri: str, tracking_uri: str, cwd: Path, log: Path | None = None,
           env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """`mlflow models serve` on a free loopback port: (its URL, its pid); its output goes to
    ``log`` (default: nowhere), and a server that does not answer within 180 s is an error
    that quotes it. ``env``: the server's environment (default this process's)."""
    port = free_port()
    env = {**(env or os.environ), "MLFLOW_TRACKING_URI": tracking_uri}
    # this interpreter's mlflow and the server it starts (uvicorn) first on PATH, also when
    # its venv is not (`.venv/bin/python -m pytest`)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    out = open(log, "w+b") if log else subprocess.DEVNULL  # noqa: SIM115
    server = subprocess.Popen(
        [shutil.which("mlflow", path=env["PATH"]) or "mlflow", "models", "serve", "-m",
         model_uri, "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)], cwd=cwd,
        env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    said = log.read_text(errors="replace")[-3000:] if log else ""
                    raise RuntimeError(f"mlflow models serve did not start\n{said}") from None
                time.sleep(0.2)
        yield url, server.pid
    finally:
        server.terminate()
        server.wait(timeout=30)
        if log:
            out.close()


def request(url: str, words: list[str]) -> tuple[int, list[dict]]:
    """(HTTP status, the rows) of one invocation."""
    body = json.dumps({"dataframe_split": {"columns": ["source"],
                                           "data": [[w] for w in words]}}).encode()
    req = urllib.request.Request(f"{url}/invocations", body,
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            return resp.status, json.loads(resp.read())["predictions"]
    except urllib.error.HTTPError as err:
        return err.code, []


def bodies(words: list[str], batch: int, count: int) -> list[list[str]]:
    """``count`` request bodies of ``batch`` inputs, every 8th input a broken one."""
    out, i = [], 0
    for _ in range(count):
        body = []
        for _ in range(batch):
            body.append(BROKEN[i // 8 % len(BROKEN)] if i % 8 == 7 else words[i % len(words)])
            i += 1
        out.append(body)
    return out


def check(body: list[str], status: int, rows: list[dict], alone: list[dict]) -> str:
    """Why a response is wrong ("" when it is right): every row as the body alone got it (its
    prediction and problem), and a problem for every broken input."""
    if status != 200 or len(rows) != len(body):
        return f"status {status}, {len(rows)} rows for {len(body)} inputs"
    for word, row, want in zip(body, rows, alone, strict=True):
        if word in BROKEN and not row.get("problem"):
            return f"{word[:20]!r}: answered {row.get('prediction')!r}"
        got, ref = ((r.get("prediction"), r.get("problem")) for r in (row, want))
        if got != ref:
            return f"{word[:20]!r}: {got!r}, alone {ref!r}"
    return ""


def run_setting(url: str, reqs: list[list[str]], alone: dict[int, list[dict]],
                clients: int) -> Outcome:
    """Send ``reqs`` from ``clients`` threads; each response checked against ``alone``."""
    def one(i: int) -> tuple[float, str]:
        start = time.perf_counter()
        status, rows = request(url, reqs[i])
        return time.perf_counter() - start, check(reqs[i], status, rows, alone[i % len(alone)])

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, range(len(reqs))))
    return Outcome(time.perf_counter() - start, [r[0] for r in results],
                   sum(len(b) for b in reqs), [r[1] for r in results if r[1]])


def load_test(url: str, pid: int, words: list[str], clients: list[int], batches: list[int],
              count: int, distinct: int = 4) -> list[str]:
    """The table's rows, one per (clients, batch) setting."""
    rows = []
    for batch in batches:
        reqs = bodies(words, batch, count)
        # the reference: each distinct body alone (requests repeat every ``distinct``)
        reqs = [reqs[i % distinct] for i in range(count)]
        alone = {i: request(url, reqs[i])[1] for i in range(distinct)}
        for c in clients:
            before = tree_rss_mb(pid)
            out = run_setting(url, reqs, alone, c)
            lat = sorted(out.latencies)
            p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
            rows.append(
                f"| {c} | {batch} | {count} | {out.words / out.seconds:.0f} | "
                f"{count / out.seconds:.1f} | {1000 * statistics.median(lat):.0f} | "
                f"{1000 * p99:.0f} | {len(out.failures)} | {before:.0f} -> "
                f"{tree_rss_mb(pid):.0f} |")
            print(rows[-1], flush=True)
            if out.failures:
                print(f"  first failure: {out.failures[0]}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-uri", default="models:/seqcore-g2p/latest")
    parser.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    parser.add_argument("--words", default="predictions/test.jsonl",
                        help="a predictions file whose sources are the valid inputs")
    parser.add_argument("--requests", type=int, default=96, help="requests per setting")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 256])
    args = parser.parse_args()
    with open(args.words, encoding="utf-8") as f:
        words = [json.loads(line)["source"] for line in f]
    print("| clients | batch | requests | words/s | requests/s | p50 ms | p99 ms | failed | "
          "server RSS MB |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|", flush=True)
    with served(args.model_uri, args.tracking_uri, Path.cwd()) as (url, pid):
        load_test(url, pid, words, args.clients, args.batches, args.requests)


if __name__ == "__main__":
    main()
