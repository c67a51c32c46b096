"""Checking a user's input before it reaches a model: the decode-time half of the contract.

A trained model can only answer for text its source tokenizer covers and that fits the length
it was trained with; anything else gets a reason instead of a confident wrong answer (issue 13).
"""

from __future__ import annotations

from dataclasses import dataclass

from seqcore.text import SPECIAL_PIECES
from seqcore.tokenizer import TextContract, Tokenizer


@dataclass(frozen=True)
class SourceInput:
    """One input line after the checks.

    Attributes:
        raw: the line as given; text: after the recorded normalisation.
        ids: source token ids (no BOS/EOS); empty when there is a problem.
        problem: why the line cannot be decoded ("" when it can).
    """

    raw: str
    text: str
    ids: list[int]
    problem: str = ""


def check_source(raw: str, text: TextContract, tok: Tokenizer, max_len: int) -> SourceInput:
    """Normalise and encode one input, or say why it cannot be decoded.

    Args:
        raw: one input (a word for G2P).
        text: the normalisation recorded in the tokenizer contract.
        tok: the source tokenizer.
        max_len: ``sequence.max_src_len`` the model was trained with (UNK-aware length).
    """
    if not raw.strip():
        return SourceInput(raw, "", [], "empty input")
    try:
        norm = text.apply(raw)
    except ValueError as err:
        return SourceInput(raw, "", [], str(err))
    ids = tok.encode(norm)
    if tok.special_ids().unk in ids:
        spans = ", ".join(repr(s) for s in dict.fromkeys(tok.unknown_spans(norm)))
        return SourceInput(raw, norm, [], f"not in the source vocabulary: {spans} "
                                          f"({known_pieces(tok)})")
    if len(ids) > max_len:
        return SourceInput(raw, norm, [], f"{len(ids)} tokens > sequence.max_src_len {max_len} "
                                          "the model was trained with")
    return SourceInput(raw, norm, ids)


def known_pieces(tok: Tokenizer, width: int = 80) -> str:
    """What the source tokenizer knows, for a refusal: ``known: a b c ... (33 pieces)``."""
    pieces = [p for p in tok.pieces() if p not in SPECIAL_PIECES]
    shown = " ".join(pieces)
    if len(shown) > width:
        shown = shown[: width - 4].rsplit(" ", 1)[0] + " ..."
    return f"known: {shown} ({len(pieces)} pieces)"

