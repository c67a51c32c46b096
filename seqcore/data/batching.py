"""Batch order: length-bucketed batches for pairs, parallel streams for language modelling.

BucketSampler: length-bucketed batches with a seeded shuffle whose whole state is
(epoch, cursor).

Each epoch's order is a pure function of (seed, epoch), so the sampler's checkpointed state
is two integers plus the seed, and a resumed run replays exactly the same batches.

Multi-process training shards the one global stream of batches (epoch after epoch): of every
``world`` consecutive batches rank r takes the r-th. Every rank keeps the same global state,
so the union of the shards is the single-process stream, every example is seen once per epoch
across ranks, and W ranks with ``accum_steps`` a draw the batches that one process with
``accum_steps`` W*a draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from seqcore.contract import IGNORE_INDEX


@dataclass(frozen=True)
class SamplerState:
    """Where the sampler is: the epoch and the index of the next batch in it."""

    epoch: int = 0
    cursor: int = 0


def epoch_batches(
    lengths: list[int], batch_size: int, bucket_width: int, seed: int, epoch: int
) -> list[list[int]]:
    """The batches of one epoch, as lists of example indices.

    Examples are shuffled with a generator seeded from (seed, epoch), stably grouped by length
    bucket (``length // bucket_width``) so each batch holds similar lengths, cut into batches,
    and the batch order is shuffled again.
    """
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(len(lengths), generator=g).tolist()
    perm.sort(key=lambda i: lengths[i] // max(bucket_width, 1))  # stable: random within bucket
    batches = [perm[i : i + batch_size] for i in range(0, len(perm), batch_size)]
    order = torch.randperm(len(batches), generator=g).tolist()
    return [batches[i] for i in order]


class BucketSampler:
    """Infinite stream of batches; ``state`` is checkpointed, ``load`` restores it.

    With ``world`` > 1, ``next`` returns rank ``rank``'s shard: the rank-th of the next
    ``world`` batches of the global stream (``state`` is the global position).
    """

    def __init__(self, lengths: list[int], batch_size: int, bucket_width: int, seed: int,
                 rank: int = 0, world: int = 1) -> None:
        if not lengths:
            raise ValueError("no training examples")
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world of {world}")
        self.lengths, self.batch_size, self.bucket_width, self.seed = (
            lengths, batch_size, bucket_width, seed)
        self.rank, self.world = rank, world
        self.state = SamplerState()
        self._batches = self._epoch(0)

    def _epoch(self, epoch: int) -> list[list[int]]:
        return epoch_batches(self.lengths, self.batch_size, self.bucket_width, self.seed, epoch)

    def load(self, state: SamplerState) -> None:
        self.state = state
        self._batches = self._epoch(state.epoch)

    def next(self) -> list[int]:
        """This rank's next batch of indices, advancing the global state by ``world`` batches."""
        mine: list[int] = []
        for r in range(self.world):
            batch = self._next_global()
            if r == self.rank:
                mine = batch
        return mine

    def _next_global(self) -> list[int]:
        if self.state.cursor >= len(self._batches):
            self.load(SamplerState(self.state.epoch + 1, 0))
        batch = self._batches[self.state.cursor]
        self.state = SamplerState(self.state.epoch, self.state.cursor + 1)
        return batch


# -- streams for truncated BPTT (the lm task) ----------------------------------------------


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
    """

    inputs: torch.Tensor
    labels: torch.Tensor
    reset: torch.Tensor


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
