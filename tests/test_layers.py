"""Layers (issue 11): a lower module never imports a higher one.

The import of each module is read from its source with ``ast`` (function-level imports
included), so a lazy import inside a function counts too.
"""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.test_declared_reads import imported_names

#: package -> modules it must not import (a prefix covers a whole package).
FORBIDDEN = {
    "seqcore/metrics": ("seqcore.training", "seqcore.decoding", "seqcore.tokenizer"),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_metrics_import_neither_training_decoding_nor_the_tokenizer(package: str) -> None:
    bad = sorted(f"{path.relative_to(REPO)} imports {name}"
                 for path in sorted((REPO / package).rglob("*.py"))
                 for name in imported_names(path)
                 if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[package]))
    assert not bad, bad
