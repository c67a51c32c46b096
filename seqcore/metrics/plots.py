"""PNG images of the report's plots (matplotlib, Agg backend) for readers without DVC.

The same data is declared as DVC plots in dvc.yaml (`dvc plots show` renders it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402 (after matplotlib.use)

from seqcore.artifacts.train_log import StepLog, TrainLog  # noqa: E402 (below the backend choice)

#: (column, axis title) of the bucket panels: the same series as dvc.yaml's bucket plots.
BUCKET_SERIES = (("word_error_rate", "word error rate"),
                 ("token_error_rate", "token error rate (PER)"),
                 ("exposure_bias_gap", "exposure-bias gap"))


def _points(rows: Sequence[StepLog], col: str) -> list[tuple[float, float]]:
    pts = [(float(r.step), float(getattr(r, col))) for r in rows]
    return [(s, v) for s, v in pts if not math.isnan(v)]


def training_curve_png(train_log: Path, out: Path) -> None:
    """Training loss and dev NLL against the optimisation step and, when the training decoded
    a dev sample (issue 52), its WER and PER on a second axis."""
    rows = TrainLog.load(train_log).rows
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for col, style in (("loss", "-"), ("dev_nll", "o-")):
        if pts := _points(rows, col):
            ax.plot(*zip(*pts), style, label=col, markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("nats per token")
    rates = [(col, pts) for col in ("dev_wer", "dev_per") if (pts := _points(rows, col))]
    if rates:
        right = ax.twinx()
        for (col, pts), style in zip(rates, ("s--", "^--")):
            right.plot(*zip(*[(s, 100 * v) for s, v in pts]), style, label=f"{col} (%)",
                       markersize=3, color="tab:red" if col == "dev_wer" else "tab:purple")
        right.set_ylabel("dev sample error rate (%)")
        right.legend(loc="upper center")
    ax.set_title("Training curve (train loss incl. label smoothing; dev NLL"
                 + ("; dev decoding)" if rates else ")"))
    ax.legend()
    _save(fig, out)


def bucket_png(buckets: list[dict[str, Any]], out: Path) -> None:
    """One panel of horizontal bars per series, by reference-length bucket (with counts)."""
    series = [(c, t) for c, t in BUCKET_SERIES if buckets and c in buckets[0]]
    fig, axes = plt.subplots(1, max(len(series), 1), figsize=(9, 3.2), sharey=True,
                             squeeze=False)
    labels = [f"{b['bucket']} (n={b['count']})" for b in buckets]
    for ax, (col, title) in zip(axes[0], series, strict=False):
        ax.barh(labels, [b[col] for b in buckets], color="tab:blue")
        ax.set_xlabel(title)
    axes[0][0].invert_yaxis()  # shared: shortest bucket on top in every panel
    axes[0][0].set_ylabel("reference length (tokens)")
    fig.suptitle("Metrics by reference-length bucket")
    _save(fig, out)


def failure_png(table: list[dict[str, Any]], out: Path) -> None:
    """Horizontal bars of each failure-mode rate."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = [r["mode"] for r in table]
    rates = [r["rate"] for r in table]
    ax.barh(names, rates, color="tab:red")
    for y, rate in enumerate(rates):
        ax.text(rate, y, f" {rate:.3f}", va="center", fontsize=8)
    ax.set_xlim(0, max(0.05, *rates) * 1.2)
    ax.invert_yaxis()
    ax.set_xlabel("rate")
    ax.set_title("Failure-mode rates")
    _save(fig, out)


def _save(fig: plt.Figure, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    # Fixed metadata: the same data gives the same PNG bytes (no timestamp or version).
    fig.savefig(out, dpi=100, metadata={"Software": None})
    plt.close(fig)
