"""Feeds: what the training loop draws micro-batches from and how it scores them.

A feed owns the data cursor (its ``state_dict`` goes into the checkpoint), draws one
micro-batch at a time, says how many units (tokens or sequences) a micro-batch contributes to
the loss denominator, and returns the *summed* loss of a micro-batch; the loop divides by the
denominator of the whole accumulated batch. ``Seq2SeqFeed`` serves encoder-decoder tasks
(g2p, parallel); ``seqcore.tasks.lm.feed.LMFeed`` serves the stateful language model.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from seqcore.config import SequenceConfig, TrainConfig
from seqcore.contract import SpecialIds
from seqcore.data.batching import BucketSampler, SamplerState
from seqcore.data.examples import Example
from seqcore.decoding.sampling import inverse_cdf
from seqcore.losses import LossNorm, LossSum, sequence_loss
from seqcore.models.base import EncoderDecoder
from seqcore.sequences import Batch, make_batch, teacher_forced_passes, to_device
from seqcore.training.dev_decode import DevSample, DevScores, decode_sample, dev_sample
from seqcore.training.distributed import World
from seqcore.training.graphs import pad_to_multiple
from seqcore.training.mrt import mrt_loss
from seqcore.training.scheduled_sampling import mix_model_tokens

CPU = torch.device("cpu")


class Feed(Protocol):
    """The loop's view of a task's data."""

    norm: LossNorm

    @property
    def epoch(self) -> int: ...

    def draw(self) -> Any:
        """The next micro-batch, advancing the cursor."""

    def count(self, batch: Any) -> int:
        """Units this micro-batch adds to the denominator under ``norm`` (tokens/sequences)."""

    def tokens(self, batch: Any) -> int:
        """Valid label tokens of the micro-batch (for logging and tokens/s)."""

    def loss(self, model: nn.Module, batch: Any, ss_prob: float, gen: torch.Generator) -> LossSum:
        """Forward pass (under the caller's autocast) and the summed loss."""

    def dev_nll(self, model: nn.Module) -> tuple[float, int]:
        """Summed dev NLL and its token count (eval mode, no gradient)."""

    def dev_decode(self, model: nn.Module) -> DevScores | None:
        """The fixed dev sample decoded and scored (seqcore.training.dev_decode), or None
        when the task decodes nothing or ``train.dev_decode_words`` is 0."""

    def sources(self, batch: Any) -> int:
        """Sources (sequences) of the micro-batch: the denominator of a minimum-risk step."""

    def mrt_loss(self, model: nn.Module, batch: Any, gen: torch.Generator) -> LossSum:
        """The summed expected risk of the micro-batch (seqcore.training.mrt)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@torch.no_grad()
def teacher_forced_nll(
    model: EncoderDecoder, examples: list[Example], ids: SpecialIds, batch_size: int
) -> tuple[float, int]:
    """Summed token NLL (EOS included, PAD/BOS excluded) and its token count, in eval mode."""
    total, count = 0.0, 0
    for _, b, logits in teacher_forced_passes(model, examples, ids, batch_size):
        out = sequence_loss(logits, b.tf.labels, "sum", 0.0, ())
        total += float(out.nll)
        count += out.tokens
    return total, count


def choose_tokens(logits: torch.Tensor, choice: str, gen: torch.Generator) -> torch.Tensor:
    """Scheduled-sampling choice from (B, T, V) logits: argmax, or a sample of each
    position's softmax by the inverse CDF of one uniform per position, drawn in row-major
    order from ``gen`` (a CPU generator: its state is checkpointed) and moved to the logits,
    so the device is never read back (issue 53) -> (B, T) ids."""
    if choice == "argmax":
        return logits.argmax(-1)
    b, t, v = logits.shape
    u = to_device(torch.rand(b * t, generator=gen), logits.device)  # (B*T,)
    return inverse_cdf(logits.reshape(b * t, v), u).view(b, t)


class Seq2SeqFeed:
    """Length-bucketed teacher-forced batches of encoded pairs, with scheduled sampling.

    Under multi-process training each rank draws its shard of the global batch stream
    (``seqcore.data.batching.BucketSampler``); batches are moved to ``device``.
    """

    def __init__(
        self, data: tuple[list[Example], list[Example]], ids: SpecialIds, seq: SequenceConfig,
        cfg: TrainConfig, device: torch.device = CPU, world: World = World(),
    ) -> None:
        self.train_ex, self.dev_ex = data
        self.ids, self.norm, self.smoothing = ids, seq.loss_norm, seq.label_smoothing
        self.ss_choice, self.eval_batch, self.device = cfg.ss_choice, cfg.batch_size, device
        self.sample: DevSample = dev_sample(self.dev_ex, cfg.dev_decode_words)
        self.decode_beam, self.decode_max_len = cfg.dev_decode_beam, seq.max_tgt_len
        self.mrt = (cfg.mrt_candidates, cfg.mrt_search, cfg.mrt_reference, cfg.mrt_risk,
                    cfg.mrt_alpha)
        self.pad_limit: int | None = None  # None: batches as long as their longest row
        lengths = [len(ex.tgt) for ex in self.train_ex]
        self.sampler = BucketSampler(lengths, cfg.batch_size, cfg.bucket_width, cfg.seed,
                                     world.rank, world.size)

    @property
    def epoch(self) -> int:
        return self.sampler.state.epoch

    def draw(self) -> Batch:
        batch = make_batch([self.train_ex[i] for i in self.sampler.next()], self.ids)
        if self.pad_limit is not None:  # the step's CUDA graphs: a few fixed shapes
            batch = pad_to_multiple(batch, self.ids.pad, self.pad_limit)
        return batch.to(self.device)

    def pad_for_graphs(self, model: nn.Module) -> None:
        """Pad every training micro-batch from now on to a multiple of PAD_MULTIPLE positions,
        within the model's position limit (seqcore.training.graphs)."""
        self.pad_limit = self._decoder(model).max_positions

    def count(self, batch: Batch) -> int:
        return batch.targets if self.norm == "sequence-mean" else batch.tokens

    def tokens(self, batch: Batch) -> int:
        return batch.tokens

    def loss(self, model: nn.Module, batch: Batch, ss_prob: float, gen: torch.Generator) -> LossSum:
        inputs = batch.tf.inputs
        if ss_prob > 0:
            with torch.no_grad():  # first, teacher-forced pass: the model's own predictions
                preds = choose_tokens(model(batch.src, batch.src_mask, inputs), self.ss_choice,
                                      gen)
            inputs = mix_model_tokens(batch.tf, preds, ss_prob, gen)
        logits = model(batch.src, batch.src_mask, inputs)
        return sequence_loss(logits, batch.tf.labels, self.norm, self.smoothing,
                             (self.ids.pad, self.ids.bos))

    def dev_nll(self, model: nn.Module) -> tuple[float, int]:
        if not self.dev_ex:
            return 0.0, 0
        return teacher_forced_nll(model, self.dev_ex, self.ids, self.eval_batch)

    def sources(self, batch: Batch) -> int:
        return int(batch.src.shape[0])

    def mrt_loss(self, model: nn.Module, batch: Batch, gen: torch.Generator) -> LossSum:
        n, search, with_reference, kind, alpha = self.mrt
        return mrt_loss(self._decoder(model), batch, self.ids, n, search, with_reference, kind,
                        alpha, self._max_len(model), gen)

    def dev_decode(self, model: nn.Module) -> DevScores | None:
        if not len(self.sample):
            return None
        return decode_sample(self._decoder(model), self.sample, self.ids, self._max_len(model),
                             self.decode_beam, self.eval_batch)

    @staticmethod
    def _decoder(model: nn.Module) -> EncoderDecoder:
        assert isinstance(model, EncoderDecoder)
        return model

    def _max_len(self, model: nn.Module) -> int:
        """What the searches while training generate at most (EOS included): the sequence
        contract's target length, within the positions the model embeds (BOS + the tokens
        before EOS)."""
        limit = self._decoder(model).max_positions
        return self.decode_max_len if limit is None else min(self.decode_max_len, limit)

    def state_dict(self) -> dict[str, Any]:
        s = self.sampler.state
        return {"epoch": s.epoch, "cursor": s.cursor, "seed": self.sampler.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["seed"] != self.sampler.seed:
            raise ValueError(f"sampler seed {state['seed']} != {self.sampler.seed}")
        self.sampler.load(SamplerState(state["epoch"], state["cursor"]))
