"""Loss rules: PAD in neither numerator nor denominator and standard label smoothing with no
mass on PAD/BOS (7); explicit normalisation and exact gradient accumulation (8); nothing read
back from the device, with the selecting form's gradients to the bit (issue 53)."""
from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional

from seqcore.contract import IGNORE_INDEX, SpecialIds
from seqcore.losses import labelled_nll, sequence_loss
from seqcore.sequences import make_batch
from tests.factories import examples as toy_examples, tiny_model

PAD, UNK, BOS, EOS = 0, 1, 2, 3
# A 6-token vocabulary and hand-picked next-token probabilities p (sum 1); logits = log p.
P = [0.05, 0.10, 0.05, 0.20, 0.40, 0.20]
EPS = 0.2
# The smoothed targets, by hand: K = 6 - |{PAD, BOS}| = 4 ids share EPS (0.05 each); the
# label gets 1 - EPS on top; PAD and BOS get nothing.
Q_LABEL_4 = [0.0, 0.05, 0.0, 0.05, 0.85, 0.05]
Q_LABEL_EOS = [0.0, 0.05, 0.0, 0.85, 0.05, 0.05]


def test_loss_label_smoothing_matches_hand_table_with_no_mass_on_pad_or_bos() -> None:
    # softmax = P everywhere; labels 4, EOS, then an unlabelled PAD
    logits = torch.log(torch.tensor(P)).expand(1, 3, 6).clone().requires_grad_(True)
    out = sequence_loss(logits, torch.tensor([[4, EOS, IGNORE_INDEX]]), "sum", EPS, (PAD, BOS))
    expected = sum(-q * math.log(p) for q_row in (Q_LABEL_4, Q_LABEL_EOS)
                   for q, p in zip(q_row, P) if q > 0)
    assert out.total.item() == pytest.approx(expected, rel=1e-6)
    assert out.nll.item() == pytest.approx(-math.log(0.40) - math.log(0.20), rel=1e-6)
    assert (out.tokens, out.sequences) == (2, 1)
    # d CE(q, softmax(z)) / dz = softmax(z) - q: the gradient reveals the target distribution.
    out.total.backward()
    q = torch.tensor(P) - logits.grad[0]  # (3, 6)
    torch.testing.assert_close(q[0], torch.tensor(Q_LABEL_4))
    torch.testing.assert_close(q[1], torch.tensor(Q_LABEL_EOS))
    assert (logits.grad[0, 2] == 0).all()  # the PAD position: no target, no gradient


def test_loss_ignores_pad_in_numerator_and_denominator() -> None:
    logits = torch.randn(2, 4, 7)
    labels = torch.tensor([[4, 5, 6, EOS], [5, EOS, IGNORE_INDEX, IGNORE_INDEX]])
    out = sequence_loss(logits, labels, "token-mean", 0.0, (PAD, BOS))
    reference = functional.cross_entropy(logits.view(-1, 7), labels.view(-1),
                                         ignore_index=IGNORE_INDEX)
    assert out.tokens == 6
    torch.testing.assert_close(out.total / out.denominator("token-mean"), reference)
    longer = torch.cat([logits, torch.randn(2, 3, 7)], dim=1)  # 3 more PAD positions
    labels_longer = functional.pad(labels, (0, 3), value=IGNORE_INDEX)
    out2 = sequence_loss(longer, labels_longer, "token-mean", 0.0, (PAD, BOS))
    torch.testing.assert_close(out2.total, out.total)
    assert out2.tokens == out.tokens


def test_loss_normalisation_is_explicit_token_sequence_mean_and_sum() -> None:
    logits = torch.log(torch.tensor(P)).expand(2, 3, 6).clone()
    # sequence 0: labels 4, 4, EOS; sequence 1: EOS only (then PAD).
    labels = torch.tensor([[4, 4, EOS], [EOS, IGNORE_INDEX, IGNORE_INDEX]])
    a, b = -math.log(0.40), -math.log(0.20)  # NLL of label 4 and of EOS under P
    token_sum = 2 * a + 2 * b
    cases = {"token-mean": (token_sum, 4, token_sum / 4),
             "sequence-mean": ((2 * a + b) / 3 + b, 2, ((2 * a + b) / 3 + b) / 2),
             "sum": (token_sum, 1, token_sum)}
    for norm, (total, denominator, value) in cases.items():
        out = sequence_loss(logits, labels, norm, 0.0, (PAD, BOS))
        assert out.total.item() == pytest.approx(total, rel=1e-6), norm
        assert out.denominator(norm) == denominator, norm
        assert (out.total / out.denominator(norm)).item() == pytest.approx(value, rel=1e-6)


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("norm", ("token-mean", "sequence-mean", "sum"))
def test_loss_normalisation_accumulating_microbatches_equals_one_big_batch(
        norm: str, ids: SpecialIds) -> None:
    examples = toy_examples(6, seed=7, high=12, shift=0, lengths=(2, 5), reverse=False)
    model = tiny_model("transformer")
    big = make_batch(examples, ids)
    out = sequence_loss(model(big.src, big.src_mask, big.tf.inputs), big.tf.labels, norm, 0.1,
                        (ids.pad, ids.bos))
    (out.total / out.denominator(norm)).backward()
    expected = grads(model)
    model.zero_grad()
    micro = [make_batch(examples[i : i + 2], ids) for i in range(0, 6, 2)]
    parts = [sequence_loss(model(b.src, b.src_mask, b.tf.inputs), b.tf.labels, norm, 0.1,
                           (ids.pad, ids.bos)) for b in micro]
    # the global denominator: summed over all micro-batches (all-reduced across processes)
    denominator = {"token-mean": sum(p.tokens for p in parts),
                   "sequence-mean": sum(p.sequences for p in parts), "sum": 1}[norm]
    assert denominator == out.denominator(norm)
    for part in parts:
        (part.total / denominator).backward()
    for got, want in zip(grads(model), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_loss_refuses_smoothing_of_one_and_labels_of_another_shape() -> None:
    logits, labels = torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\), got 1"):
        sequence_loss(logits, labels, "token-mean", 1.0, ())
    with pytest.raises(ValueError, match=r"labels \(B,T\) expected"):
        sequence_loss(logits, labels[:, :2], "token-mean", 0.0, ())


def test_a_row_without_labels_counts_in_no_sequence_mean() -> None:
    # uniform logits over 4 ids: each labelled token costs log 4; the second row has none
    logits = torch.zeros(2, 2, 4)
    labels = torch.tensor([[1, 2], [IGNORE_INDEX, IGNORE_INDEX]])
    out = sequence_loss(logits, labels, "sequence-mean", 0.0, ())
    assert out.sequences == 1 and out.tokens == 2
    assert out.total.item() == pytest.approx(math.log(4))


def selecting_loss(logits: torch.Tensor, labels: torch.Tensor, norm: str, smoothing: float,
                   excluded: tuple[int, ...]) -> torch.Tensor:
    """The loss as it was computed before issue 53: the labelled positions selected first
    (labelled_nll), which needs their number on the host."""
    valid, row, logp, nll = labelled_nll(logits, labels)  # (B, T), (N,), (N, V), (N,)
    allowed = torch.ones(logits.shape[-1], dtype=torch.bool)
    allowed[list(excluded)] = False
    token = (1 - smoothing) * nll - smoothing * (logp * allowed).sum(-1) / allowed.sum() \
        if smoothing > 0 else nll
    if norm != "sequence-mean":
        return token.sum()
    per_seq, count = token.new_zeros(len(labels)).index_add(0, row, token), valid.sum(1)
    return (per_seq[count > 0] / count[count > 0]).sum()


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("norm", ("token-mean", "sequence-mean", "sum"))
@pytest.mark.parametrize("smoothing", (0.0, 0.1))
def test_the_loss_gives_the_selecting_forms_gradients_to_the_bit(
        norm: str, smoothing: float, dtype: torch.dtype, ids: SpecialIds) -> None:
    # every position is computed and the unlabelled ones zeroed (no read-back); the gradient
    # of each logit is the same bits as selecting first, the sums round alike to 1e-6
    examples = toy_examples(24, seed=3, high=12, shift=0, lengths=(1, 9), reverse=False)
    b = make_batch(examples, ids)
    base = tiny_model("transformer")(b.src, b.src_mask, b.tf.inputs).detach().to(dtype)
    got, want = (base.clone().requires_grad_(True) for _ in range(2))
    out = sequence_loss(got, b.tf.labels, norm, smoothing, (ids.pad, ids.bos))
    reference = selecting_loss(want, b.tf.labels, norm, smoothing, (ids.pad, ids.bos))
    (out.total / 37).backward()
    (reference / 37).backward()
    assert (b.tf.labels == IGNORE_INDEX).any()  # there are unlabelled positions to zero
    assert torch.equal(got.grad, want.grad)
    assert out.total.item() == pytest.approx(reference.item(), rel=1e-6)
    assert out.nll.item() == pytest.approx(float(labelled_nll(want.detach(), b.tf.labels)[3].sum()),
                                           rel=1e-6)


def test_nan_and_inf_in_unlabelled_positions_reach_neither_the_sums_nor_the_gradient() -> None:
    logits = torch.log(torch.tensor(P)).expand(2, 3, 6).clone()
    logits[0, 2], logits[1, 1:] = math.nan, math.inf  # the positions without a label
    logits.requires_grad_(True)
    labels = torch.tensor([[4, EOS, IGNORE_INDEX], [EOS, IGNORE_INDEX, IGNORE_INDEX]])
    for norm in ("token-mean", "sequence-mean"):
        out = sequence_loss(logits, labels, norm, EPS, (PAD, BOS))
        assert math.isfinite(out.total.item()) and math.isfinite(out.nll.item()), norm
        assert out.nll.item() == pytest.approx(-math.log(0.40) - 2 * math.log(0.20), rel=1e-6)
        logits.grad = None
        out.total.backward()
        assert logits.grad.isfinite().all(), norm
        assert (logits.grad[0, 2] == 0).all() and (logits.grad[1, 1:] == 0).all(), norm
