"""The valid range of every numeric parameter of params.yaml (seqcore.config checks them).

Kept as one declarative table so a new parameter is one line here; a test fails when a
numeric config field has no entry (tests/config/test_config.py). See docs/configuration.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

#: The valid range of every numeric parameter (dotted key), as an interval; "inf" is
#: unbounded. A list parameter's range applies to each element. Checked on load before the
#: cross-field rules; tests/config/test_config.py keeps the table complete
#: (docs/configuration.md explains the rules).
RANGES: dict[str, str] = {
    "data.split_seed": "[0, inf)",
    "data.dev_fraction": "[0, 1)",
    "data.test_fraction": "[0, 1)",
    "data.max_pairs": "[0, inf)",  # 0 = all
    "data.min_split_rows": "[0, inf)",
    "data.max_target_share": "(0, 1]",
    "data.max_reject_rate": "[0, 1]",
    "data.max_copy_share": "[0, 1]",
    "tokenizer.src_vocab_size": "[5, inf)",  # or auto; 4 special ids and one piece
    "tokenizer.tgt_vocab_size": "[5, inf)",  # or auto
    "tokenizer.max_unk_rate": "[0, 1]",
    "tokenizer.character_coverage": "(0, 1]",
    "tokenizer.pad_id": "[0, inf)",
    "tokenizer.unk_id": "[0, inf)",
    "tokenizer.bos_id": "[0, inf)",
    "tokenizer.eos_id": "[0, inf)",
    "sequence.max_src_len": "[1, inf)",
    "sequence.max_tgt_len": "[1, inf)",
    "sequence.label_smoothing": "[0, 1)",
    "sequence.max_drop_rate": "[0, 1]",
    "model.transformer.d_model": "[1, inf)",
    "model.transformer.n_heads": "[1, inf)",
    "model.transformer.enc_layers": "[1, inf)",
    "model.transformer.dec_layers": "[1, inf)",
    "model.transformer.d_ff": "[1, inf)",
    "model.transformer.dropout": "[0, 1)",
    "model.rnn.embed_dim": "[1, inf)",
    "model.rnn.hidden": "[1, inf)",
    "model.rnn.enc_layers": "[1, inf)",
    "model.rnn.dec_layers": "[1, inf)",
    "model.rnn.dropout": "[0, 1)",
    "train.seed": "[0, inf)",
    "train.batch_size": "[1, inf)",
    "train.bucket_width": "[1, inf)",
    "train.accum_steps": "[1, inf)",
    "train.max_steps": "[1, inf)",
    "train.lr": "(0, inf)",
    "train.warmup_steps": "[0, inf)",
    "train.betas": "[0, 1)",
    "train.eps": "(0, inf)",
    "train.weight_decay": "[0, inf)",
    "train.clip_norm": "[0, inf)",  # 0 = no clipping
    "train.max_consecutive_skips": "[1, inf)",
    "train.eval_every": "[1, inf)",
    "train.checkpoint_every": "[1, inf)",
    "train.ledger_every": "[0, inf)",
    "train.keep_last": "[1, inf)",
    "train.log_every": "[1, inf)",
    "train.threads": "[1, inf)",
    "train.nproc": "[1, inf)",
    "train.ss_k": "(0, inf)",
    "train.ss_cap": "[0, 1]",
    "train.bptt_len": "[1, inf)",
    "train.dev_decode_words": "[0, inf)",  # 0 = off
    "train.dev_decode_beam": "[1, inf)",  # 1 = greedy
    "train.dev_decode_show": "[0, inf)",
    "train.mrt_steps": "[0, inf)",  # 0 = off
    "train.mrt_candidates": "[2, inf)",  # one candidate has Q = 1: no gradient
    "train.mrt_alpha": "(0, inf)",
    "train.mrt_lr": "(0, inf)",
    "decode.beam_size": "[1, inf)",
    "decode.n_best": "[1, inf)",
    "decode.alpha": "[0, inf)",
    "decode.min_len": "[0, inf)",
    "decode.max_len": "[1, inf)",
    "decode.max_len_ratio": "[0, inf)",  # 0 = no source-relative cap
    "decode.no_repeat_ngram": "[0, inf)",  # 0 = off
    "decode.temperature": "(0, inf)",
    "decode.top_k": "[0, inf)",  # 0 = off
    "decode.top_p": "(0, 1]",
    "decode.seed": "[0, inf)",
    "decode.batch_size": "[1, inf)",
    "decode.banned_tokens": "[0, inf)",
    "decode.rescore_weight": "[0, 1]",
    "evaluate.bucket_edges": "[1, inf)",
    "evaluate.repeat_ngram": "[1, inf)",
    "evaluate.repeat_times": "[2, inf)",
    "evaluate.examples_per_failure": "[0, inf)",
    "evaluate.prediction_sample": "[0, inf)",
    "evaluate.bootstrap_samples": "[0, 1000000]",
    "evaluate.bootstrap_seed": "[0, inf)",
    "evaluate.confidence": "(0, 1)",
    "baseline.order": "[1, 20]",  # estimate-ngram's range in practice; 8 is the recipe
    "baseline.seq1_max": "[1, 8]",
    "baseline.seq2_max": "[1, 8]",
    "baseline.nbest": "[1, 100]",
}

_INTERVAL = re.compile(r"^([\[(])(-?[\d.e+-]+|-inf), *(-?[\d.e+-]+|inf)([\])])$")


def in_range(value: float, interval: str) -> str | None:
    """None if ``value`` lies in ``interval`` (e.g. "[0, 1)"), else what it must be."""
    m = _INTERVAL.match(interval)
    if m is None:
        raise ValueError(f"bad interval {interval!r}")
    if not math.isfinite(value):  # YAML's .nan / .inf
        return "must be a finite number"
    lo_open, lo, hi, hi_closed = m[1] == "(", float(m[2]), float(m[3]), m[4] == "]"
    ok = (value > lo if lo_open else value >= lo) and (value <= hi if hi_closed else value < hi)
    if ok:
        return None
    if hi == math.inf:
        return f"must be {'>' if lo_open else '>='} {m[2]}"
    return f"must be in {interval}"


class Problem(NamedTuple):
    """A params.yaml rule broken: the key, its value and what is allowed (the loader's line
    is ``key = value: allowed``), or a whole ``line`` when one key cannot say it."""

    key: str
    value: Any
    allowed: str
    line: str = ""


def range_problems(values: dict[str, Any]) -> Iterator[Problem]:
    """Every numeric parameter outside its RANGES interval (list parameters element-wise;
    ``values``: the flattened params)."""
    for key, interval in RANGES.items():
        value = values[key]
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                continue  # a non-number (e.g. "auto") is the type checker's business
            problem = in_range(item, interval)
            if problem:
                yield Problem(key + (f"[{i}]" if isinstance(value, list) else ""), item, problem)
