"""``python -m pipeline.compare A B``: is B better than A, or is the difference noise?

A and B each name a result: a predictions file (``predictions/test.jsonl``, or the baseline's
``baseline/test.jsonl``), a folder holding one (a repository, a copy of one, ``predictions/``
or ``baseline/`` itself), a git revision or `dvc exp`
name of this repository (the file is read through DVC: the cache or the remote), or an MLflow
run id of the configured store (its `dvc exp` name or git commit, then as a revision). Both
must hold the same rows of the same split (ids, sources and references) of the same data.

Prints each headline metric of A and B, the difference B - A, its paired-bootstrap interval
and p-value, and an approximate-randomization p-value (resamples, trials and seed from the
``evaluate`` section: ``bootstrap_samples``, ``bootstrap_seed``, ``confidence``); the same per
reference-length bucket and per failure mode; and the examples that flipped. ``--out DIR``
writes compare.json and compare.md; ``--log [RUN_ID]`` attaches them to that MLflow run (by
default the newer run among A and B): artifacts ``compare/<other>.md`` and ``.json``, tags
``compare.<other>.<metric>.p`` (bootstrap p-values), so the comparison shows in the UI. A name that cannot be found or two results that are not
comparable stop with one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

from pipeline.results import RUN_ID, NotFound, check_same_data, find_result
from pipeline.stage import load_params
from seqcore.config import Config, ConfigError
from seqcore.errors import OneLineError
from seqcore.metrics.comparison import NotComparable, compare_rows, render
from seqcore.metrics.recompute import resampling
from seqcore.nulls import null_undefined
from seqcore.tasks.parallel.evaluate import eval_spec

USAGE_ERROR = 2


def compare(a_name: str, b_name: str, cfg: Config, examples: int = 10) -> tuple[str, dict]:
    """(markdown, json-ready dict) of B against A."""
    a, b = find_result(a_name, cfg), find_result(b_name, cfg)
    for side in (a, b):
        if side.header.signature is None:  # task lm: decode writes a note, no rows
            raise NotComparable(f"{side.name}: {side.origin} holds no decoded rows "
                                f"({side.header.note or 'no contract signature'})")
    check_same_data(a, b)
    r = resampling(cfg)
    out = compare_rows(a.rows, b.rows, eval_spec(cfg), r, examples)
    out = {"a": {"name": a.name, "origin": a.origin}, "b": {"name": b.name, "origin": b.origin},
           **out}
    return render(out, r.confidence), null_undefined(out)


#: What ``--log`` writes on a run: artifacts under this folder, tags under this prefix (the
#: audit accepts both on a run: a comparison made later, not by the pipeline).
LOG_FOLDER, LOG_TAG = "compare/", "compare."


def log_comparison(a_name: str, b_name: str, text: str, data: dict, cfg: Config,
                   target: str = "") -> str:
    """Attach the comparison to MLflow run ``target``, or (``""``) to the newer run among A
    and B; returns its id.

    Raises:
        NotFound: no run to attach to, or no such run.
    """
    import mlflow  # noqa: PLC0415 (slow import)

    from pipeline.record import tracking_uri  # noqa: PLC0415 (only for a run id)

    named = [target] if target else [n for n in (a_name, b_name) if RUN_ID.match(n)]
    if not named:
        raise NotFound(f"--log: neither {a_name} nor {b_name} is an MLflow run id; name the "
                       "run to attach the comparison to (--log RUN_ID)")
    uri = tracking_uri(cfg.mlflow.tracking_uri)
    client = mlflow.MlflowClient(uri)
    try:
        rid = max(named, key=lambda n: client.get_run(n).info.start_time)
    except Exception:  # noqa: BLE001 (MlflowException: no such run)
        raise NotFound(f"--log: {' or '.join(named)}: no MLflow run with this id in {uri}") \
            from None
    # the tags name the other side: the one that is not the run, else B (A is the reference)
    other = re.sub(r"[^\w.\-]", "_", a_name if rid == b_name else b_name)
    other = other.strip("_.")[-48:] or "other"
    client.log_text(rid, text, f"{LOG_FOLDER}{other}.md")
    client.log_text(rid, json.dumps(data, indent=2, sort_keys=True) + "\n",
                    f"{LOG_FOLDER}{other}.json")
    for metric, row in sorted(data["headline"].items()):
        if row.get("p_bootstrap") is not None:
            client.set_tag(rid, f"{LOG_TAG}{other}.{metric}.p", f"{row['p_bootstrap']:g}")
    return rid


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the baseline: predictions file, folder, revision or run id")
    parser.add_argument("b", help="the result compared with it (differences are B - A)")
    parser.add_argument("--params", default="params.yaml",
                        help="evaluate settings (resamples, seed, buckets) and paths")
    parser.add_argument("--samples", type=int, default=None,
                        help="bootstrap resamples and randomization trials "
                             "(default: evaluate.bootstrap_samples)")
    parser.add_argument("--seed", type=int, default=None,
                        help="default: evaluate.bootstrap_seed")
    parser.add_argument("--examples", type=int, default=10, help="flipped examples listed")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="also write DIR/compare.json and DIR/compare.md")
    parser.add_argument("--log", nargs="?", const="", default=None, metavar="RUN_ID",
                        help="attach the comparison to this MLflow run (default: the newer "
                             "run among A and B)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        cfg = load_params(args.params)
        ev = cfg.evaluate
        cfg = replace(cfg, evaluate=replace(
            ev, bootstrap_samples=ev.bootstrap_samples if args.samples is None else args.samples,
            bootstrap_seed=ev.bootstrap_seed if args.seed is None else args.seed))
        text, data = compare(args.a, args.b, cfg, args.examples)
        logged = None if args.log is None else log_comparison(args.a, args.b, text, data, cfg,
                                                               args.log)
    except (ConfigError, NotFound, NotComparable, OneLineError) as err:
        print(f"compare: {err}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR) from None
    print(text, end="")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.md").write_text(text, encoding="utf-8")
        (out / "compare.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n",
                                          encoding="utf-8")
    if logged:
        print(f"compare: attached to MLflow run {logged}", file=sys.stderr)
    print(f"compare took {time.perf_counter() - start:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
