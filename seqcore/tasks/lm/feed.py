"""The ``lm`` task's feed: truncated BPTT over B parallel streams with a carried state.

Per segment: zero the state of slots that start a new document, run the K positions from the
carried state, keep the returned state *detached* for the next segment (the forward value
crosses the boundary, the gradient does not). The carried state of every slot and the
stream cursor are part of the checkpoint, so a resumed run continues mid-document exactly.

Under multi-process training every rank runs the same global stream cursor and owns the slots
``rank, rank + world, ...`` of each segment (and their carried state), so W ranks together
train on exactly the single-process batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from seqcore.contract import IGNORE_INDEX, SpecialIds
from seqcore.losses import LossNorm, LossSum, labelled_nll, sequence_loss
from seqcore.models.rnnlm import RNNLM, LMState, detach_state, reset_state
from seqcore.sequences import to_device
from seqcore.tasks.lm.streams import Segment, StreamBatcher, StreamState
from seqcore.training.distributed import World


def segment_rows(seg: Segment, rows: slice, device: torch.device) -> Segment:
    """Some slots of a segment, on ``device``: inputs/labels (B', K), reset (B',), their
    labelled positions counted on the host first and moved without the host waiting (so the
    step waits on nothing)."""
    labels = seg.labels[rows]
    return Segment(to_device(seg.inputs[rows], device), to_device(labels, device),
                   to_device(seg.reset[rows], device), int((labels >= 0).sum()))


def segment_loss(
    model: RNNLM, seg: Segment, state: LMState, norm: LossNorm, smoothing: float,
    excluded: tuple[int, ...],
) -> tuple[LossSum, LMState]:
    """Loss of one segment from a carried state; returns the new state, detached.

    Args:
        seg: inputs/labels (B, K), reset (B,).
        state: tensors (L, B, H) carried from the previous segment.
    """
    logits, new = segment_forward(model, seg, state)  # (B, K, V)
    return sequence_loss(logits, seg.labels, norm, smoothing, excluded), new


def segment_forward(model: RNNLM, seg: Segment, state: LMState
                    ) -> tuple[torch.Tensor, LMState]:
    """Logits (B, K, V) of one segment from a carried state (zeroed where ``seg.reset``),
    and the new state, detached."""
    logits, new = model(seg.inputs, reset_state(state, seg.reset))  # (B, K, V)
    return logits, detach_state(new)


@dataclass(frozen=True)
class StreamNLL:
    """NLL of documents read as parallel streams: the total and each document's share.

    Attributes:
        total: summed NLL (nats), summed segment by segment as the perplexity always was.
        tokens: label positions (each document's tokens plus its EOS).
        documents: (NLL, tokens) of each document, in document order; they add up to
            ``tokens`` exactly and to ``total`` to float rounding (float64 per document).
    """

    total: float
    tokens: int
    documents: tuple[tuple[float, int], ...]


@torch.no_grad()
def stream_nll(
    model: RNNLM, docs: list[list[int]], ids: SpecialIds, streams: int, bptt: int, carry: bool
) -> StreamNLL:
    """Summed NLL and token count over documents, read once in order, in eval mode, in
    total and per document (each row of a segment belongs to one document: StreamBatcher).

    ``carry=False`` resets the state at every segment (the baseline that shows what the
    carried state is worth); ``carry=True`` carries it within each document.
    """
    if not docs:
        return StreamNLL(0.0, 0, ())
    was_training = model.training
    model.eval()
    batcher = StreamBatcher(docs, streams, bptt, 0, False, (ids.pad, ids.bos, ids.eos))
    state = model.initial_state(streams)
    device = next(model.parameters()).device
    total, count = 0.0, 0
    doc_nll, doc_tokens = [0.0] * len(docs), [0] * len(docs)
    while (seg := batcher.next()) is not None:
        seg = segment_rows(seg, slice(None), device)
        if not carry:
            seg = Segment(seg.inputs, seg.labels, torch.ones_like(seg.reset))
        logits, new = segment_forward(model, seg, state)  # (B, K, V)
        # one log-softmax: its sum is the total as it always was (sequence_loss's NLL but for
        # the order of summing), its rows each document's share (accumulated in float64)
        _, row, _, nll = labelled_nll(logits, seg.labels)
        total += float(nll.sum())
        count += nll.numel()
        per_row = torch.zeros(len(seg.labels), dtype=torch.float64, device=nll.device)
        rows = zip(batcher.owners(), per_row.index_add(0, row, nll.double()).tolist(),
                   (seg.labels != IGNORE_INDEX).sum(1).tolist(), strict=True)
        for doc, nll, n in rows:
            if n:  # an empty or finished slot has no labels and no document
                doc_nll[doc] += nll
                doc_tokens[doc] += n
        state = new
    model.train(was_training)
    return StreamNLL(total, count, tuple(zip(doc_nll, doc_tokens, strict=True)))


def lm_nll(
    model: RNNLM, docs: list[list[int]], ids: SpecialIds, streams: int, bptt: int, carry: bool
) -> tuple[float, int]:
    """Summed NLL and token count of :func:`stream_nll` (the dev NLL of training)."""
    s = stream_nll(model, docs, ids, streams, bptt, carry)
    return s.total, s.tokens


class LMFeed:
    """Segments of the training documents with the carried state of every batch slot."""

    def __init__(
        self, data: tuple[list[list[int]], list[list[int]]], ids: SpecialIds, norm: LossNorm,
        smoothing: float, streams: int, bptt: int, seed: int, world: World = World(),
        device: torch.device = torch.device("cpu"),
    ) -> None:
        self.train_docs, self.dev_docs = data
        self.ids, self.smoothing, self.streams, self.bptt = ids, smoothing, streams, bptt
        self.rows, self.device = slice(world.rank, None, world.size), device
        self.local_streams = len(range(streams)[self.rows])
        # A sequence is not a unit in a stream: sequence-mean falls back to token-mean.
        self.norm: LossNorm = "sum" if norm == "sum" else "token-mean"
        self.batcher = StreamBatcher(self.train_docs, streams, bptt, seed, True,
                                     (ids.pad, ids.bos, ids.eos))
        self.carried: LMState | None = None

    @property
    def epoch(self) -> int:
        return self.batcher.state.epoch

    def draw(self) -> Segment:
        seg = self.batcher.next()
        assert seg is not None  # a cycling batcher never ends
        return segment_rows(seg, self.rows, self.device)

    def count(self, batch: Segment) -> int:
        return self.tokens(batch)

    def tokens(self, batch: Segment) -> int:
        return batch.tokens

    def loss(self, model: torch.nn.Module, batch: Segment, ss_prob: float,
             gen: torch.Generator) -> LossSum:
        assert isinstance(model, RNNLM)
        state = self.carried if self.carried is not None else \
            model.initial_state(self.local_streams)
        out, self.carried = segment_loss(model, batch, state, self.norm, self.smoothing,
                                         (self.ids.pad, self.ids.bos))
        return out

    def dev_nll(self, model: torch.nn.Module) -> tuple[float, int]:
        assert isinstance(model, RNNLM)
        return lm_nll(model, self.dev_docs, self.ids, self.streams, self.bptt, carry=True)

    def sources(self, batch: Any) -> int:
        raise ValueError("task lm has no minimum risk training (train.mrt_steps must be 0)")

    def mrt_loss(self, model: torch.nn.Module, batch: Any, gen: torch.Generator) -> LossSum:
        raise ValueError("task lm has no minimum risk training (train.mrt_steps must be 0)")

    def dev_decode(self, model: torch.nn.Module) -> None:
        """A language model has no source to decode from: no dev decoding."""
        return None

    def state_dict(self) -> dict[str, Any]:
        s = self.batcher.state
        return {"epoch": s.epoch, "next_doc": s.next_doc, "slots": [list(x) for x in s.slots],
                "seed": self.batcher.seed,
                "carried": list(self.carried) if self.carried is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["seed"] != self.batcher.seed:
            raise ValueError(f"stream seed {state['seed']} != {self.batcher.seed}")
        slots = tuple((int(d), int(p)) for d, p in state["slots"])
        self.batcher.load(StreamState(state["epoch"], state["next_doc"], slots))
        carried = state["carried"]
        self.carried = tuple(t.to(self.device) for t in carried) if carried is not None else None
