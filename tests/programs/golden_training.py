"""The golden tiny training (issue 49): a fixed-seed run of the real model builder, feed and
``TrainLoop`` whose final weights must have the same bytes on every x86-64 CPU with AVX2
under the portable CPU kernel profile (seqcore.kernels).

The default Transformer's shape at reduced size (2+2 pre-norm layers, d_model 64, 4 heads,
d_ff 256, sinusoidal positions, tied embeddings, label smoothing 0.1), Adam under a cosine
schedule with warm-up and clipping, 300 steps of 32 toy pairs, one thread: every kernel family
of a default step (MKL's GEMMs, ATen's softmax, LayerNorm, reductions and elementwise ops, and
VML's ``exp``).

    python -m tests.programs.golden_training   # prints {"all": sha256, tensor: sha256, ...}

``tests/test_kernels.py`` pins the result; ``tools/cpu_models.py`` runs this under qemu.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import torch

from seqcore.config import ModelConfig, SequenceConfig, TrainConfig, TransformerConfig
from seqcore.determinism import set_determinism
from seqcore.models import build_model
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TrainLoop
from tests.factories import IDS, examples

VOCAB = 24
STEPS = 300


def train_golden(work: Path, steps: int = STEPS) -> dict[str, torch.Tensor]:
    """The final weights of the golden training (checkpoints written under ``work``)."""
    cfg = TrainConfig(seed=1234, batch_size=32, bucket_width=2, max_steps=steps,
                      lr=3e-3, schedule="cosine", warmup_steps=40, eval_every=10_000,
                      checkpoint_every=10_000, keep_last=1, threads=1, amp="none")
    set_determinism(cfg.seed, cfg.threads)
    shape = ModelConfig(transformer=TransformerConfig(
        d_model=64, n_heads=4, enc_layers=2, dec_layers=2, d_ff=256, dropout=0.0,
        norm_first=True, positions="sinusoidal", tie_embeddings=True, attention_kernel="math"))
    model = build_model(shape, VOCAB, VOCAB, IDS.pad, 16).train()
    # 256 pairs of 2-8 ids, each target its source reversed with every id shifted by one
    pairs = examples(256, seed=7, high=VOCAB - 1, lengths=(2, 8))
    feed = Seq2SeqFeed((pairs, []), IDS, SequenceConfig(), cfg)
    TrainLoop(model, cfg, feed, CheckpointDir(work, cfg.keep_last), {"task": "golden"},
              64).run(lambda entry, tokens_per_s: None)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def digests(weights: dict[str, torch.Tensor]) -> dict[str, str]:
    """sha256 of every tensor's bytes (in ``state_dict`` order), and of all of them: ``all``."""
    whole = hashlib.sha256()
    out = {}
    for name, tensor in weights.items():
        data = tensor.contiguous().numpy().tobytes()
        whole.update(data)
        out[name] = hashlib.sha256(data).hexdigest()
    return {"all": whole.hexdigest(), **out}


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        print(json.dumps(digests(train_golden(Path(work))), indent=1))


if __name__ == "__main__":
    main()
