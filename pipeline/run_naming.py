"""A run's name and description: what tells it apart from the committed baseline (the params
that changed, the DVC experiment) and the story of its report, for the MLflow run table and
run page."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from seqcore.config import Config, config_from_dict
from seqcore.signature import result_params


RUN_NAME_CHARS = 40  # the run table shows about this much of a name


def param_text(value: Any) -> str:
    """How a param value is written to MLflow (strings as is, the rest as JSON)."""
    return value if isinstance(value, str) else json.dumps(value)


def baseline_params(rev: str) -> dict[str, Any]:
    """The result params (seqcore.signature.result_params) of ``rev``'s params.yaml with
    defaults filled in ({} if unreadable)."""
    import yaml  # noqa: PLC0415 (only for a committed params.yaml)

    res = subprocess.run(["git", "show", f"{rev}:params.yaml"], capture_output=True, text=True,
                         check=False)
    if res.returncode != 0:  # no commit yet, or params.yaml not committed
        return {}
    try:
        return result_params(config_from_dict(yaml.safe_load(res.stdout) or {}))
    except (ValueError, TypeError, yaml.YAMLError):
        return {}


def changed_params(cfg: Config, base_rev: str) -> dict[str, tuple[Any, Any]]:
    """key -> (baseline value, this run's value) for every param that differs from the
    baseline commit ``base_rev`` (RunOrigin)."""
    base = baseline_params(base_rev)
    if not base:
        return {}
    return {k: (base.get(k), v) for k, v in result_params(cfg).items() if base.get(k) != v}


def run_name(exp: str | None, changed: dict[str, tuple[Any, Any]], sig8: str) -> str:
    """Short, leading with what tells the run apart: the DVC experiment name, then up to
    three changed params (last key part only); ``baseline-<sig>`` when nothing changed."""
    parts = [exp] if exp else []
    parts += [f"{k.rsplit('.', 1)[-1]}={param_text(v)}" for k, (_, v) in
              sorted(changed.items())[:3]]
    name = " ".join(parts) or f"baseline-{sig8}"
    return name if len(name) <= RUN_NAME_CHARS else name[: RUN_NAME_CHARS - 1] + "…"


#: How much of report.md the run's description holds (MLflow keeps 8,000 characters of a tag).
NOTE_REPORT_CHARS = 5000


def report_lead(report: str) -> str:
    """The story part of report.md for the run's description: everything before its full
    headline table (the error rates with intervals, beside the baseline, the training), at
    most NOTE_REPORT_CHARS; the whole report is the ``reports/report.md`` artifact."""
    lead = report.split("\n## Headline", 1)[0].rstrip()
    if len(lead) > NOTE_REPORT_CHARS:
        lead = lead[:NOTE_REPORT_CHARS].rsplit("\n", 1)[0] + "\n\n(cut here)"
    return lead + "\n\nThe whole report: artifact `reports/report.md`." if lead else ""


def headline_line(metrics: dict[str, Any]) -> str:
    """The headline figures of the run page, each with the baseline's beside it when the
    run has one (issue 55: the page opens on them, not on MLflow's alphabetical table, where
    the 35 ``baseline.*`` rows come first)."""
    split = metrics.get("split", "test")
    parts = []
    for label, key in (("WER", "word_error_rate"), ("PER", "token_error_rate"),
                       (f"{split} perplexity", f"{split}_perplexity"),
                       ("exact match", "exact_match")):
        value, base = metrics.get(key), metrics.get(f"baseline.{key}")
        if isinstance(value, (int, float)):
            beside = f" (baseline {base:.4f})" if isinstance(base, (int, float)) else ""
            parts.append(f"{label} {value:.4f}{beside}")
    return " · ".join(parts)


def run_note(name: str, metrics: dict[str, Any], changed: dict[str, tuple[Any, Any]],
             report: str = "") -> str:
    """The run's description (``mlflow.note.content``, Markdown): headline metrics, the
    params that differ from the baseline, then the lead of the report (issue 29: the run
    page tells the result's story without opening an artifact)."""
    lines = [f"**{name}**", "", headline_line(metrics), ""]
    if changed:
        lines += ["Params changed from the baseline:", ""] + [
            f"- `{k}`: {param_text(a)} → {param_text(b)}"
            for k, (a, b) in sorted(changed.items())]
    else:
        lines.append("Baseline params (no change from the commit).")
    lead = report_lead(report)
    return "\n".join(lines + (["", "---", "", lead] if lead else []))
