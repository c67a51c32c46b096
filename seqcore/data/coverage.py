"""How well the tokenizers cover the data: UNK rates per side and split, length drops per split.

The tokenizer stage writes these figures and stops when one exceeds its ceiling
(``tokenizer.max_unk_rate``, ``sequence.max_drop_rate``): a model trained on mostly-UNK
targets or on a fraction of the rows is useless, and its metrics would not say so (issue 13).
The figures are the plain data of :mod:`seqcore.artifacts.coverage` (the file's one reader and
writer); this module computes them.
"""

from __future__ import annotations

from seqcore.artifacts.coverage import SplitCoverage, UnkStats
from seqcore.data.examples import Example
from seqcore.data.records import Pair, Reject
from seqcore.tokenizer import Tokenizer


def unk_stats(tok: Tokenizer, texts: list[str]) -> UnkStats:
    """UNK statistics of normalised texts under a tokenizer."""
    unk = tok.special_ids().unk
    encoded = [tok.encode(t) for t in texts]
    return UnkStats(len(texts), sum(unk in ids for ids in encoded),
                    sum(len(ids) for ids in encoded), sum(ids.count(unk) for ids in encoded))


def split_coverage(pairs: list[Pair], examples: list[Example], rejects: list[Reject],
                   src: Tokenizer, tgt: Tokenizer) -> SplitCoverage:
    """Coverage of one split from its pairs, the kept examples and the length rejects."""
    dropped = sum(r.action == "dropped" for r in rejects)
    return SplitCoverage(unk_stats(src, [p.source for p in pairs]),
                         unk_stats(tgt, [p.target for p in pairs]), len(pairs), len(examples),
                         dropped)


def coverage_problems(coverage: dict[str, SplitCoverage], max_unk_rate: float,
                      max_drop_rate: float, min_rows: int) -> list[str]:
    """One sentence per side or split over a ceiling, naming the figures and what to change."""
    out = []
    for side in ("src", "tgt"):
        stats = {split: c.src if side == "src" else c.tgt for split, c in coverage.items()}
        over = [f"{split} {st.rate:.1%} ({st.unk_tokens}/{st.tokens} tokens, "
                f"{st.rows_with_unk}/{st.rows} rows)"
                for split, st in stats.items() if st.rate > max_unk_rate]
        if not over:
            continue
        fix = (f"set tokenizer.{side}_model_type and tokenizer.{side}_vocab_size to suit this "
               "side (auto chooses from the data) or raise tokenizer.character_coverage"
               if stats["train"].rate > max_unk_rate else
               "dev/test hold symbols never seen in train: add rows, use a subword model "
               f"(tokenizer.{side}_model_type: char or bpe) or raise tokenizer.max_unk_rate")
        out.append(f"{side} UNK rate {', '.join(over)} > tokenizer.max_unk_rate "
                   f"{max_unk_rate}; {fix}")
    for split, c in coverage.items():
        if c.drop_rate > max_drop_rate:
            out.append(f"{split}: {c.dropped_for_length} of {c.read} rows "
                       f"({c.drop_rate:.1%}) dropped as over-long > sequence.max_drop_rate "
                       f"{max_drop_rate}; raise sequence.max_src_len / max_tgt_len, or set "
                       "sequence.overlong: truncate")
        elif split != "train" and c.kept < min_rows:
            out.append(f"{split}: {c.kept} rows left after the length limits < "
                       f"data.min_split_rows {min_rows}; raise sequence.max_src_len / "
                       "max_tgt_len")
    return out
