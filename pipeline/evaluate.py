"""Stage evaluate: metrics, buckets, failure modes and report; log one MLflow run.

What is scored is the task's piece (seqcore.tasks): the pair tasks score the predictions
against the references (WER, PER, failure modes, teacher-forced NLL); ``task: lm`` reports
dev and test perplexity with carried and reset state. Either way one MLflow run is logged.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pipeline.stage import cpu_kernels, stage_main
from pipeline.task_io import PipelineIO
from pipeline.dvc_files import pipeline_stages
from pipeline.record import RunOrigin, build_record
from pipeline.timing import pipeline_metrics
from pipeline.tracking import log_or_keep
from seqcore.config import Config
from seqcore.tasks import get_task
from seqcore.tasks.base import Evaluated


def run(cfg: Config) -> Evaluated:
    """Every file this stage writes (metrics, buckets, details, report); no MLflow."""
    return get_task(cfg.task).evaluate(cfg, PipelineIO(cfg, "evaluate"))


def main(cfg: Config) -> None:
    """The stage on the loaded params: ``run``, then its MLflow run (logged, or kept)."""
    # the teacher-forced figures run the model like decode does, under decode's profile
    cpu_kernels(cfg.decode.cpu_kernels, "cpu", "decode.cpu_kernels", "evaluate")
    out = run(cfg)
    record = build_record(cfg, out.metrics, out.signature, out.header, out.pred_path,
                          out.contract, RunOrigin.from_environment())
    timing = pipeline_metrics(pipeline_stages(), "evaluate")
    log_or_keep(replace(record, timing=timing), Path(cfg.paths.mlflow_pending))


if __name__ == "__main__":
    stage_main("evaluate", __doc__, main)
