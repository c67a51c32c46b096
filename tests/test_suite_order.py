"""The suite's own scheduling: the heavy files it starts first exist."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import HEAVY_FIRST


def test_every_file_the_suite_starts_first_is_a_test_file_listed_once() -> None:
    here = Path(__file__).parent
    assert [n for n in HEAVY_FIRST if not (here / n).is_file()] == []
    assert len(set(HEAVY_FIRST)) == len(HEAVY_FIRST)
