"""The pair tasks' piece of the baseline stage: Phonetisaurus trained on the model's own train
rows (the encoded split: the same rows after the same length policy), its predictions for dev
and test written in the predictions format, so evaluate scores them with the model's code.

``baseline.kind: auto`` means Phonetisaurus for g2p, and for parallel data whose sources are
single words (a joint-sequence WFST reads a word as its characters); anything else is
skipped with one sentence saying why.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
import tempfile
from pathlib import Path

from seqcore.artifacts.baseline import SPLITS, BaselineRecord
from seqcore.artifacts.predictions import (
    BaselineSettings, PredictionRow, Predictions, PredictionsHeader)
from seqcore.baselines import phonetisaurus
from seqcore.config import Config
from seqcore.data.examples import Example, read_encoded
from seqcore.data.records import Reject, write_rejects
from seqcore.hashing import sha256_file
from seqcore.tasks import TaskError
from seqcore.tasks.base import StageIO

#: Whether ``auto`` trains the baseline without looking at the data (g2p is its home task).
AUTO_ALWAYS = {"g2p": True, "parallel": False}


def skip_reason(cfg: Config, train: list[Example]) -> str | None:
    """Why this run has no baseline (None: train one)."""
    kind = cfg.baseline.kind
    if kind == "none":
        return "baseline.kind is none"
    if kind == "phonetisaurus" or AUTO_ALWAYS[cfg.task]:
        return None
    spaced = sum(any(c.isspace() for c in e.source) for e in train)
    if spaced:
        return (f"baseline.kind is auto and {spaced:,} of {len(train):,} train sources contain "
                "whitespace: a joint-sequence WFST converts single words (set baseline.kind: "
                "phonetisaurus to force it)")
    return None


def baseline(cfg: Config, io: StageIO) -> None:
    """Train the baseline and write ``<paths.baseline>/``: model.fst, dev/test predictions
    with headers and record.json; the train rows left out go to ``paths.baseline_rejects``.

    Raises:
        TaskError: more train rows left out than ``data.max_reject_rate`` allows (the
            rejects are written first).
        seqcore.baselines.phonetisaurus.BaselineError: a tool failed.
    """
    out, encoded = Path(cfg.paths.baseline), Path(cfg.paths.encoded)
    train_file = encoded / "train.jsonl"
    train = read_encoded(encoded, "train")
    why = skip_reason(cfg, train)
    if out.exists():
        shutil.rmtree(out)  # no stale model or split from an earlier run
    if why is not None:
        BaselineRecord("none", skipped=why).save(out)
        write_rejects(Path(cfg.paths.baseline_rejects), [])
        io.note(f"skipped: {why}")
        return
    io.note(f"training Phonetisaurus on {len(train):,} train rows (EM alignment, then an "
            f"order-{cfg.baseline.order} joint n-gram; about 2 CPU-minutes for CMUdict)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="seqcore-baseline-") as tmp:
        lexicon = [phonetisaurus.LexiconRow(e.id, e.source, e.target) for e in train]
        trained = phonetisaurus.train(lexicon, Path(tmp), cfg.baseline)
        check_rejected(cfg, trained, train, train_file, io)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(trained.fst, out / "model.fst")
    io.note(f"trained in {time.monotonic() - started:.0f} s; converting each split")
    sig = phonetisaurus.signature(cfg.baseline, trained.lexicon_sha256)
    fst_sha = sha256_file(out / "model.fst")
    for split in SPLITS:
        examples = read_encoded(encoded, split)
        started = time.monotonic()
        io.note(f"{split}: the {cfg.baseline.nbest}-best of {len(examples):,} rows "
                f"({phonetisaurus.workers()} phonetisaurus-g2pfst processes)")
        rows = predict(out / "model.fst", examples, cfg.baseline.nbest)
        io.note(f"{split}: done in {time.monotonic() - started:.0f} s")
        Predictions(rows).save(out / f"{split}.jsonl")
        settings = BaselineSettings.of(cfg.baseline, "phonetisaurus", phonetisaurus.BEAM)
        PredictionsHeader(settings, fst_sha, len(rows), sig).save(out / f"{split}.jsonl")
    reasons = dict(Counter(r.reason for r in trained.rejected))
    BaselineRecord("phonetisaurus", sig, train_rows=trained.rows, rejected=reasons,
                   model_sha256=fst_sha).save(out)
    io.note(f"{sig}: trained on {trained.rows - len(trained.rejected):,} of {trained.rows:,} "
            f"train rows -> {out}")


def check_rejected(cfg: Config, trained: phonetisaurus.Trained, train: list[Example],
                   train_file: Path, io: StageIO) -> None:
    """Write the rejected train rows; stop when their share exceeds data.max_reject_rate (a
    baseline trained on a remnant would be no baseline)."""
    limit = cfg.data.max_reject_rate  # a guard, read up front: declared whether or not it trips
    line = {e.id: i for i, e in enumerate(train, start=1)}
    write_rejects(Path(cfg.paths.baseline_rejects), [
        Reject(str(train_file), line[r.id], f"baseline: {r.reason}", f"{r.source}\t{r.target}")
        for r in trained.rejected])
    if not trained.rejected:
        return
    share = len(trained.rejected) / trained.rows
    first = trained.rejected[0]
    io.note(f"{len(trained.rejected):,} of {trained.rows:,} train rows left out of the baseline "
            f"(first, line {line[first.id]}: {first.reason}); listed in "
            f"{cfg.paths.baseline_rejects}")
    if share > limit:
        raise TaskError(f"baseline: {len(trained.rejected):,} of {trained.rows:,} train rows "
                        f"({share:.1%}) could not be aligned, above data.max_reject_rate "
                        f"({limit:g}); see {cfg.paths.baseline_rejects} (first: {first.reason})")


def predict(fst: Path, examples: list[Example], nbest: int) -> list[PredictionRow]:
    """One predictions row per example, in file order (a word's rows share its conversion),
    with the rest of the ``nbest`` list (decode can rescore it: ``decode.rescore``).

    The WFST stops by itself: ``eos`` is True; a word it has no path for gets an empty
    hypothesis, which evaluate counts as an empty output."""
    conv = phonetisaurus.convert(fst, [e.source for e in examples], nbest)
    rows = []
    for e in examples:
        best, *rest = conv[e.source]
        pieces = best.target.split()
        rows.append(PredictionRow(
            id=e.id, group=e.group, source=e.source, reference=e.target,
            hypothesis=best.target, tokens=[], pieces=pieces, score=best.log_prob,
            norm_score=best.log_prob / max(1, len(pieces)), length=len(pieces), eos=True,
            nbest=[{"hypothesis": c.target, "tokens": [], "score": c.log_prob,
                    "norm_score": c.log_prob / max(1, len(c.target.split())), "eos": True}
                   for c in rest]))
    return rows
