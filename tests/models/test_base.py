"""The encoder-decoder interface (seqcore/models/base.py): what forward refuses."""
from __future__ import annotations

import pytest
import torch

from tests.factories import tiny_model


@pytest.mark.parametrize(("src", "mask", "tgt"), [  # shapes of the all-ones inputs
    ((1, 3), (1, 4), (1, 2)),  # a mask of another shape
    ((1, 3, 1), (1, 3, 1), (1, 2)),  # a 3-D source with a mask of its shape
    ((1, 3), (1, 3), (1, 2, 1)),  # a 3-D decoder input
])
def test_forward_refuses_inputs_of_another_rank_or_a_mask_of_another_shape(
        src: tuple[int, ...], mask: tuple[int, ...], tgt: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"^expected \(B,S\),\(B,S\),\(B,T\); got "):
        tiny_model()(torch.ones(src, dtype=torch.long), torch.ones(mask, dtype=torch.bool),
                     torch.ones(tgt, dtype=torch.long))


def test_forward_refuses_a_mask_that_is_not_bool_naming_its_dtype() -> None:
    with pytest.raises(TypeError, match=r"^src_mask must be bool \(True = real token\), got "
                                        r"torch.int64$"):
        tiny_model()(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long),
                     torch.ones(1, 2, dtype=torch.long))
