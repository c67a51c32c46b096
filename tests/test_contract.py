"""The sequence contract: shift, masks and their polarity."""
from __future__ import annotations

import pytest
import torch

from seqcore.contract import (
    IGNORE_INDEX, SpecialIds, attention_mask, causal_mask, masked_softmax, pad_batch, shift_targets)
from tests.factories import IDS


def test_targets_are_inputs_shifted_left_with_eos_label_and_no_bos_label(ids: SpecialIds) -> None:
    tf = shift_targets([[10, 11, 12], [20]], ids)
    assert tf.inputs.tolist() == [[2, 10, 11, 12], [2, 20, 0, 0]]
    assert tf.labels.tolist() == [[10, 11, 12, 3], [20, 3, IGNORE_INDEX, IGNORE_INDEX]]
    # labels[t] is inputs[t + 1] wherever both are real: the shift is exactly one position
    assert torch.equal(tf.labels[0, :-1], tf.inputs[0, 1:])
    assert (tf.labels != ids.bos).all()
    assert tf.mask.tolist() == [[True] * 4, [True, True, False, False]]


@pytest.mark.parametrize("ids", [SpecialIds(pad=0, unk=1, bos=2, eos=3),
                                 SpecialIds(pad=9, unk=8, bos=5, eos=6)])
def test_shift_every_target_token_and_eos_is_a_label_and_bos_never_is(ids: SpecialIds) -> None:
    targets, has_eos = [[10, 11, 12], [], [13], [14, 15]], [True, True, True, False]
    tf = shift_targets(targets, ids, has_eos)
    for i, (y, eos) in enumerate(zip(targets, has_eos)):
        n = len(y) + eos
        labels, inputs = tf.labels[i].tolist(), tf.inputs[i].tolist()
        # decoder input = BOS + y[:-1] (+ y[-1] when EOS follows it); labels = y (+ EOS)
        assert labels[:n] == y + ([ids.eos] if eos else []), i
        assert inputs[:n] == ([ids.bos] + y)[:n], i
        assert labels[n:] == [IGNORE_INDEX] * (tf.labels.shape[1] - n), i
        assert inputs[n:] == [ids.pad] * (tf.inputs.shape[1] - n), i
        assert tf.mask[i].tolist() == [True] * n + [False] * (tf.labels.shape[1] - n)
    assert ids.bos not in tf.labels.tolist()[0] + tf.labels.tolist()[1]
    assert (tf.labels != ids.bos).all() and (tf.labels != ids.pad).all()
    # the empty target still teaches the model to stop: BOS -> EOS
    assert tf.inputs[1, 0] == ids.bos and tf.labels[1, 0] == ids.eos
    # EOS is a label on exactly the sequences that kept it, and never an input
    assert (tf.labels == ids.eos).sum(1).tolist() == [1, 1, 1, 0]
    assert not (tf.inputs == ids.eos).any()


def test_truncated_target_gets_no_eos_label(ids: SpecialIds) -> None:
    tf = shift_targets([[10, 11, 12]], ids, has_eos=[False])
    assert (tf.labels.tolist(), tf.inputs.tolist()) == ([[10, 11, 12]], [[2, 10, 11]])
    assert ids.eos not in tf.labels.tolist()[0]


@pytest.mark.parametrize("rows", [
    [[5, 6, 7], [8], []], [[], []], [],
    # True = real token: [[5, 6, 7], [8, 0, 0]] with mask [[T, T, T], [T, F, F]]
    pytest.param([[5, 6, 7], [8]], id="test_padding_mask_polarity_true_means_real_token")])
def test_pad_batch_pads_every_row_on_the_right_to_the_longest(rows: list[list[int]]) -> None:
    tokens, mask = pad_batch(rows, pad_id=0)
    width = max(map(len, rows), default=0)
    assert tokens.dtype == torch.long and tokens.shape == (len(rows), width)
    for row, got, real in zip(rows, tokens.tolist(), mask.tolist(), strict=True):
        assert got == row + [0] * (width - len(row))
        assert real == [True] * len(row) + [False] * (width - len(row))


def test_causal_mask_shows_diagonal_and_hides_future() -> None:
    m = causal_mask(3)
    assert m.tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_fully_masked_rows_are_opened_so_softmax_is_finite() -> None:
    key_mask = torch.tensor([[False, False], [True, False]])
    m = attention_mask(key_mask, queries=2, causal=False)
    assert m[0].all()  # nothing real to attend to: open every key (outputs unused)
    assert m[1, 0].tolist() == [[True, False], [True, False]]
    q = torch.randn(2, 1, 2, 4)
    for dtype in (torch.float32, torch.bfloat16):
        out = torch.nn.functional.scaled_dot_product_attention(
            q.to(dtype), q.to(dtype), q.to(dtype), attn_mask=m)
        assert torch.isfinite(out.float()).all()


def test_special_ids_must_be_distinct() -> None:
    with pytest.raises(ValueError, match="distinct"):
        SpecialIds(pad=0, unk=0, bos=2, eos=3)


def test_a_causal_mask_lets_query_t_see_the_keys_up_to_t_plus_its_offset() -> None:
    keys = torch.ones(1, 3, dtype=torch.bool)
    plain = attention_mask(keys, queries=3, causal=True)[0, 0]
    assert plain.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    shifted = attention_mask(keys, queries=2, causal=True, offset=1)[0, 0]
    assert shifted.tolist() == [[True, True, False], [True, True, True]]


def test_teacher_forcing_refuses_an_eos_flag_list_of_another_length() -> None:
    with pytest.raises(ValueError):
        shift_targets([[5, 6], [7]], IDS, has_eos=[True])
    empty = shift_targets([], IDS)  # no targets: (0, 0) tensors, not an error
    assert empty.inputs.shape == empty.labels.shape == (0, 0)


def test_attention_weights_refuse_a_mask_that_is_not_boolean() -> None:
    with pytest.raises(TypeError, match=r"allowed must be bool \(True = may attend\), got "
                       r"torch.float32"):
        masked_softmax(torch.zeros(1, 2), torch.ones(1, 2))
