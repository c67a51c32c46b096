"""Encoded examples and the max-length policy applied to them (in token units)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from seqcore.artifacts.manifests import EncodedManifest, manifest_path
from seqcore.data.records import Pair, Reject
from seqcore.errors import UnreadableFile
from seqcore.jsonl import read_jsonl, write_jsonl
from seqcore.tokenizer import Tokenizer


@dataclass(frozen=True)
class Example:
    """One tokenized pair.

    Attributes:
        src: source ids, no BOS/EOS.
        tgt: target ids, no BOS/EOS.
        has_eos: False when the target was truncated: its labels then carry no EOS.
    """

    id: str
    group: str
    source: str
    target: str
    src: list[int]
    tgt: list[int]
    has_eos: bool


def encode_pairs(
    pairs: list[Pair], src_tok: Tokenizer, tgt_tok: Tokenizer, max_src: int, max_tgt: int,
    overlong: Literal["drop", "truncate"], file: str,
) -> tuple[list[Example], list[Reject]]:
    """Tokenize pairs and apply the length policy.

    ``max_src`` counts source tokens (the source has no BOS/EOS). ``max_tgt`` counts EOS, so a
    kept target has at most ``max_tgt - 1`` tokens plus EOS; a truncated one keeps ``max_tgt``
    tokens and no EOS (the model must not learn a fake end), so its labels still fit. A UNK
    counts once per character it stands for (``Tokenizer.limit_length``): the limit applies
    to the text as given, not to what is left of it after unknown stretches collapse.

    Args:
        file: the raw file the pairs were read from (``Pair.line`` is a line of it).

    Returns:
        The kept examples, and one Reject per dropped (``overlong-source``/``-target``) or
        truncated (``truncated-source``/``-target``, action altered) side.
    """
    out: list[Example] = []
    rejects: list[Reject] = []
    for p in pairs:
        src, tgt = src_tok.encode(p.source), tgt_tok.encode(p.target)
        long_src = src_tok.limit_length(p.source, src) > max_src
        long_tgt = tgt_tok.limit_length(p.target, tgt) + 1 > max_tgt
        row = f"{p.source}\t{p.target}"
        if overlong == "drop" and (long_src or long_tgt):
            reason = "overlong-source" if long_src else "overlong-target"
            rejects.append(Reject(file, p.line, reason, row))
            continue
        if long_src:
            src = src[:max_src]
            rejects.append(Reject(file, p.line, "truncated-source", row, "altered"))
        if long_tgt:
            tgt = tgt[:max_tgt]
            rejects.append(Reject(file, p.line, "truncated-target", row, "altered"))
        out.append(Example(p.id, p.group, p.source, p.target, src, tgt, has_eos=not long_tgt))
    return out, rejects


def write_examples(examples: list[Example], path: Path) -> None:
    """One JSON object per line, keys sorted: identical inputs give identical bytes."""
    write_jsonl(examples, path)


def read_encoded(folder: str | Path, split: str) -> list[Example]:
    """The examples of ``split`` in the tokenizer stage's ``folder`` (``paths.encoded``),
    checked against the count its manifest records.

    Raises:
        UnreadableFile: the file holds another number of examples (emptied, cut at a line
            end, or rows added): one line naming it and what to do (issue 54).
    """
    path = Path(folder) / f"{split}.jsonl"
    examples = read_examples(path)
    kept = EncodedManifest.load(manifest_path(folder)).counts[split].kept
    if len(examples) != kept:
        raise UnreadableFile(f"{path}: {len(examples)} examples, {manifest_path(folder)} "
                             f"records {kept}: the file changed after the tokenizer stage "
                             "wrote it; re-run it (dvc repro) or restore it (dvc checkout)")
    return examples


def read_examples(path: Path) -> list[Example]:
    """Examples written by :func:`write_examples`."""
    return read_jsonl(path, Example)
