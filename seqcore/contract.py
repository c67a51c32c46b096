"""The sequence contract: special ids, the teacher-forcing shift, loss ignore index and masks.

Every other module imports these rules; none works them out again.

Conventions (stated once, here):
- Padding is on the right. PAD never carries a label and is never attended to as a key.
- Mask polarity: ``True`` means "real token" / "may attend"; ``False`` means masked out.
- Dimension names: B batch, S source length, T target length, V vocabulary, D model width,
  H heads, L layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Label value that the loss ignores (PAD positions and anything else without a target).
IGNORE_INDEX = -100


@dataclass(frozen=True)
class SpecialIds:
    """Special token ids, read from the tokenizer contract (never hard-coded elsewhere)."""

    pad: int
    unk: int
    bos: int
    eos: int

    def __post_init__(self) -> None:
        ids = (self.pad, self.unk, self.bos, self.eos)
        if len(set(ids)) != 4 or min(ids) < 0:
            raise ValueError(f"special ids must be distinct and non-negative, got {self}")


@dataclass(frozen=True)
class TeacherForcing:
    """Decoder input and labels for one padded batch.

    Attributes:
        inputs: (B, T) BOS + y[:-1]... i.e. BOS followed by the target tokens, PAD after.
        labels: (B, T) y followed by EOS (unless the target was truncated), IGNORE_INDEX after.
        mask: (B, T) True where the position holds a real decoder input token.
    """

    inputs: torch.Tensor
    labels: torch.Tensor
    mask: torch.Tensor


def shift_targets(
    targets: list[list[int]], ids: SpecialIds, has_eos: list[bool] | None = None
) -> TeacherForcing:
    """Build teacher-forcing inputs and labels from unpadded target token lists.

    The decoder reads ``BOS y_1 ... y_n`` and must predict ``y_1 ... y_n EOS``: EOS is a label
    (the model must learn to stop) and BOS never is. A target that was truncated to fit the
    maximum length has no EOS label (``has_eos=False``): we must not teach the model that the
    sequence ends where the truncation cut it.

    Args:
        targets: B lists of target token ids, without BOS/EOS.
        ids: the special ids.
        has_eos: per sequence, whether EOS is appended to the labels (default all True).

    Returns:
        TeacherForcing with (B, T) tensors, T = max(len(y) + has_eos).
    """
    if has_eos is None:
        has_eos = [True] * len(targets)
    rows_in: list[list[int]] = []
    rows_lab: list[list[int]] = []
    for y, eos in zip(targets, has_eos, strict=True):
        labels = list(y) + ([ids.eos] if eos else [])
        rows_lab.append(labels)
        rows_in.append(([ids.bos] + list(y))[: len(labels)])
    width = max((len(r) for r in rows_lab), default=0)
    inputs = right_padded(rows_in, width, ids.pad)
    labels_t = right_padded(rows_lab, width, IGNORE_INDEX)
    return TeacherForcing(inputs=inputs, labels=labels_t, mask=labels_t != IGNORE_INDEX)


def right_padded(rows: list[list[int]], width: int, fill: int) -> torch.Tensor:
    """(B, width) long tensor of the rows, each filled on the right to ``width``.

    One tensor from one padded list: a tensor per row and a copy into place cost more than
    the model's non-matmul work on a small batch (issue 17).
    """
    flat = [[*r, *([fill] * (width - len(r)))] for r in rows]
    return torch.tensor(flat, dtype=torch.long).reshape(len(rows), width)


def pad_batch(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists.

    Returns:
        tokens: (B, S) long, PAD after each sequence.
        mask: (B, S) bool, True on real tokens.
    """
    width = max((len(s) for s in seqs), default=0)
    tokens = right_padded(seqs, width, pad_id)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    return tokens, padding_mask(lengths, width)


def padding_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """Key/padding mask from lengths.

    Args:
        lengths: (B,) number of real tokens per sequence.
        width: S, the padded length.

    Returns:
        (B, S) bool, True on real tokens.
    """
    return torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]


def causal_mask(size: int, device: torch.device | None = None) -> torch.Tensor:
    """Causal mask: query t may attend keys 0..t (the diagonal is visible, the future is not).

    Returns:
        (T, T) bool, True where attending is allowed.
    """
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def attention_mask(
    key_mask: torch.Tensor, queries: int, causal: bool, offset: int = 0
) -> torch.Tensor:
    """Combine a key padding mask with an optional causal mask, safe for softmax.

    A query row whose keys are all masked (e.g. an empty source) would give softmax(-inf...) =
    NaN. Such rows are opened to every key instead ("safe softmax"): their outputs are finite
    but meaningless, and they never reach the loss because their positions carry no label.
    This works the same in fp32, fp16 and bf16 because no large negative constant is involved.

    Args:
        key_mask: (B, S) bool, True on real keys.
        queries: T, the number of query positions.
        causal: whether query t may only see keys <= t + offset.
        offset: position of the first query among the keys (for incremental decoding).

    Returns:
        (B, 1, T, S) bool, True where attending is allowed; broadcastable over heads.
    """
    batch, keys = key_mask.shape
    mask = key_mask[:, None, None, :].expand(batch, 1, queries, keys)
    if causal:
        q_pos = torch.arange(queries, device=key_mask.device)[:, None] + offset
        k_pos = torch.arange(keys, device=key_mask.device)[None, :]
        mask = mask & (k_pos <= q_pos)[None, None]
    empty = ~mask.any(dim=-1, keepdim=True)
    return mask | empty


def masked_softmax(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim that gives masked keys exactly zero weight.

    Masked scores become ``-inf`` (not a large finite negative, which overflows in fp16 and
    rounds in bf16). A row with no allowed key is opened to every key, as in
    ``attention_mask``, so its softmax is finite in every dtype; such rows carry no label.

    Args:
        scores: (..., S) float attention scores.
        allowed: bool, broadcastable to ``scores``; True where a key may be attended.

    Returns:
        Weights with ``scores``' shape and dtype; each row sums to 1.
    """
    if allowed.dtype != torch.bool:
        raise TypeError(f"allowed must be bool (True = may attend), got {allowed.dtype}")
    allowed = allowed.expand_as(scores)
    allowed = allowed | ~allowed.any(dim=-1, keepdim=True)
    return torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1)
