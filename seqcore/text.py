"""Text normalisation, applied identically at training and decoding time."""

from __future__ import annotations

import unicodedata
from typing import Literal

Normalization = Literal["nfc", "nfkc", "none"]


def normalize(text: str, form: Normalization, casefold: bool) -> str:
    """Unicode-normalise, optionally case-fold, and collapse runs of whitespace to one space."""
    if form != "none":
        text = unicodedata.normalize(form.upper(), text)
    if casefold:
        text = text.casefold()
    return " ".join(text.split())


def has_control_chars(text: str) -> bool:
    """True if the text holds a Unicode control character (category Cc), tab included."""
    return any(unicodedata.category(ch) == "Cc" for ch in text)
