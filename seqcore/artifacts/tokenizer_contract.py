"""``tokenizer/contract.json``: what the tokenizer stage promises every later stage.

The special ids and pieces, the text normalisation, the data version, each side's model file
(name, sha256, type, vocabulary) with its round-trip check, and the contract signature.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from seqcore.artifacts.base import check_version, fields_error, read_json, write_json
from seqcore.contract import SpecialIds
from seqcore.text import Normalization

SIDES = ("src", "tgt")


@dataclass(frozen=True)
class RoundTrip:
    """Rows whose decode(encode(x)) differs from x, with why (a reason and the culprits)."""

    rows: int
    failed: int
    by_reason: dict[str, int]
    examples: list[dict[str, str]]


@dataclass(frozen=True)
class SideContract:
    """One side's tokenizer: its model file (next to the contract), settings and vocabulary.

    ``auto_chosen`` says what an ``auto`` setting resolved to and why ("" when none was auto;
    then the field is not written).
    """

    file: str
    sha256: str
    model_type: str
    vocab_size: int
    requested_vocab_size: int
    character_coverage: float
    auto_chosen: str = ""

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.auto_chosen:
            del out["auto_chosen"]
        return out


@dataclass(frozen=True)
class TextNormalization:
    """Normalisation applied to raw text before tokenizing (``casefold_target`` is written
    only when set, so a default contract keeps its bytes)."""

    form: Normalization
    casefold: bool
    casefold_target: bool = False

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"form": self.form, "casefold": self.casefold}
        return out | ({"casefold_target": True} if self.casefold_target else {})


@dataclass(frozen=True)
class TokenizerContract:
    """The parsed ``tokenizer/contract.json`` (its ``format`` field is the schema version)."""

    SCHEMA_VERSION: ClassVar[int] = 2

    special_ids: SpecialIds
    special_pieces: tuple[str, ...]
    normalization: TextNormalization
    data_sha256: str
    src: SideContract
    tgt: SideContract
    round_trip: dict[str, RoundTrip]
    #: The contract signature (seqcore.signature); "" only while the contract is being built.
    signature: str = ""

    def side(self, name: str) -> SideContract:
        """``src`` or ``tgt``."""
        return {"src": self.src, "tgt": self.tgt}[name]

    def sha256(self) -> dict[str, str]:
        """Each side's model-file sha256, by side."""
        return {s: self.side(s).sha256 for s in SIDES}

    def with_signature(self, signature: str) -> TokenizerContract:
        return replace(self, signature=signature)

    def as_json(self) -> dict[str, Any]:
        """The file's content as plain data (also what MLflow logs as contract params)."""
        return {"format": self.SCHEMA_VERSION, "special_ids": asdict(self.special_ids),
                "special_pieces": list(self.special_pieces),
                "normalization": self.normalization.as_json(), "data_sha256": self.data_sha256,
                "round_trip": {s: asdict(r) for s, r in self.round_trip.items()},
                "src": self.src.as_json(), "tgt": self.tgt.as_json(), "signature": self.signature}

    def save(self, path: str | Path) -> None:
        write_json(path, self.as_json())

    @classmethod
    def load(cls, path: str | Path) -> TokenizerContract:
        """Read and check a contract file (ArtifactError naming it when unreadable)."""
        data = read_json(path)
        check_version(path, "tokenizer contract", data.get("format"), cls.SCHEMA_VERSION)
        try:
            return cls(SpecialIds(**data["special_ids"]), tuple(data["special_pieces"]),
                       TextNormalization(**data["normalization"]), data["data_sha256"],
                       SideContract(**data["src"]), SideContract(**data["tgt"]),
                       {s: RoundTrip(**r) for s, r in data["round_trip"].items()},
                       data["signature"])
        except (KeyError, TypeError) as err:
            raise fields_error(path, "tokenizer contract", err) from None
