"""System combination with the baseline: the model rescores the baseline's n-best list.

The classic combination for G2P: a joint-sequence WFST proposes pronunciations and a neural
model rescores them with a log-linear weight tuned on dev (e.g. Yao & Zweig 2015; Rao et al.
2015 report about 2 WER points on CMUdict). Each candidate (the baseline's n-best, then the
model's own hypotheses not among them) gets

    score = (1 - w) * log p_model(candidate | source) + w * log p_baseline(candidate)

with ``log p_model`` the teacher-forced sum over the candidate's tokens and EOS, and
``log p_baseline`` the score Phonetisaurus gave it (a candidate the baseline did not list
gets the lowest score of its list). ``w = 0`` is the model choosing among both lists,
``w = 1`` the baseline's own ranking.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from seqcore.artifacts.predictions import PredictionRow
from seqcore.contract import IGNORE_INDEX, SpecialIds
from seqcore.data.examples import Example
from seqcore.models.base import EncoderDecoder
from seqcore.sequences import teacher_forced_passes
from seqcore.tokenizer import Tokenizer


@dataclass(frozen=True)
class Candidate:
    """One pronunciation of one row: its text, target ids and both log probabilities."""

    text: str
    tokens: list[int]
    baseline: float
    model: float = 0.0

    def score(self, weight: float) -> float:
        """The combined score under baseline weight ``weight`` (see the module docstring)."""
        return (1.0 - weight) * self.model + weight * self.baseline


def baseline_scores(row: PredictionRow) -> dict[str, float]:
    """text -> baseline log probability of a baseline row's list (best first); an empty
    output or an undefined score (no path: null in JSON) is not a candidate."""
    listed = [(row.hypothesis, row.score)] + [(str(h["hypothesis"]), h["score"])
                                                for h in row.nbest]
    out: dict[str, float] = {}
    for text, score in listed:
        if text and score is not None and text not in out:
            out[text] = float(score)  # type: ignore[arg-type] (not None here)
    return out


def candidates(model_row: PredictionRow, base_row: PredictionRow, tgt_tok: Tokenizer,
               unk: int) -> list[Candidate]:
    """The candidates of one row, baseline's first: its list, then the model's hypotheses
    it lacks (at the lowest baseline score of the list); none whose ids hold UNK (the model
    cannot score a phoneme it does not know)."""
    scores = baseline_scores(base_row)
    floor = min(scores.values(), default=0.0)
    texts = list(scores) + [t for t in [model_row.hypothesis] + [str(h["hypothesis"])
                                                                   for h in model_row.nbest]
                            if t not in scores]
    out = []
    for text in dict.fromkeys(texts):
        ids = tgt_tok.encode(text)
        if unk not in ids:
            out.append(Candidate(text, ids, scores.get(text, floor)))
    return out


@torch.no_grad()
def model_log_probs(model: EncoderDecoder, pairs: list[tuple[list[int], list[int]]],
                    ids: SpecialIds, batch_size: int) -> list[float]:
    """log p(target | source) of each (source ids, target ids) pair: the teacher-forced sum
    over the target tokens and EOS, in input order."""
    examples = [Example(str(i), "", "", "", src, tgt, True)
                for i, (src, tgt) in enumerate(pairs)]
    out: list[float] = []
    for _, b, logits in teacher_forced_passes(model, examples, ids, batch_size):
        labels = b.tf.labels  # (B, T)
        valid = labels != IGNORE_INDEX  # (B, T)
        logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
        picked = logp.gather(-1, labels.masked_fill(~valid, 0)[..., None])[..., 0]  # (B, T)
        out += (picked * valid).sum(1).tolist()
    return out


def scored_candidates(model: EncoderDecoder, examples: list[Example],
                      model_rows: list[PredictionRow], base_rows: dict[str, PredictionRow],
                      tgt_tok: Tokenizer, ids: SpecialIds,
                      batch_size: int) -> list[list[Candidate]]:
    """Each row's candidates (see :func:`candidates`) with the model's log probability, from
    one teacher-forced pass over them all; the weight is applied later (:func:`pick`).

    Args:
        examples: the decoded examples (their source ids), in the rows' order.
        base_rows: the baseline's rows of the same split, by id.
    """
    per_row = [candidates(r, base_rows[r.id], tgt_tok, ids.unk) for r in model_rows]
    flat = [(ex.src, c.tokens) for ex, cands in zip(examples, per_row, strict=True)
            for c in cands]
    logps = iter(model_log_probs(model, flat, ids, batch_size))
    return [[Candidate(c.text, c.tokens, c.baseline, next(logps)) for c in cands]
            for cands in per_row]


def pick(row: PredictionRow, cands: list[Candidate], weight: float,
         tgt_tok: Tokenizer) -> PredictionRow:
    """``row`` with the best candidate under ``weight`` as its hypothesis and the others as
    its n-best list (best first; ties keep list order), detokenised by ``tgt_tok`` like the
    decoder's outputs; ``row`` itself when no candidate could be scored."""
    ranked = sorted(cands, key=lambda c: -c.score(weight))
    if not ranked:
        return row
    best = ranked[0]
    return replace(
        row, hypothesis=tgt_tok.decode(best.tokens), tokens=best.tokens,
        pieces=[tgt_tok.piece(t) for t in best.tokens], score=best.score(weight),
        norm_score=best.score(weight) / (len(best.tokens) + 1), length=len(best.tokens),
        eos=True,
        nbest=[{"hypothesis": tgt_tok.decode(c.tokens), "tokens": c.tokens,
                "score": c.score(weight), "norm_score": c.score(weight) / (len(c.tokens) + 1),
                "eos": True} for c in ranked[1:]])


def rescore(model: EncoderDecoder, examples: list[Example], model_rows: list[PredictionRow],
            base_rows: dict[str, PredictionRow], tgt_tok: Tokenizer,
            ids: SpecialIds, weight: float, batch_size: int) -> list[PredictionRow]:
    """Each model row replaced by its best candidate under ``weight`` (:func:`pick` of
    :func:`scored_candidates`)."""
    scored = scored_candidates(model, examples, model_rows, base_rows, tgt_tok, ids, batch_size)
    return [pick(r, c, weight, tgt_tok) for r, c in zip(model_rows, scored, strict=True)]
