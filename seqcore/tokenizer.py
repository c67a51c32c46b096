"""SentencePiece tokenizers bound to the sequence contract.

The tokenizer never normalises on its own (``identity`` rule): seqcore.text does it, once, the
same way at training and decoding time. Special ids are pinned by the caller and checked after
training.

Special pieces are spelled with a leading control character (U+001F). SentencePiece matches a
special piece's *string* inside input text (and its trainer deletes those strings from the
training text), so with the usual ``<s>``/``</s>``/``<pad>``/``<unk>`` names the text ``<s>``
would encode to a special id. The readers reject control characters, so no accepted text can
spell ours, and ``<s>`` in the data is three ordinary characters.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sentencepiece as spm

from seqcore.artifacts.tokenizer_contract import (
    SIDES, RoundTrip, SideContract, TokenizerContract)
from seqcore.contract import SpecialIds
from seqcore.errors import OneLineError
from seqcore.hashing import sha256_file
from seqcore.text import (
    BOS_PIECE, EOS_PIECE, PAD_PIECE, UNK_PIECE, Normalization, normalize, unencodable_reason)

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
    largest = max(ids.pad, ids.unk, ids.bos, ids.eos)
    if largest >= settings.vocab_size:
        raise TokenizerSettingsError(
            f"tokenizer: special id {largest} (tokenizer.pad_id/unk_id/bos_id/eos_id) must be < "
            f"the vocabulary size {settings.vocab_size} chosen for this side; lower the ids "
            "(0-3 as in params.yaml) or raise the vocabulary size")
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
        pad_piece=PAD_PIECE,
        unk_piece=UNK_PIECE,
        bos_piece=BOS_PIECE,
        eos_piece=EOS_PIECE,
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

    def __init__(self, model_file: Path, sha256: str | None = None) -> None:
        """``sha256``: the file's hash when the caller has just computed it."""
        self.path = Path(model_file)
        self.sha256 = sha256 or sha256_file(self.path)
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

    def limit_length(self, text: str, ids: list[int]) -> int:
        """The length that ``sequence.max_*_len`` limits: tokens, with each UNK counted once per
        character it stands for, so a long stretch of unknown text cannot collapse into one
        UNK and pass the limit (issue 13).

        Args:
            text: normalised text; ids: ``encode(text)``.
        """
        unk = self._sp.unk_id()
        if unk not in ids:
            return len(ids)
        pieces = self._sp.encode(text, return_type="proto").pieces
        return sum(max(1, len(p.surface.strip())) if p.id == unk else 1 for p in pieces)

    def unknown_spans(self, text: str) -> list[str]:
        """The stretches of normalised ``text`` that encode to UNK, in order (may repeat)."""
        unk = self._sp.unk_id()
        return [p.surface.strip() for p in self._sp.encode(text, return_type="proto").pieces
                if p.id == unk]

    def decode(self, ids: list[int]) -> str:
        """Text of token ids; special ids are dropped."""
        return self._sp.decode(list(ids))

    def piece(self, token_id: int) -> str:
        """The piece string of an id (special pieces start with U+001F)."""
        return self._sp.id_to_piece(token_id)

    def pieces(self) -> list[str]:
        """Every piece string, indexed by id."""
        return [self._sp.id_to_piece(i) for i in range(self.vocab_size)]

    def signature(self) -> str:
        """``type-vN-sha8``, e.g. ``char-v34-1a2b3c4d``."""
        model_type = self._sp_model_type()
        return f"{model_type}-v{self.vocab_size}-{self.sha256[:8]}"

    def _sp_model_type(self) -> str:
        from sentencepiece import sentencepiece_model_pb2 as pb  # noqa: PLC0415 (heavy, rare)

        proto = pb.ModelProto()
        proto.ParseFromString(self._sp.serialized_model_proto())
        return pb.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type).lower()


#: Distinct space-separated tokens up to which a spaced text is a symbol inventory (ARPAbet
#: has 39 phones, 69 with stress) and gets a word model; above it, subwords (bpe).
WORD_INVENTORY_MAX = 256
#: Cap on an auto-sized subword vocabulary.
SUBWORD_VOCAB_MAX = 8000


def choose_settings(
    texts: list[str], model_type: ModelType | Literal["auto"], vocab_size: int | Literal["auto"],
    character_coverage: float,
) -> tuple[TokenizerSettings, str]:
    """Resolve ``auto`` model type and vocabulary size from one side's training texts.

    Texts without spaces (words to spell) get a char model; space-separated symbols from a
    small inventory (phones) a word model; anything else bpe. A char or word vocabulary is the
    observed inventory plus the 4 special pieces (and the space piece for spaced char texts);
    a bpe/unigram one is a quarter of the distinct words, at least the characters plus 8, at
    most SUBWORD_VOCAB_MAX.

    Returns:
        The settings, and a note of what was chosen and why (empty when nothing was auto).
    """
    words = {w for t in texts for w in t.split()}
    chars = {ch for w in words for ch in w}
    spaced = any(len(t.split()) > 1 for t in texts)
    notes = []
    if model_type == "auto":
        model_type = ("char" if not spaced else "word" if len(words) <= WORD_INVENTORY_MAX
                      else "bpe")
        why = ("no row has a space" if not spaced else
               f"{len(words)} distinct space-separated symbols" if model_type == "word" else
               f"{len(words)} distinct words > {WORD_INVENTORY_MAX}")
        notes.append(f"model_type {model_type} ({why})")
    if vocab_size == "auto":
        vocab_size = (len(chars) + 4 + spaced if model_type == "char" else
                      len(words) + 4 if model_type == "word" else
                      min(SUBWORD_VOCAB_MAX, max(len(chars) + 8, len(words) // 4)))
        notes.append(f"vocab_size {vocab_size} ({len(chars)} characters, {len(words)} words)")
    return TokenizerSettings(model_type, vocab_size, character_coverage), "; ".join(notes)


def check_special_ids(tok: Tokenizer, expected: SpecialIds) -> None:
    """Raise if a trained model's special ids (or their pieces) differ from the pinned ones."""
    got = tok.special_ids()
    if got != expected:
        raise ValueError(f"{tok.path}: special ids {got} differ from params.yaml {expected}")
    pieces = [tok.piece(i) for i in (got.pad, got.unk, got.bos, got.eos)]
    if pieces != [PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE]:
        raise ValueError(f"{tok.path}: special pieces {pieces} are not the contract's")




class TokenizerSettingsError(OneLineError, ValueError):
    """Settings SentencePiece would refuse with an internal error (the message says which)."""


class TokenizerMismatch(OneLineError, ValueError):
    """A tokenizer model file does not match the contract (or the checkpoint) that names it,
    or is missing (one line naming the file)."""


@dataclass(frozen=True)
class TextContract:
    """The normalisation applied to raw text before it is tokenized (train and decode alike)."""

    form: Normalization
    casefold: bool

    def apply(self, text: str) -> str:
        """Normalise raw text; raise ValueError if it cannot be tokenized faithfully.

        The check runs before normalising too: ``str.split`` counts some control characters
        (U+001C..U+001F) as whitespace, so normalising alone would silently erase them.
        """
        out = normalize(text, self.form, self.casefold)
        problem = unencodable_reason(text) or unencodable_reason(out)
        if problem:
            raise ValueError(f"text {text!r} cannot be tokenized: {problem}")
        return out


@dataclass(frozen=True)
class Tokenizers:
    """Source and target tokenizers loaded through ``tokenizer/contract.json``."""

    src: Tokenizer
    tgt: Tokenizer
    ids: SpecialIds
    text: TextContract
    contract: TokenizerContract


def side_contract(
    tok: Tokenizer, settings: TokenizerSettings, file: str, chosen: str = ""
) -> SideContract:
    """One side's contract entry: settings, actual vocabulary size and the model file's sha256,
    plus ``auto_chosen`` (what auto resolved to, and why) when a setting was auto."""
    return SideContract(file, tok.sha256, settings.model_type, tok.vocab_size,
                        settings.vocab_size, settings.character_coverage, chosen)


def load_tokenizers(
    contract_path: Path, expected_sha256: dict[str, str | None] | None = None,
    contract: TokenizerContract | None = None,
) -> Tokenizers:
    """Load both tokenizers named by a contract, refusing any model file that does not match.

    Args:
        contract_path: ``tokenizer/contract.json``; model files are resolved next to it.
        expected_sha256: ``{"src": ..., "tgt": ...}`` as recorded by a checkpoint, if any.
        contract: the contract the caller already read from ``contract_path`` (else read here).

    Raises:
        TokenizerMismatch: naming both hashes, when a model file's sha256 differs from the
            contract's, or the contract's from the checkpoint's; or the special ids differ.
    """
    contract_path = Path(contract_path)
    contract = contract or TokenizerContract.load(contract_path)
    ids = contract.special_ids
    toks = {}
    for side in SIDES:
        entry = contract.side(side)
        path = contract_path.parent / entry.file
        if not path.is_file():
            raise TokenizerMismatch(f"{side} tokenizer {path}: missing (named by "
                                    f"{contract_path}); re-run the tokenizer stage")
        got = sha256_file(path)  # before parsing: a corrupt file is named, not parsed
        if got != entry.sha256:
            raise TokenizerMismatch(
                f"{side} tokenizer {path}: model file sha256 {got} does not match "
                f"{contract_path} sha256 {entry.sha256}; re-run the tokenizer stage")
        tok = Tokenizer(path, got)
        if expected_sha256 is not None and expected_sha256[side] != entry.sha256:
            raise TokenizerMismatch(
                f"{side} tokenizer: {contract_path} sha256 {entry.sha256} differs from the "
                f"checkpoint's {expected_sha256[side]}; the model was trained with another "
                "tokenizer: retrain, or restore that tokenizer")
        try:
            check_special_ids(tok, ids)
        except ValueError as err:
            raise TokenizerMismatch(str(err)) from err
        toks[side] = tok
    norm = contract.normalization
    return Tokenizers(toks["src"], toks["tgt"], ids, TextContract(norm.form, norm.casefold),
                      contract)


def round_trip(
    tok: Tokenizer, texts: list[str], where: list[str], max_examples: int = 20
) -> RoundTrip:
    """Check decode(encode(x)) == x for normalised texts.

    Args:
        texts: normalised texts; where: their origin (``file:line``), same length.

    A failure's reason is ``unknown-pieces`` (some words hit UNK: not in the vocabulary or
    below the character coverage; the words are listed) or ``other``.
    """
    unk = tok.special_ids().unk
    reasons: Counter[str] = Counter()
    examples: list[dict[str, str]] = []
    for text, origin in zip(texts, where, strict=True):
        ids = tok.encode(text)
        decoded = tok.decode(ids)
        if decoded == text:
            continue
        culprits = [w for w in text.split() if unk in tok.encode(w)] if unk in ids else []
        reason = "unknown-pieces" if culprits else "other"
        reasons[reason] += 1
        if len(examples) < max_examples:
            examples.append({"where": origin, "text": text, "decoded": decoded, "reason": reason,
                             "culprits": " ".join(culprits)})
    return RoundTrip(len(texts), sum(reasons.values()), dict(sorted(reasons.items())), examples)
