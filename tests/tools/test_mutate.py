"""`make mutate` (tools/mutate.py) is slow and not in CI, so a mutant whose anchor drifted
with the code would go unnoticed until the next run scores it stale. Each anchor must be
found exactly once in its file, and each mutant must name a test file that exists."""

from __future__ import annotations

import pytest

from tests.factories import REPO
from tools.mutate import MUTANTS, Mutant


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_hand_written_mutant_still_applies_to_exactly_one_place(mutant: Mutant) -> None:
    text = (REPO / mutant.file).read_text(encoding="utf-8")
    assert text.count(mutant.anchor) == 1, f"{mutant.file}: update the anchor of {mutant.name!r}"
    assert mutant.edit != mutant.anchor
    assert (REPO / mutant.tests[0].split("::")[0]).is_file()
