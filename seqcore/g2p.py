"""The grapheme-to-phoneme task's target alphabet (CMUdict ARPAbet, 39 phonemes)."""

from __future__ import annotations

import re

ARPABET = frozenset(
    "AA AE AH AO AW AY B CH D DH EH ER EY F G HH IH IY JH K L M N NG OW OY P R S SH T TH "
    "UH UW V W Y Z ZH".split()
)
_STRESS = re.compile(r"[012]$")


def is_illegal_phoneme(token: str) -> bool:
    """True if ``token`` (stress digit allowed) is not an ARPAbet phoneme."""
    return _STRESS.sub("", token) not in ARPABET
