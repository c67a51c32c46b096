"""Decode settings chosen on dev (issue 52): each setting of a grid (beam width, length
penalty alpha, rescoring weight) scored on the dev split, the chosen one, and the seed's
warnings about search as checks of the table. The test split is never read here
(pipeline/tune.py reads dev only)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    """One point of the grid; ``weight`` None: the model alone, no rescoring."""

    beam: int
    alpha: float
    weight: float | None


@dataclass(frozen=True)
class Scored:
    """A setting's dev figures (rates in [0, 1])."""

    setting: Setting
    wer: float  # first reference
    per: float  # token edits over first-reference tokens
    wer_any: float  # against any reference of the group


def order_key(row: Scored) -> tuple:
    """How settings are ranked: the lower dev WER, then the lower PER, then the cheaper and
    plainer setting (the narrower beam, the smaller alpha and rescoring weight)."""
    s = row.setting
    return (row.wer, row.per, s.beam, s.alpha, -1.0 if s.weight is None else s.weight)


def choose(rows: list[Scored]) -> Scored:
    """The chosen setting (:func:`order_key`); a NaN figure is never chosen."""
    usable = [r for r in rows if not (math.isnan(r.wer) or math.isnan(r.per))]
    if not usable:
        raise ValueError("no setting of the grid has a dev WER and PER (an empty dev split?)")
    return min(usable, key=order_key)


def wider_beam_checks(rows: list[Scored]) -> list[str]:
    """The seed's warning as a check, one line per alpha and weight: the beams that score a
    worse dev WER than a narrower one (a wider beam is not always better: it finds outputs
    the model prefers and the references do not)."""
    groups: dict[tuple, list[Scored]] = defaultdict(list)
    for row in rows:
        groups[(row.setting.alpha, row.setting.weight)].append(row)
    out = []
    for (alpha, weight), group in sorted(groups.items(), key=lambda kv: str(kv[0])):
        best, worse = None, []
        for row in sorted(group, key=lambda r: r.setting.beam):
            if best is not None and row.wer > best.wer:
                worse.append(f"{row.setting.beam} ({100 * row.wer:.2f} %)")
            if best is None or row.wer < best.wer:
                best = row
        if worse:
            out.append(f"alpha {alpha:g}, {_weight_text(weight)}: beam {', '.join(worse)} "
                       f"worse than beam {best.setting.beam} ({100 * best.wer:.2f} %) on dev "
                       "WER; a wider beam is not always better")
    return out


def _weight_text(weight: float | None) -> str:
    return "the model alone" if weight is None else f"rescoring weight {weight:g}"


def table_markdown(rows: list[Scored], chosen: Scored, checks: list[str], dev_rows: int) -> str:
    """The table as Markdown: one row per setting (the chosen one marked), then the checks."""
    lines = [f"# Decode settings on dev ({dev_rows:,} rows)", "",
             "| beam | alpha | rescoring weight | WER | WER any ref. | PER | chosen |",
             "|---:|---:|---|---:|---:|---:|---|"]
    for row in rows:
        s = row.setting
        lines.append(f"| {s.beam} | {s.alpha:g} | {'none' if s.weight is None else f'{s.weight:g}'}"
                     f" | {100 * row.wer:.2f} | {100 * row.wer_any:.2f} | {100 * row.per:.2f} "
                     f"| {'**chosen**' if row is chosen else ''} |")
    lines += ["", "Chosen: the lowest dev WER; ties go to the lower PER, then to the narrower "
              "beam, the smaller alpha and rescoring weight. The test split was not read.", ""]
    lines += ["## Checks", ""] + ([f"- {c}" for c in checks] or ["- none"])
    return "\n".join(lines) + "\n"


def table_csv(rows: list[Scored]) -> str:
    """The table as CSV (rates in [0, 1], as Python prints them)."""
    out = ["beam,alpha,rescore_weight,wer,wer_any_ref,per"]
    out += [f"{r.setting.beam},{r.setting.alpha!r},"
            f"{'' if r.setting.weight is None else repr(r.setting.weight)},"
            f"{r.wer!r},{r.wer_any!r},{r.per!r}" for r in rows]
    return "\n".join(out) + "\n"
