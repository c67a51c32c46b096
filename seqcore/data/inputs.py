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
        known = set(tok.pieces())
        spans = ", ".join(describe_span(s, known)
                          for s in dict.fromkeys(tok.unknown_spans(norm)))
        return SourceInput(raw, norm, [], f"not in the source vocabulary: {spans} "
                                          f"({known_pieces(tok)})")
    if len(ids) > max_len:
        return SourceInput(raw, norm, [], f"{len(ids)} tokens > sequence.max_src_len {max_len} "
                                          "the model was trained with")
    return SourceInput(raw, norm, ids)


#: Typographic characters and the plain ones a vocabulary trained on plain text has instead
#: (issue 55: French text writes the apostrophe as U+2019).
LOOKALIKES = {"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u201c": '"', "\u201d": '"',
              "\u2013": "-", "\u2014": "-", "\u2010": "-", "\u2011": "-", "\u00a0": " "}


def describe_span(span: str, known: set[str]) -> str:
    """An unknown stretch of input as a refusal names it: plain ASCII as it is (``'%'``); a
    space (a tokenizer reports it as an empty stretch) or any other character by its code
    point and Unicode name, with the plain look-alike to type instead where the vocabulary
    has it (``'’' (U+2019 RIGHT SINGLE QUOTATION MARK; the vocabulary has ' U+0027)``)."""
    import unicodedata  # noqa: PLC0415 (only on a refusal)

    if span.isascii() and span.strip():
        return repr(span)
    if not span.strip():
        return "' ' (U+0020 SPACE: a space between words; the vocabulary has none)"
    parts = []
    for ch in dict.fromkeys(span):
        if ch.isascii():
            continue
        line = f"U+{ord(ch):04X} {unicodedata.name(ch, 'UNNAMED')}"
        plain = LOOKALIKES.get(ch)
        if plain is not None and (plain in known or f"\u2581{plain}" in known):
            line += f"; the vocabulary has {plain} U+{ord(plain):04X}"
        parts.append(line)
    return f"{span!r} ({'; '.join(parts)})"


def known_pieces(tok: Tokenizer, width: int = 80) -> str:
    """What the source tokenizer knows, for a refusal: ``known: a b c ... (33 pieces)``."""
    pieces = [p for p in tok.pieces() if p not in SPECIAL_PIECES]
    shown = " ".join(pieces)
    if len(shown) > width:
        shown = shown[: width - 4].rsplit(" ", 1)[0] + " ..."
    return f"known: {shown} ({len(pieces)} pieces)"

