"""Text normalisation, applied identically at training and decoding time.

The normalisation form and case folding are contract parameters: they are recorded in
``tokenizer/contract.json`` and every stage that turns raw text into ids applies
:func:`normalize` with those recorded values (the tokenizer itself normalises nothing).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

Normalization = Literal["nfc", "nfkc", "none"]

#: SentencePiece's whitespace marker (U+2581). SentencePiece turns it back into a space when
#: decoding, so text holding it can never round-trip; readers reject such rows.
SP_META = "\u2581"

#: The special pieces' strings, each with a leading control character (U+001F) so that no
#: accepted text can spell one (see seqcore/tokenizer.py and :func:`unencodable_reason`).
PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE = "\x1f<pad>", "\x1f<unk>", "\x1f<s>", "\x1f</s>"
SPECIAL_PIECES = frozenset({PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE})


def normalize(text: str, form: Normalization, casefold: bool) -> str:
    """Unicode-normalise, optionally case-fold, and collapse runs of whitespace to one space."""
    if form != "none" and not text.isascii():  # ASCII is its own NFC and NFKC form
        text = unicodedata.normalize(form.upper(), text)
    if casefold:
        text = text.casefold()
    return " ".join(text.split())


#: Unicode's category Cc: the C0 controls, DEL and the C1 controls, fixed by the standard's
#: stability policy (tests/test_text.py checks every code point against unicodedata).
CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f]")


def has_control_chars(text: str) -> bool:
    """True if the text holds a Unicode control character (category Cc), tab included."""
    return CONTROL_CHARS.search(text) is not None


def normalization_changes(text: str, form: Normalization) -> bool:
    """True if :func:`normalize` with ``form`` (no case folding) gives another text than with
    ``"none"``: the form changes a character (the common case, text already in the form, is
    answered without normalising)."""
    if form == "none" or text.isascii() or unicodedata.is_normalized(form.upper(), text):
        return False
    return normalize(text, form, False) != normalize(text, "none", False)


def unencodable_reason(text: str) -> str | None:
    """Why a text cannot be tokenized faithfully ("control-chars", "reserved-char"), or None.

    Control characters are refused because the special pieces are spelled with one (so no
    accepted text can spell a special token); U+2581 because SentencePiece decodes it as a space.
    """
    if has_control_chars(text):
        return "control-chars"
    if SP_META in text:
        return "reserved-char"
    return None
