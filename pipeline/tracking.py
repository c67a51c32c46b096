"""MLflow logging for pipeline results. Only pipeline/ imports mlflow; seqcore never does.

If the tracking store cannot be reached, the run's content is kept in a pending JSON file and
``python -m pipeline.tracking --replay`` logs it later: nothing is lost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

MAX_PARAMS_PER_BATCH = 100  # MLflow log_batch limit
MAX_METRICS_PER_BATCH = 1000
MAX_PARAM_CHARS = 6000


def tracking_uri(configured: str) -> str:
    """MLFLOW_TRACKING_URI wins over params.yaml, so a team server needs no code change."""
    return os.environ.get("MLFLOW_TRACKING_URI") or configured


def log_run(record: dict[str, Any]) -> str:
    """Log one run from a record {uri, experiment, run_name, params, metrics, steps, tags,
    artifacts}; returns the run id."""
    import mlflow  # noqa: PLC0415 (slow import, only when logging)
    from mlflow.entities import Metric, Param, RunTag  # noqa: PLC0415

    client = mlflow.MlflowClient(tracking_uri=record["uri"])
    exp = client.get_experiment_by_name(record["experiment"])
    exp_id = exp.experiment_id if exp else client.create_experiment(record["experiment"])
    run = client.create_run(exp_id, run_name=record["run_name"])
    rid = run.info.run_id
    params = []
    for key, value in sorted(record["params"].items()):
        text = json.dumps(value) if not isinstance(value, str) else value
        if len(text) > MAX_PARAM_CHARS:
            warnings.warn(f"param {key} cut to {MAX_PARAM_CHARS} chars (MLflow limit); "
                          "the full value is in the params.yaml artifact", stacklevel=2)
            text = text[:MAX_PARAM_CHARS]
        params.append(Param(key, text))
    for i in range(0, len(params), MAX_PARAMS_PER_BATCH):
        client.log_batch(rid, params=params[i : i + MAX_PARAMS_PER_BATCH])
    metrics = [Metric(k, float(v), 0, 0) for k, v in sorted(record["metrics"].items())]
    metrics += [Metric(k, float(v), 0, int(step)) for k, step, v in record["steps"]]
    for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
        client.log_batch(rid, metrics=metrics[i : i + MAX_METRICS_PER_BATCH])
    client.log_batch(rid, tags=[RunTag(k, str(v)) for k, v in sorted(record["tags"].items())])
    for path in record["artifacts"]:
        if Path(path).exists():
            client.log_artifact(rid, path)
    client.set_terminated(rid)
    return rid


def log_or_keep(record: dict[str, Any], pending: Path) -> str | None:
    """Log the run; on any tracking failure keep the record in ``pending`` and warn once."""
    try:
        rid = log_run(record)
    except Exception as err:  # noqa: BLE001 (any store failure must not fail the pipeline)
        kept = json.loads(pending.read_text()) if pending.exists() else []
        pending.parent.mkdir(parents=True, exist_ok=True)
        pending.write_text(json.dumps(kept + [record], indent=1, sort_keys=True) + "\n")
        print(f"WARNING: MLflow store {record['uri']} unreachable ({type(err).__name__}: {err}); "
              f"run kept in {pending}; log it later with `python -m pipeline.tracking --replay`",
              file=sys.stderr)
        return None
    print(f"[mlflow] run {rid} in {record['uri']} (experiment {record['experiment']})",
          file=sys.stderr)
    return rid


def main() -> None:
    parser = argparse.ArgumentParser(description="Replay runs kept while MLflow was unreachable")
    parser.add_argument("--replay", default="reports/mlflow_pending.json")
    args = parser.parse_args()
    pending = Path(args.replay)
    if not pending.exists():
        print("nothing pending")
        return
    left = []
    for record in json.loads(pending.read_text()):
        record["uri"] = tracking_uri(record["uri"])
        try:
            print(f"logged {log_run(record)}")
        except Exception as err:  # noqa: BLE001
            print(f"still unreachable: {err}", file=sys.stderr)
            left.append(record)
    if left:
        pending.write_text(json.dumps(left, indent=1, sort_keys=True) + "\n")
        sys.exit(1)
    pending.unlink()


if __name__ == "__main__":
    main()
