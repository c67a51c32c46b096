"""Stage tokenizer: train SentencePiece on the train split, write the contract, encode splits,
measure coverage (UNK rates, length drops) and stop when it is too poor to train on."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.stage import signature, stage_main
from seqcore.artifacts.coverage import Coverage, SideVocab
from seqcore.artifacts.manifests import (
    EncodedManifest, PreparedManifest, SplitCounts, manifest_path)
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config
from seqcore.data.coverage import SplitCoverage, split_coverage
from seqcore.data.examples import encode_pairs, write_examples
from seqcore.data.records import count_rejects, read_prepared, write_rejects
from seqcore.data.splits import SPLITS
from seqcore.data.tokenizers import train_tokenizers
from seqcore.signature import tokenizer_signature
from seqcore.tasks import get_task
from seqcore.tokenizer import load_tokenizers


def run(cfg: Config) -> None:
    """Tokenizer models and contract, encoded splits and length rejects from prepared data."""
    seq = cfg.sequence
    prepared = Path(cfg.paths.prepared)
    manifest = PreparedManifest.load(manifest_path(prepared))
    raw = manifest.raw
    splits = {s: read_prepared(prepared, s, manifest.sha256[s]) for s in SPLITS}
    contract = train_tokenizers(cfg, splits["train"], raw)
    path = cfg.paths.tokenizer_contract
    written = TokenizerContract.load(path)  # read back, as every later stage
    signature(cfg, "tokenizer", tokenizer_signature(cfg, written), str(path), contract=written)
    toks = load_tokenizers(path, contract=written)

    encoded, rejects, counts = Path(cfg.paths.encoded), [], {}
    coverage: dict[str, SplitCoverage] = {}
    for split, pairs in splits.items():
        examples, rej = encode_pairs(pairs, toks.src, toks.tgt, seq.max_src_len,
                                     seq.max_tgt_len, seq.overlong, raw.label)
        write_examples(examples, encoded / f"{split}.jsonl")
        rejects += rej
        counts[split] = SplitCounts(len(pairs), len(examples),
                                    sum(not e.has_eos for e in examples), count_rejects(rej))
        coverage[split] = split_coverage(pairs, examples, rej, toks.src, toks.tgt)
    write_rejects(Path(cfg.paths.length_rejects), rejects)
    EncodedManifest(counts, count_rejects(rejects), cfg.paths.length_rejects, seq.max_src_len,
                    seq.max_tgt_len, seq.overlong).save(manifest_path(encoded))
    Coverage(coverage, {side: SideVocab(contract.side(side).model_type,
                                        contract.side(side).vocab_size)
                        for side in ("src", "tgt")}).save(cfg.paths.coverage)
    failed = {s: contract.round_trip[s].failed for s in ("src", "tgt")}
    rates = {s: {"src": f"{c.src.rate:.2%}", "tgt": f"{c.tgt.rate:.2%}"}
             for s, c in coverage.items()}
    print(f"[tokenizer] src={toks.src.signature()} tgt={toks.tgt.signature()} "
          f"round-trip failures={failed} unk={rates} {count_rejects(rejects)}", file=sys.stderr)
    # What coverage is too poor to train on is the task's call (lm trains on documents).
    problems = get_task(cfg.task).coverage_problems(cfg, coverage)
    if problems:
        sys.exit(f"[tokenizer] stopped: {' | '.join(problems)} (figures in {cfg.paths.coverage},"
                 f" over-long rows in {cfg.paths.length_rejects})")


if __name__ == "__main__":
    stage_main("tokenizer", __doc__, run)
