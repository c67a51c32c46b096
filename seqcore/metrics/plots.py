"""PNG images of the report's plots (matplotlib, Agg backend) for readers without DVC.

The same data is declared as DVC plots in dvc.yaml (`dvc plots show` renders it).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

BUCKET_SERIES = ("exact_match", "token_error_rate", "fr_token_accuracy", "tf_token_accuracy")


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def training_curve_png(train_log: Path, out: Path) -> None:
    """Training loss and dev NLL against the optimisation step."""
    with open(train_log, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for col, style in (("loss", "-"), ("dev_nll", "o-")):
        pts = [(_number(r["step"]), _number(r.get(col, ""))) for r in rows]
        pts = [(s, v) for s, v in pts if not math.isnan(v)]
        if pts:
            ax.plot(*zip(*pts), style, label=col, markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("nats per token")
    ax.set_title("Training curve (train loss incl. label smoothing; dev NLL)")
    ax.legend()
    _save(fig, out)


def bucket_png(buckets: list[dict[str, Any]], out: Path) -> None:
    """Grouped bars of the main rates per reference-length bucket, counts under the labels."""
    series = [s for s in BUCKET_SERIES if buckets and s in buckets[0]]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    width = 0.8 / max(len(series), 1)
    for k, name in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(buckets))]
        ax.bar(xs, [b[name] for b in buckets], width, label=name)
    ax.set_xticks(range(len(buckets)),
                  [f"{b['bucket']}\n(n={b['count']})" for b in buckets])
    ax.set_xlabel("reference length (tokens)")
    ax.set_ylim(0, max(1.0, *(b[s] for b in buckets for s in series if not math.isnan(b[s]))))
    ax.set_title("Metrics by reference-length bucket")
    ax.legend(fontsize=7)
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
