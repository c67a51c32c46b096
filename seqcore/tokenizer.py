"""SentencePiece tokenizers bound to the sequence contract.

The tokenizer never normalises on its own (``identity`` rule): seqcore.text does it, once, the
same way at training and decoding time. Special ids are pinned by the caller and checked after
training. Text that spells a special token (``<s>``, ``</s>``, ``<pad>``, ``<unk>``) is ordinary
text: SentencePiece never matches control symbols inside input text.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sentencepiece as spm

from seqcore.contract import SpecialIds
from seqcore.hashing import sha256_file

ModelType = Literal["char", "bpe", "unigram", "word"]


@dataclass(frozen=True)
class TokenizerSettings:
    """What a SentencePiece model is trained with."""

    model_type: ModelType
    vocab_size: int
    character_coverage: float


def train_sentencepiece(
    sentences: Iterable[str], settings: TokenizerSettings, ids: SpecialIds, out: Path
) -> Path:
    """Train a SentencePiece model deterministically and write ``out`` (.model).

    Returns:
        The model file path.
    """
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(list(sentences)),
        model_writer=model,
        model_type=settings.model_type,
        vocab_size=settings.vocab_size,
        hard_vocab_limit=False,  # vocab_size is a cap: char/word vocabularies are what they are
        character_coverage=settings.character_coverage,
        normalization_rule_name="identity",
        add_dummy_prefix=settings.model_type != "char",
        split_digits=False,
        pad_id=ids.pad,
        unk_id=ids.unk,
        bos_id=ids.bos,
        eos_id=ids.eos,
        pad_piece="<pad>",
        unk_piece="<unk>",
        bos_piece="<s>",
        eos_piece="</s>",
        num_threads=1,  # deterministic
        minloglevel=2,
        input_sentence_size=0,
        shuffle_input_sentence=False,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(model.getvalue())
    return out


class Tokenizer:
    """A trained SentencePiece model with encode/decode and a signature."""

    def __init__(self, model_file: Path) -> None:
        self.path = Path(model_file)
        self.sha256 = sha256_file(self.path)
        self._sp = spm.SentencePieceProcessor(model_file=str(self.path))

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def special_ids(self) -> SpecialIds:
        """The special ids stored in the model file."""
        return SpecialIds(
            pad=self._sp.pad_id(), unk=self._sp.unk_id(), bos=self._sp.bos_id(),
            eos=self._sp.eos_id(),
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of already-normalised text, without BOS/EOS."""
        return list(self._sp.encode(text))

    def decode(self, ids: list[int]) -> str:
        """Text of token ids; special ids are dropped."""
        return self._sp.decode(list(ids))

    def piece(self, token_id: int) -> str:
        return self._sp.id_to_piece(token_id)

    def signature(self) -> str:
        """``type-vN-sha8``, e.g. ``char-v34-1a2b3c4d``."""
        model_type = self._sp_model_type()
        return f"{model_type}-v{self.vocab_size}-{self.sha256[:8]}"

    def _sp_model_type(self) -> str:
        from sentencepiece import sentencepiece_model_pb2 as pb  # noqa: PLC0415 (heavy, rare)

        proto = pb.ModelProto()
        proto.ParseFromString(self._sp.serialized_model_proto())
        return pb.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type).lower()


def check_special_ids(tok: Tokenizer, expected: SpecialIds) -> None:
    """Raise if a trained model's special ids differ from the pinned ones."""
    got = tok.special_ids()
    if got != expected:
        raise ValueError(f"{tok.path}: special ids {got} differ from params.yaml {expected}")
