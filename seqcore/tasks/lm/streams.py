"""Parallel streams for truncated BPTT (the ``lm`` task): B slots over documents, cut into
segments of K positions, with a state of three integers per slot that a checkpoint holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from seqcore.contract import IGNORE_INDEX


@dataclass(frozen=True)
class StreamState:
    """Where every stream is: the epoch, the next document of the epoch's order to hand out,
    and per batch slot the (document index, position) it reads next (-1 = empty slot)."""

    epoch: int = 0
    next_doc: int = 0
    slots: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Segment:
    """K positions of B parallel streams.

    Attributes:
        inputs: (B, K) token ids (PAD where a slot has no more text).
        labels: (B, K) the next token, IGNORE_INDEX where there is none.
        reset: (B,) bool, True where the slot starts a new document in this segment: its
            carried state must be zeroed before the segment.
        labelled: the number of labelled positions, where counted on the host before a move
            (seqcore.tasks.lm.feed.segment_rows); None: count ``labels``.
    """

    inputs: torch.Tensor
    labels: torch.Tensor
    reset: torch.Tensor
    labelled: int | None = field(default=None, compare=False)

    @property
    def tokens(self) -> int:
        """Labelled positions: the host's count where taken, else counted from ``labels``."""
        return self.labelled if self.labelled is not None else int((self.labels >= 0).sum())


class StreamBatcher:
    """B streams over documents, cut into segments of K positions (truncated BPTT).

    A document is read as ``BOS text EOS``; a segment never straddles two documents: when a
    document ends inside a segment the rest of that slot's row is padding, and the next
    document takes the slot at the next segment with ``reset`` set. With ``cycle`` the
    documents are re-dealt in a new seeded order every epoch (infinite stream); without it
    (evaluation) they are dealt once in the given order and ``next`` returns None at the end.
    Slot s could be owned by rank ``s % world_size`` for multi-process training.
    """

    def __init__(self, docs: list[list[int]], streams: int, bptt: int, seed: int, cycle: bool,
                 ids: tuple[int, int, int]) -> None:
        if not docs:
            raise ValueError("no documents")
        self.docs, self.streams, self.bptt, self.seed, self.cycle = docs, streams, bptt, seed, cycle
        self.pad, self.bos, self.eos = ids
        self.state = StreamState(slots=tuple((-1, 0) for _ in range(streams)))
        self._order = self._epoch_order(0)

    def _epoch_order(self, epoch: int) -> list[int]:
        if not self.cycle:
            return list(range(len(self.docs)))
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.docs), generator=g).tolist()

    def load(self, state: StreamState) -> None:
        if len(state.slots) != self.streams:
            raise ValueError(f"{len(state.slots)} stream slots stored, {self.streams} configured")
        self.state = state
        self._order = self._epoch_order(state.epoch)

    def _deal(self, epoch: int, nxt: int) -> tuple[int, int, int]:
        """The next document to put in a slot: (document or -1, epoch, next_doc)."""
        if nxt >= len(self._order):
            if not self.cycle:
                return -1, epoch, nxt
            epoch, nxt = epoch + 1, 0
            self._order = self._epoch_order(epoch)
        return self._order[nxt], epoch, nxt + 1

    def next(self) -> Segment | None:
        """The next segment, advancing every slot (None when a non-cycling feed is done)."""
        epoch, nxt = self.state.epoch, self.state.next_doc
        slots, rows_in, rows_lab, reset = [], [], [], []
        for doc, pos in self.state.slots:
            if doc < 0 or pos >= len(self.docs[doc]) + 1:  # empty or finished: deal a new doc
                doc, epoch, nxt = self._deal(epoch, nxt)
                pos = 0
            tokens = self.docs[doc] if doc >= 0 else None
            rows_in.append(self._slice(tokens, pos, pos + self.bptt))
            rows_lab.append(self._slice(tokens, pos + 1, pos + 1 + self.bptt))
            reset.append(pos == 0)
            slots.append((doc, pos + self.bptt))
        if all(d < 0 for d, _ in slots):
            return None
        self.state = StreamState(epoch, nxt, tuple(slots))
        return _segment(rows_in, rows_lab, reset, self.bptt, self.pad)

    def owners(self) -> list[int]:
        """The document each slot's row of the last segment read (-1: none), by slot: a row
        never straddles two documents."""
        return [doc for doc, _ in self.state.slots]

    def _slice(self, doc: list[int] | None, a: int, b: int) -> list[int]:
        """``[BOS, *doc, EOS][a:b]`` without copying the document (None = empty slot)."""
        if doc is None:
            return [self.bos][a:b]
        n = len(doc)
        head = [self.bos] if a == 0 < b else []
        tail = [self.eos] if a <= n + 1 < b else []
        return head + doc[max(a - 1, 0) : max(min(b - 1, n), 0)] + tail


def _segment(rows_in: list[list[int]], rows_lab: list[list[int]], reset: list[bool], width: int,
             pad: int) -> Segment:
    inputs = torch.full((len(rows_in), width), pad, dtype=torch.long)
    labels = torch.full((len(rows_in), width), IGNORE_INDEX, dtype=torch.long)
    for i, (r_in, r_lab) in enumerate(zip(rows_in, rows_lab)):
        inputs[i, : len(r_lab)] = torch.tensor(r_in[: len(r_lab)], dtype=torch.long)
        labels[i, : len(r_lab)] = torch.tensor(r_lab, dtype=torch.long)
    return Segment(inputs, labels, torch.tensor(reset, dtype=torch.bool))
