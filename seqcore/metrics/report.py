"""reports/report.md: a human-readable summary of an evaluation."""

from __future__ import annotations

import json
from typing import Any

from seqcore.metrics.evaluation import Evaluation

_HEADLINE = ("exact_match", "exact_match_multi_ref", "token_error_rate", "char_error_rate",
             "test_perplexity", "test_ppl_denominator_tokens", "dev_perplexity", "bleu", "chrf",
             "ter", "examples")


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def render_report(metrics: dict[str, Any], ev: Evaluation, decode: dict[str, Any],
                  signature: str) -> str:
    """Markdown with the headline, bucket and failure-mode tables and the exact settings."""
    lines = [f"# Evaluation report ({metrics['split']} split)", "",
             f"Contract: `{signature}`", "", "## Headline", "", "| metric | value |",
             "|---|---|"]
    lines += [f"| {k} | {_fmt(metrics[k])} |" for k in _HEADLINE if k in metrics]
    lines += ["", "Word error rate = 1 - exact_match. Perplexity is per target token (EOS "
              "included, PAD and BOS excluded) over the denominator shown, under this "
              "tokenizer only.", "", "## By reference length", ""]
    cols = list(ev.buckets[0]) if ev.buckets else []
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(b[c]) for c in cols) + " |" for b in ev.buckets]
    lines += ["", "## Failure modes", "", "| mode | count | rate | examples |", "|---|---|---|---|"]
    for kind, info in ev.failures.items():
        if "count" not in info:
            continue
        ex = "; ".join(f"`{e['source']}` → `{e['hypothesis']}` (ref `{e['reference']}`)"
                       for e in info["examples"])
        lines.append(f"| {kind} | {info['count']} | {info['rate']:.4f} | {ex} |")
    lines += ["", f"Length ratio (hyp/ref): {json.dumps(ev.failures['length_ratio'])}", "",
              f"Rules: {json.dumps(ev.failures['rules'])}", "", "## Decode settings", "",
              "```json", json.dumps(decode, indent=2, sort_keys=True), "```", ""]
    return "\n".join(lines)
