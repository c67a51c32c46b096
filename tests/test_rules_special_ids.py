"""Rule 9: special ids come from the tokenizer contract, never hard-coded: a SentencePiece
model trained with non-default ids (PAD=5, UNK=6, BOS=7, EOS=4) is followed by the shift,
padding, loss, models and decoding."""
from __future__ import annotations

import re

import pytest
import torch

from seqcore.contract import IGNORE_INDEX, SpecialIds, TeacherForcing
from seqcore.data.examples import Example
from seqcore.decoding.greedy import greedy
from seqcore.losses import sequence_loss
from seqcore.models.base import EncoderDecoder
from seqcore.tokenizer import Tokenizer
from seqcore.sequences import make_batch
from tests.factories import FAMILIES, REPO, tiny_model, trained_tokenizer

ODD = SpecialIds(pad=5, unk=6, bos=7, eos=4)
WORDS = ["abcdef", "ghijkl", "mnopq", "fedcba", "kjihg", "qponm", "aceg", "bdfh"]
SEQCORE = REPO / "seqcore"


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return trained_tokenizer(WORDS, tmp_path_factory.mktemp("spm") / "chars.model", ids=ODD)


def odd_batch(tok: Tokenizer) -> tuple[torch.Tensor, torch.Tensor, TeacherForcing]:
    ids = tok.special_ids()
    examples = [Example(str(i), str(i), w, w, tok.encode(w), tok.encode(w[::-1]), True)
                for i, w in enumerate(["abc", "ghijk"])]
    batch = make_batch(examples, ids)
    return batch.src, batch.src_mask, batch.tf


def test_special_ids_come_from_the_tokenizer_contract(tok: Tokenizer) -> None:
    assert tok.special_ids() == ODD
    assert tok.vocab_size > 7


def test_special_ids_shift_and_padding_use_the_contract_ids(tok: Tokenizer) -> None:
    src, src_mask, tf = odd_batch(tok)
    assert (tf.inputs[:, 0] == ODD.bos).all()
    assert src[0, 3:].tolist() == [ODD.pad] * 2 and not src_mask[0, 3:].any()
    assert tf.inputs[0, 4:].tolist() == [ODD.pad] * 2
    assert tf.labels[0, :4].tolist() == tok.encode("cba") + [ODD.eos]
    assert tf.labels[1, :6].tolist() == tok.encode("kjihg") + [ODD.eos]
    assert (tf.labels[0, 4:] == IGNORE_INDEX).all()


def test_special_ids_loss_smoothing_skips_contract_pad_and_bos(tok: Tokenizer) -> None:
    _, _, tf = odd_batch(tok)
    logits = torch.zeros(*tf.labels.shape, tok.vocab_size, requires_grad=True)
    out = sequence_loss(logits, tf.labels, "sum", 0.1, (ODD.pad, ODD.bos))
    out.total.backward()
    q = torch.softmax(logits.detach(), -1) - logits.grad  # the smoothed targets
    real = tf.labels != IGNORE_INDEX
    assert (q[real][:, [ODD.pad, ODD.bos]].abs() < 1e-7).all()
    assert (q[real][:, ODD.unk] > 0).all()  # the default PAD/BOS ids (0, 2) are ordinary here
    assert (q[real][:, 0] > 0).all() and (q[real][:, 2] > 0).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_special_ids_models_keep_the_contract_pad_row_at_zero(tok: Tokenizer, family: str) -> None:
    model = tiny_model(family, pad=ODD.pad, vocab=tok.vocab_size)
    for table in (model.src_embed, model.tgt_embed):
        assert table.padding_idx == ODD.pad
        assert (table.weight[ODD.pad] == 0).all()
    src, src_mask, tf = odd_batch(tok)
    assert torch.isfinite(model(src, src_mask, tf.inputs)).all()


class ScriptedDecoder(EncoderDecoder):
    """Oracle: emits tokens 8, 9 then EOS=4, and records the tokens it was fed."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab, self.fed, self.script = vocab, [], [8, 9, ODD.eos]

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return src_mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def start(self, memory: torch.Tensor) -> torch.Tensor:
        return torch.zeros(memory.shape[0], dtype=torch.long)

    def step(self, tokens: torch.Tensor, memory: torch.Tensor, state: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
        self.fed.append(tokens.tolist())
        logits = torch.full((tokens.shape[0], self.vocab), -10.0)
        logits[:, self.script[int(state[0])]] = 10.0
        return logits, state + 1


def test_special_ids_decoding_starts_with_contract_bos_and_stops_at_contract_eos() -> None:
    model = ScriptedDecoder(12).eval()
    src = torch.tensor([[8, 9]])
    hyps = greedy(model, src, torch.ones_like(src, dtype=torch.bool), ODD, max_len=8)
    assert model.fed[0] == [ODD.bos]
    assert hyps[0].tokens == [8, 9] and hyps[0].eos
    assert len(model.fed) == 3  # stopped at EOS=4, not at the default EOS=3


#: ``pad_id=0``, ``bos: 2``, ``eos == 3``, ``padding_idx=0``: a special id written as a literal.
HARD_CODED = re.compile(
    r"\b(?:pad|unk|bos|eos|padding_idx)(?:_id)?['\"]?\s*(?::\s*\w+\s*)?(?:==|=|:)\s*\d+\b")


def test_special_ids_are_not_hard_coded_in_seqcore() -> None:
    # the pattern does catch the forms a hard-coded id takes, so the check below can fail
    for bad in ("pad_id: int = 0", "x.eos == 3", '{"bos": 2}', "Embedding(9, 4, padding_idx=0)"):
        assert HARD_CODED.search(bad), bad
    offenders = [f"{path.relative_to(SEQCORE)}:{n}: {line.strip()}"
                 for path in sorted(SEQCORE.rglob("*.py")) if path.name != "config.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if HARD_CODED.search(line)]
    assert offenders == []
