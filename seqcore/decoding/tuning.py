"""Decode settings chosen on dev (issue 52): each setting of a grid (beam width, length
penalty alpha, rescoring weight) scored on the dev split, the chosen one, and the seed's
warnings about search as checks of the table. Only the dev split is read (``tune`` opens
dev's encoded examples and baseline n-best); ``python -m pipeline.tune`` is the command."""

from __future__ import annotations

import math
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from seqcore.artifacts.model_file import ModelFile
from seqcore.artifacts.predictions import Predictions
from seqcore.config import Config, ConfigError, DecodeConfig
from seqcore.data.examples import read_examples
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.decoding.rescore import pick, scored_candidates
from seqcore.determinism import set_determinism
from seqcore.metrics.evaluation import row_stats
from seqcore.metrics.scores import ErrorStats
from seqcore.tokenizer import load_tokenizers


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


#: The default grid: the beam widths and alphas around the default's, every tenth of weight.
BEAMS, ALPHAS = (1, 3, 5, 8), (0.0, 0.6, 1.0)
WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))


def decode_and_score(model: torch.nn.Module, examples: list, decode: DecodeConfig, toks: Any,
                     base: dict) -> tuple[list, list]:
    """The model's own rows of ``examples`` under ``decode``, and with ``base`` (the baseline's
    n-best rows by id; empty: no rescoring) each row's candidates scored for ``pick``."""
    with torch.inference_mode():
        rows = decode_examples(model, examples, make_decoder(decode, toks.ids), toks.ids,
                               toks.tgt, decode.batch_size)
        scored = scored_candidates(model, examples, rows, base, toks.tgt, toks.ids,
                                   decode.batch_size) if base else []
    return rows, scored


def own_and_rescored(model: torch.nn.Module, examples: list, decode: DecodeConfig, toks: Any,
                     base: dict) -> tuple[list, list]:
    """The model's own rows of ``examples`` and the system's that rescores ``base`` (the
    baseline's n-best rows by id) at ``decode.rescore_weight``."""
    rows, scored = decode_and_score(model, examples, decode, toks, base)
    return rows, [pick(r, cs, decode.rescore_weight, toks.tgt)
                  for r, cs in zip(rows, scored, strict=True)]


def tune(cfg: Config, beams: list[int], alphas: list[float],
         weights: list[float]) -> tuple[list[Scored], int]:
    """Every setting of the grid scored on dev, in grid order, and the dev row count."""
    saved = ModelFile.load(cfg.paths.model)
    model, meta = saved.build(), saved.meta
    toks = load_tokenizers(cfg.paths.tokenizer_contract, meta.tokenizer_sha256())
    set_determinism(cfg.decode.seed, meta.threads)
    examples = read_examples(Path(cfg.paths.encoded) / "dev.jsonl")
    rescored = cfg.decode.rescore == "baseline"
    base = ({r.id: r for r in Predictions.load(Path(cfg.paths.baseline) / "dev.jsonl").rows}
            if rescored else {})

    def figures(setting: Setting, rows: list) -> Scored:
        s = sum(row_stats(rows), ErrorStats()).scores()
        return Scored(setting, s["word_error_rate"], s["token_error_rate"],
                      1 - s["exact_match_multi_ref"])

    out = []
    for beam in beams:
        for alpha in alphas:
            start = time.perf_counter()
            decode = replace(cfg.decode, split="dev", strategy="beam", beam_size=beam,
                             alpha=alpha)
            rows, scored = decode_and_score(model, examples, decode, toks, base)
            out.append(figures(Setting(beam, alpha, None), rows))
            out += [figures(Setting(beam, alpha, w), [
                pick(r, cs, w, toks.tgt) for r, cs in zip(rows, scored, strict=True)])
                for w in (weights if rescored else [])]
            print(f"[tune] beam {beam}, alpha {alpha:g}: {len(rows):,} dev rows in "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return out, len(examples)


def write_params(path: Path, chosen: Scored) -> None:
    """Set the chosen decode settings and ``tuned_on: dev`` in params.yaml, in place: each
    key's line in the decode section, comments (a line's own too) and order kept."""
    s = chosen.setting
    values = {"beam_size": str(s.beam), "alpha": f"{s.alpha!r}", "tuned_on": "dev"}
    # the model alone won: no rescoring; else the weight that won
    values |= {"rescore": "none"} if s.weight is None else {"rescore_weight": f"{s.weight!r}"}
    text = path.read_text(encoding="utf-8")
    section = re.search(r"(?ms)^decode:\n(.*?)(?=^\S|\Z)", text)
    if section is None:
        raise ConfigError(f"{path}: no decode section to write the chosen settings into")
    body = section.group(1)
    for key, value in values.items():
        # the value only: the spaces before a line's comment stay (YAML needs them)
        body, n = re.subn(rf"(?m)^(  {key}:)[^\n#]*?([ \t]*(?:#[^\n]*)?)$",
                          rf"\g<1> {value}\g<2>", body, count=1)
        if n != 1:
            raise ConfigError(f"{path}: decode.{key} is not set in its decode section; add "
                              f"the line `  {key}: ...` there")
    path.write_text(text[:section.start(1)] + body + text[section.end(1):], encoding="utf-8")
