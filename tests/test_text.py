"""seqcore/text.py's fast paths give exactly the answers of the rules they stand for."""
from __future__ import annotations

import unicodedata

import pytest

from seqcore.data.records import escape_text
from seqcore.text import has_control_chars, normalization_changes, normalize


def test_a_control_character_is_exactly_a_code_point_of_unicode_category_cc() -> None:
    every = "".join(map(chr, range(0x110000)))
    control = {i for i in range(0x110000) if unicodedata.category(chr(i)) == "Cc"}
    assert {i for i, ch in enumerate(every) if has_control_chars(ch)} == control
    assert len(control) == 65  # U+0000-U+001F, U+007F-U+009F
    assert has_control_chars("ab\tc") and not has_control_chars("abc \u00a0\u2028")
    # the rejects' escaping uses the same rule: each control character, and nothing else
    assert escape_text(every) == "".join(
        "\\\\" if ch == "\\" else "\\t" if ch == "\t" else "\\r" if ch == "\r"
        else f"\\x{ord(ch):02x}" if unicodedata.category(ch) == "Cc" else ch for ch in every)


@pytest.mark.parametrize("text", [
    "cafe\u0301", "caf\u00e9", "\ufb01ne", "Å", "A\u030a", "  two  spaces ", "\u2126hm", "",
    "K\u0323\u0307", "\u1e9b\u0323", "x" * 50 + "e\u0301"])
@pytest.mark.parametrize("form", ["nfc", "nfkc", "none"])
def test_normalization_changes_answers_as_comparing_the_two_normalisations(
        text: str, form: str) -> None:
    full = normalize(text, form, False) != normalize(text, "none", False)  # type: ignore[arg-type]
    assert normalization_changes(text, form) == full  # type: ignore[arg-type]


@pytest.mark.parametrize("form", ["nfc", "nfkc"])
def test_normalize_agrees_with_unicodedata_on_every_ascii_character(form: str) -> None:
    # normalize skips unicodedata for ASCII text (its own NFC and NFKC form): the reference
    for text in (f"a{chr(c)}b" for c in range(128)):
        reference = " ".join(unicodedata.normalize(form.upper(), text).split())
        assert normalize(text, form, False) == reference  # type: ignore[arg-type]
        assert not normalization_changes(text, form)  # type: ignore[arg-type]
