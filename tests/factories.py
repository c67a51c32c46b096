"""Shared test builders: the repository root, the usual special ids, tiny models, toy
examples, a tokenizer contract, prediction rows and an independent LM perplexity. Each test
file imports these instead of writing its own (no test module imports another)."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from seqcore.artifacts.model_file import ModelFile, ModelInfo, ModelMeta
from seqcore.artifacts.predictions import PredictionRow, Predictions
from seqcore.artifacts.tokenizer_contract import (
    SideContract,
    TextNormalization,
    TokenizerContract,
)
from seqcore.config import (
    Config,
    ModelConfig,
    RNNConfig,
    SequenceConfig,
    TrainConfig,
    TransformerConfig,
    config_from_dict,
)
from seqcore.contract import IGNORE_INDEX, SpecialIds
from seqcore.data.examples import Example
from seqcore.g2p import is_illegal_phoneme
from seqcore.metrics import recompute
from seqcore.metrics.evaluation import EvalSpec, evaluate_predictions, prediction_metrics
from seqcore.metrics.failures import FailureRules
from seqcore.metrics.teacher import TeacherStats
from seqcore.models import build_model
from seqcore.models.base import EncoderDecoder
from seqcore.models.rnnlm import RNNLM, RNNLMShape
from seqcore.sequences import Batch, make_batch
from seqcore.tasks.lm.documents import CharVocab, Document, split_documents
from seqcore.tasks.parallel.evaluate import eval_spec
from seqcore.tokenizer import Tokenizer, TokenizerSettings, train_sentencepiece
from seqcore.training.checkpoint import FIELDS, SCHEMA_VERSION, Checkpoint, CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TrainLoop

#: The repository root (the tests run against this checkout).
REPO = Path(__file__).resolve().parents[1]
#: The special ids of the default tokenizer contract.
IDS = SpecialIds(pad=0, unk=1, bos=2, eos=3)


def tiny_config(family: str = "transformer", dropout: float = 0.0, attention: str = "general",
                enc_layers: int = 2, dec_layers: int = 2, tie: bool = True,
                embed_dim: int = 8, hidden: int = 16) -> ModelConfig:
    """A tiny model section (d_model 16), built the way params.yaml is."""
    return ModelConfig(
        family=family,  # type: ignore[arg-type]
        transformer=TransformerConfig(d_model=16, n_heads=2, enc_layers=enc_layers,
                                      dec_layers=dec_layers, d_ff=32, dropout=dropout,
                                      tie_embeddings=tie),
        rnn=RNNConfig(embed_dim=embed_dim, hidden=hidden, enc_layers=enc_layers,
                      dec_layers=dec_layers, dropout=dropout,
                      attention=attention))  # type: ignore[arg-type]


def tiny_model(family: str = "transformer", dropout: float = 0.0, attention: str = "general",
               pad: int = IDS.pad, vocab: int = 12, *, tgt_vocab: int | None = None,
               enc_layers: int = 2, dec_layers: int = 2, tie: bool = True, embed_dim: int = 8,
               hidden: int = 16, max_len: int = 64, seed: int = 0) -> EncoderDecoder:
    """A tiny seeded random-init encoder-decoder of ``family`` in eval mode (``.train()`` it
    where dropout or the training step matters)."""
    torch.manual_seed(seed)
    cfg = tiny_config(family, dropout, attention, enc_layers, dec_layers, tie, embed_dim, hidden)
    model = build_model(cfg, vocab, vocab if tgt_vocab is None else tgt_vocab, pad, max_len)
    return model.eval()


def tiny_lm(cell: str = "gru", vocab: int = 12, embed_dim: int = 8, hidden: int = 8,
            layers: int = 1, dropout: float = 0.0, pad: int = IDS.pad, seed: int = 0) -> RNNLM:
    """A tiny seeded random-init RNN language model in eval mode."""
    torch.manual_seed(seed)
    shape = RNNLMShape(cell, vocab, embed_dim, hidden, layers,  # type: ignore[arg-type]
                       dropout, pad)
    return RNNLM(shape).eval()


def examples(n: int, seed: int = 0, low: int = 4, high: int = 11, shift: int = 1,
             lengths: tuple[int, int] = (1, 6), reverse: bool = True) -> list[Example]:
    """``n`` toy pairs with ids ``str(i)``: sources of ``lengths`` (inclusive) tokens drawn
    from [low, high); targets the source (reversed unless ``reverse`` is False) with ``shift``
    added to every id, so each label is checkable per row."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        k = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=g))
        src = torch.randint(low, high, (k,), generator=g).tolist()
        tgt = [t + shift for t in (src[::-1] if reverse else src)]
        out.append(Example(str(i), str(i), "", "", src, tgt, True))
    return out


FAMILIES = ("transformer", "gru", "lstm")


PAD = 0


#: A hand-written tokenizer contract (what pipeline/tokenizer.py writes).
CONTRACT = TokenizerContract(
    SpecialIds(pad=0, unk=1, bos=2, eos=3), ("<pad>", "<unk>", "<s>", "</s>"),
    TextNormalization("nfkc", True), "81917843c7f4" + "2" * 52,
    SideContract("src.model", "761378d3" + "0" * 56, "char", 33, 40, 1.0),
    SideContract("tgt.model", "0faf2d1a" + "1" * 56, "word", 40, 44, 1.0), {})


# (id, group, reference, hypothesis, eos, pieces-override): variants of "either" share a group.
CASES = [
    ("1", "either", "IY DH ER", "AY DH ER", True, None),
    ("2", "either", "AY DH ER", "AY DH ER", True, None),
    ("3", "cat", "K AE T", "K AE T", True, None),
    ("4", "dog", "D AO G", "", True, None),
    ("5", "abab", "AH B AH B", "AH B AH B AH B AH B", False, None),
    ("6", "unk", "S IH T IY", "S <unk> T IY", True, ["S", "<unk>", "T", "IY"]),
    ("7", "xq", "EH K S", "EH K QQ", True, None),
    ("8", "long", "AH B K D EH F G HH IH JH K", "AH B K D EH F G HH", True, None),
    ("9", "kk", "K", "K K K", True, None),
]


def make_rows(cases: list[tuple] = CASES) -> list[PredictionRow]:
    """Prediction rows of ``cases`` (id, group, reference, hypothesis, eos, pieces-override)."""
    rows = []
    for id_, group, ref, hyp, eos, pieces in cases:
        toks = hyp.split()
        rows.append(PredictionRow(id_, group, f"src{id_}", ref, hyp, list(range(len(toks))),
                                  pieces or toks, -1.0, -1.0, len(toks), eos, []))
    return rows


def document_nll(model: torch.nn.Module, doc: list[int], window: int | None) -> float:
    """Summed NLL of ``BOS doc EOS`` read in windows of ``window`` positions (None: whole),
    each window from the zero state."""
    seq = [IDS.bos, *doc, IDS.eos]
    inputs, labels = torch.tensor(seq[:-1]), torch.tensor(seq[1:])
    width = window or len(inputs)
    was_training, total = model.training, 0.0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(inputs), width):
            logits, _ = model(inputs[None, start:start + width], model.initial_state(1))
            total += float(torch.nn.functional.cross_entropy(
                logits[0], labels[start:start + width], reduction="sum"))
    model.train(was_training)
    return total


def model_file_perplexities(path: Path, docs: list[Document], dev: float, test: float,
                            bptt: int) -> dict[str, float]:
    """The lm report's perplexities recomputed by hand from a saved model file: exp(summed
    NLL / tokens) over the held-out tails of ``docs``, carried or reset every segment."""
    blob = torch.load(path, weights_only=True)
    model = RNNLM(RNNLMShape(**blob["lm_shape"]))
    model.load_state_dict(blob["model"])
    vocab = CharVocab(blob["vocab"], IDS)
    out = {}
    for name, split in zip(("dev", "test"), split_documents(docs, dev, test)[1:], strict=True):
        encoded = [vocab.encode(d.text) for d in split]
        tokens = sum(len(d) + 1 for d in encoded)
        for key, window in (("carried", None), ("reset_every_segment", bptt)):
            nll = sum(document_nll(model, d, window) for d in encoded)
            out[f"{name}_ppl_{key}"] = math.exp(nll / tokens)
    return out


def whole_checkpoint(**fields: object) -> Checkpoint:
    """A checkpoint with every field a loadable one holds (``FIELDS``: empty placeholders,
    this schema), ``fields`` replacing them: for tests of the folder's bookkeeping."""
    return Checkpoint({**{k: {} for k in FIELDS}, "schema": SCHEMA_VERSION, "history": [],
                       **fields})


#: train.seed of ``s2s_loop``: the bucket sampler's shuffle.
S2S_SEED = 5


class Killed(Exception):
    """Stands in for SIGKILL: raised from ``on_step`` after the step's checkpoint."""


def s2s_loop(work: Path, max_steps: int, dev: int = 0, **train: object) -> TrainLoop:
    """A fresh tiny encoder-decoder run on 12 pairs, 4 per batch (3 batches an epoch), with the
    next ``dev`` pairs of the same draw as its dev set, checkpointing every step into ``work``."""
    cfg = TrainConfig(**{"seed": S2S_SEED, "amp": "none", "batch_size": 4, "bucket_width": 2,
                         "max_steps": max_steps, "schedule": "constant", "lr": 1e-2,
                         "warmup_steps": 0, "eval_every": 100, "checkpoint_every": 1,
                         "keep_last": 2, "threads": 1, **train})
    model = tiny_model(dropout=0.2, enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
    pairs = examples(12 + dev, seed=3, lengths=(1, 5))
    feed = Seq2SeqFeed((pairs[:12], pairs[12:]), IDS, SequenceConfig(), cfg)
    return TrainLoop(model, cfg, feed, CheckpointDir(work, cfg.keep_last), {"task": "s2s"}, 16)


def train_setup(setup: Any, cfg: TrainConfig, work: Path) -> Any:
    """Run a task's training setup (``seqcore.tasks.*.setup``: model, feed, contract,
    d_model) through the training loop to ``cfg.max_steps``; its final state."""
    loop = TrainLoop(setup.model, cfg, setup.feed, CheckpointDir(work, 2), setup.contract,
                     setup.d_model)
    return loop.run(lambda entry, tokens_per_s: None)


def kill_after(loop: TrainLoop, step: int) -> None:
    """Run ``loop`` until it has checkpointed ``step``, then stop it as a kill would."""
    def stop(done: int) -> None:
        if done == step:
            raise Killed(step)
    loop.on_step = stop
    with pytest.raises(Killed):
        loop.run(lambda entry, tokens_per_s: None)


# -- reference computations shared by the loop, lm and teacher-forcing tests --------------

def smoothed_token_losses(
    logp: torch.Tensor, labels: torch.Tensor, eps: float, ids: SpecialIds = IDS,
) -> list[torch.Tensor]:
    """Per sequence, the token losses written out: q(k) = (1 - eps)[k = y] + eps / K over the
    K ids other than PAD and BOS, q(PAD) = q(BOS) = 0; token loss -sum_k q(k) log p(k).

    Args:
        logp: (B, T, V) log-probabilities; labels: (B, T), IGNORE_INDEX where unlabelled.
    """
    q = torch.full((logp.shape[-1],), eps / (logp.shape[-1] - 2))
    q[[ids.pad, ids.bos]] = 0.0
    out = []
    for row in range(labels.shape[0]):
        losses = []
        for t in range(labels.shape[1]):
            y = int(labels[row, t])
            if y != IGNORE_INDEX:
                target = q.clone()
                target[y] += 1 - eps
                losses.append(-(target * logp[row, t]).sum())
        if losses:
            out.append(torch.stack(losses))
    return out


def dropout_modes(model: nn.Module) -> list[bool]:
    """Record ``training`` of every dropout module at each call (forward pre-hooks)."""
    seen: list[bool] = []
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.register_forward_pre_hook(lambda mod, args: seen.append(mod.training))
    return seen


def eval_nll(model: nn.Module, data: list[Example]) -> float:
    m = copy.deepcopy(model).eval()
    b = make_batch(data, IDS)
    with torch.no_grad():
        logp = torch.log_softmax(m(b.src, b.src_mask, b.tf.inputs), -1)
    valid = b.tf.labels != IGNORE_INDEX
    return float(-logp.gather(-1, b.tf.labels.clamp(min=0)[..., None])[..., 0][valid].sum())


class Oracle(nn.Module):
    """Fixed logits whatever the inputs: a bias parameter (``bump`` at ``token``) plus, if
    ``positional``, 10 at token 4 + t at position t; records each decoder input and grad mode."""

    def __init__(self, vocab: int = 12, bump: float = 0.0, positional: bool = False,
                 token: int = 7) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab))  # something for the optimiser to step
        with torch.no_grad():
            self.bias[token] = bump
        self.positional = positional
        self.calls: list[torch.Tensor] = []
        self.grad_modes: list[bool] = []

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor
                ) -> torch.Tensor:
        self.calls.append(tgt_in.detach().clone())
        self.grad_modes.append(torch.is_grad_enabled())
        b, t = tgt_in.shape
        table = torch.zeros(t, len(self.bias))
        if self.positional:
            table[torch.arange(t), torch.arange(t) + 4] = 10.0
        return table.expand(b, t, -1) + self.bias  # (B, T, V)


# -- evaluation inputs: rows, rules and tokenizers ------------------------------------------


def row(rid: str, ref: str, hyp: str, group: str | None = None, eos: bool = True) -> PredictionRow:
    """A predictions row of ``hyp`` against ``ref`` (its own group unless given)."""
    return make_rows([(rid, group or f"w{rid}", ref, hyp, eos, None)])[0]


def spec(edges: tuple[int, ...] = (), group_by: str = "none", illegal: object = None) -> EvalSpec:
    return EvalSpec(edges, FailureRules(2, 3, 1), group_by, illegal)  # type: ignore[arg-type]


#: Teacher-forced statistics of three sequences, the last without tokens.
STATS = [TeacherStats(2.0, 4, 3), TeacherStats(3.0, 2, 1), TeacherStats(0.0, 0, 0)]


def g2p(evaluate: dict | None = None) -> EvalSpec:
    """The evaluation of the g2p task with these ``evaluate`` settings (None: the defaults)."""
    return recompute.eval_spec(config_from_dict({"evaluate": evaluate} if evaluate else {}),
                               is_illegal_phoneme)


def trained_tokenizer(texts: list[str], path: Path, model_type: str = "char", vocab: int = 40,
                      ids: SpecialIds = IDS, coverage: float = 1.0) -> Tokenizer:
    """A SentencePiece tokenizer trained on ``texts`` and saved at ``path``."""
    settings = TokenizerSettings(model_type, vocab, coverage)  # type: ignore[arg-type]
    return Tokenizer(train_sentencepiece(texts, settings, ids, path))


#: The words and pronunciations of :func:`model_files`' tokenizers.
WORDS = ["cat", "bat", "tack", "act", "tab"]
PHONES = ["K AE T", "B AE T", "T AE K", "AE K T", "T AE B"]


def model_files(folder: Path) -> Path:
    """``folder`` with what a result's model is read from, written by hand: the tokenizers
    (char sources, word targets, trained on :data:`WORDS` and :data:`PHONES`) and their
    ``contract.json``, and model files keyed to them (a Transformer of d=16, seeded, trained
    for 4 source tokens, 1 thread): ``model.pt`` untrained, ``ends.pt`` that ends every output
    at once (empty, with EOS), ``unk.pt`` that writes UNK at every step, and ``other.pt``
    keyed to another source tokenizer."""
    src = trained_tokenizer(WORDS * 4, folder / "src.model", "char", 10)
    tgt = trained_tokenizer(PHONES * 4, folder / "tgt.model", "word", 10)
    sides = {name: SideContract(f"{name}.model", tok.sha256, kind, tok.vocab_size, 10, 1.0)
             for name, tok, kind in (("src", src, "char"), ("tgt", tgt, "word"))}
    dataclasses.replace(CONTRACT, **sides).save(folder / "contract.json")
    shape = ModelConfig(transformer=TransformerConfig(d_model=16, n_heads=2, enc_layers=1,
                                                      dec_layers=1, d_ff=32))
    info = ModelInfo(shape, src.vocab_size, tgt.vocab_size, IDS.pad, 8)
    torch.manual_seed(0)
    model = build_model(shape, src.vocab_size, tgt.vocab_size, IDS.pad, 8)
    contract = {"tokenizer.src.sha256": src.sha256, "tokenizer.tgt.sha256": tgt.sha256,
                "train.threads": 1, "sequence.max_src_len": 4}
    meta = ModelMeta("sig", 0, "last", 0, 0, None, contract)
    ModelFile(model.state_dict(), meta, info).save(folder / "model.pt")
    # the decoder's output made a constant along its first dimension, which only one
    # token's logit reads: EOS (an empty output, ended), then UNK (at every step)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    weights["dec_norm.weight"].zero_()
    weights["dec_norm.bias"].zero_()[0] = 1.0
    for name, token in (("ends.pt", IDS.eos), ("unk.pt", IDS.unk)):
        weights["proj.weight"][:, 0] = 0.0
        weights["proj.weight"][token, 0] = 10.0
        ModelFile(weights, meta, info).save(folder / name)
    other = dict(contract, **{"tokenizer.src.sha256": "0" * 64})
    ModelFile(model.state_dict(), dataclasses.replace(meta, training_contract=other),
              info).save(folder / "other.pt")
    return folder


def written(path: Path, data: str | bytes) -> Path:
    """``path`` with ``data`` written to it (text as UTF-8)."""
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


class IdPieces:
    """A target tokenizer stand-in: a token's piece is its id."""

    def decode(self, tokens: list[int]) -> str:
        return " ".join(map(str, tokens))

    def piece(self, token: int) -> str:
        return str(token)


def evaluated_failures(rows: list[PredictionRow], cfg: Config, tmp_path: Path) -> dict[str, Any]:
    """The failure part of metrics.json, through the predictions file as evaluate reads it."""
    path = tmp_path / "test.jsonl"
    Predictions(rows).save(path)
    ev = evaluate_predictions(Predictions.load(path).rows, eval_spec(cfg))
    flagged = {k: [e["id"] for e in ev.failures[k]["examples"]] for k in
               ("empty", "truncated", "repeated", "illegal")}
    return {"metrics": prediction_metrics(ev)["failures"], "ids": flagged}


class _ScalarReads(TorchDispatchMode):
    """The dispatcher's half of ReadBacks: scalar reads and value-dependent shapes."""

    SCALAR_READS = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal",
                    "aten::nonzero", "aten::masked_select"}

    def __init__(self, found: list[str]) -> None:
        super().__init__()
        self.found = found

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        name = func._schema.name
        by_mask = name in {"aten::index", "aten::index_put", "aten::index_put_"} and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] or ())
        if name in self.SCALAR_READS or by_mask:
            self.found.append(name + (" (boolean mask)" if by_mask else ""))
        return func(*args, **(kwargs or {}))


class _HostCopies(TorchFunctionMode):
    """The Python half of ReadBacks: whole tensors copied to the host (``tolist``, ``numpy``,
    ``cpu``), which never reach the dispatcher as a read."""

    HOST_COPIES = {"tolist", "numpy", "cpu"}

    def __init__(self, found: list[str]) -> None:
        super().__init__()
        self.found = found

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in self.HOST_COPIES:
            self.found.append(f"Tensor.{name}")
        return func(*args, **(kwargs or {}))


class ReadBacks:
    """Records, by op name, every call that reads a tensor's value back to the host: a scalar
    read (``item``, ``int``, ``float``, ``bool``), a shape that depends on the values
    (``nonzero``, ``masked_select``, boolean indexing) or a whole tensor copied out
    (``tolist``, ``numpy``, ``cpu``). On a GPU each one waits until the stream has caught up
    (issue 53); a CPU run makes the same calls, so it finds them. (``.to(device)`` is not
    recorded: on the CPU it cannot be told from a move to the GPU.)"""

    def __init__(self) -> None:
        self.found: list[str] = []
        self._modes = (_HostCopies(self.found), _ScalarReads(self.found))

    def __enter__(self) -> ReadBacks:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)


def one_step_reads(loop: TrainLoop) -> tuple[list[str], Any, list[Any]]:
    """What one step of ``loop`` reads back from the device (``ReadBacks``), after a first
    step that creates Adam's state (and, with several ranks, reads which parameters have
    gradients): (the reads, the step's pending figures, its micro-batches). The micro-batches
    are drawn and counted on the host before the step, as their move to a GPU counts them."""
    loop.train_step()
    drawn = [loop.feed.draw() for _ in range(loop.cfg.accum_steps)]
    drawn = [dataclasses.replace(b, counted=(b.tokens, b.targets)) if isinstance(b, Batch)
             else b for b in drawn]  # an lm segment is counted where the batcher builds it
    loop.feed.draw = iter(drawn).__next__  # type: ignore[method-assign]
    try:
        with ReadBacks() as reads:
            pending = loop._step()
    finally:
        del loop.feed.draw  # the feed's own again
    return reads.found, pending, drawn
