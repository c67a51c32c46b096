"""Serving cost of the committed result (issue 51): what the served system (the model
rescoring the baseline's n-best, as scored) costs against the model alone.

    python -m benchmarks.serve --words 1000 --single 50    # after `make repro`
    python -m benchmarks.serve --http                       # also `mlflow models serve`

Rows: load time, words/s one word per call and in one batch of ``--words`` test words, for
``pipeline.predict``'s in-process ``Predictor`` under the result's decode settings and under
``decode.rescore: none``; with ``--http``, the same through the registered model served by
``mlflow models serve`` on 127.0.0.1 (single-word requests and one batch). Then the packed
model's size, and how many test words answered one at a time differ from the decode stage's
row (float sums of other padded batches). A benchmark, not a test: it asserts nothing and
its figures depend on the machine's load; run it alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
import urllib.request
from pathlib import Path

from benchmarks.load import served
from seqcore.artifacts.predictions import Predictions
from seqcore.config import load_config
from seqcore.predictor import Predictor


def timed_predictor(params: str, rescore: bool) -> tuple[Predictor, float]:
    """The result's predictor (``rescore``: as scored; else the model alone), load seconds."""
    cfg = load_config(params)
    if not rescore:
        cfg = dataclasses.replace(cfg, decode=dataclasses.replace(cfg.decode, rescore="none"))
    start = time.perf_counter()
    predictor = Predictor.of_result(cfg)
    return predictor, time.perf_counter() - start


def rates(answer: object, words: list[str], single: int) -> tuple[float, float, list[str]]:
    """(words/s one per call over the first ``single``, words/s in one batch, batch outputs)."""
    start = time.perf_counter()
    for w in words[:single]:
        answer([w])
    one = single / (time.perf_counter() - start)
    start = time.perf_counter()
    outputs = answer(words)
    return one, len(words) / (time.perf_counter() - start), outputs


def http_answer(url: str):  # noqa: ANN201
    def answer(words: list[str]) -> list[str]:
        body = json.dumps({"dataframe_split": {"columns": ["source"],
                                               "data": [[w] for w in words]}}).encode()
        req = urllib.request.Request(f"{url}/invocations", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as resp:
            return [r.get("prediction") or "" for r in json.loads(resp.read())["predictions"]]
    return answer


def http_rows(model_uri: str, tracking_uri: str, words: list[str], single: int
              ) -> tuple[float, float, float]:
    """(start seconds, words/s single, words/s batch) of `mlflow models serve`."""
    start = time.perf_counter()
    with served(model_uri, tracking_uri, Path.cwd()) as (url, _):
        up = time.perf_counter() - start
        one, batch, _ = rates(http_answer(url), words, single)
    return up, one, batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--words", type=int, default=1000, help="test words in the batch")
    parser.add_argument("--single", type=int, default=50, help="words asked one at a time")
    parser.add_argument("--http", action="store_true", help="also `mlflow models serve`")
    parser.add_argument("--model-uri", default="models:/seqcore-g2p/latest")
    parser.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    args = parser.parse_args()
    cfg = load_config(args.params)
    rows = Predictions.load(Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl").rows
    words = [r.source for r in rows[:args.words]]
    print("| path | system | load s | words/s, one per call | words/s, batch of "
          f"{len(words)} |\n|---|---|---:|---:|---:|")
    batch_note = "the result is not rescored"
    for rescore in (True, False):
        predictor, load_s = timed_predictor(args.params, rescore)
        name = "as scored (rescoring)" if predictor.rescoring else "model alone"

        def answer(ws: list[str], p: Predictor = predictor) -> list[str]:
            return [a.output for a in p.answer(ws)]
        one, batch, outputs = rates(answer, words, args.single)
        print(f"| predict (in-process) | {name} | {load_s:.2f} | {one:.1f} | {batch:.0f} |",
              flush=True)
        if predictor.rescoring:
            same = sum(o == r.hypothesis for o, r in zip(outputs, rows, strict=False))
            alone = [answer([w])[0] for w in words[:args.single]]
            moved = sum(a != r.hypothesis for a, r in zip(alone, rows, strict=False))
            batch_note = (f"batch in file order: {same} of {len(words)} equal to the decode "
                          f"stage's rows; one at a time: {moved} of {args.single} differ")
    if args.http:
        up, one, batch = http_rows(args.model_uri, args.tracking_uri, words, args.single)
        print(f"| mlflow models serve (HTTP) | registered version | {up:.1f} (start) | "
              f"{one:.1f} | {batch:.0f} |")
    sizes = {p: Path(p).stat().st_size for p in (cfg.paths.model,
                                                 str(Path(cfg.paths.baseline) / "model.fst"))}
    print("\n" + batch_note)
    print("packed: " + ", ".join(f"{p} {n / 1e6:.1f} MB" for p, n in sizes.items()))


if __name__ == "__main__":
    main()
