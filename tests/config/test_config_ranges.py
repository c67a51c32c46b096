"""Parameter ranges (seqcore/config_ranges.py): every ranged key, both ends."""

from __future__ import annotations

import math

import pytest

from seqcore.config import ConfigError, config_from_dict
from seqcore.config_ranges import RANGES
from tests.pipeline_helpers import nested

INF = math.inf
#: Intervals as (type, low, low included, high, high included).
INT0, INT1 = (int, 0, True, INF, False), (int, 1, True, INF, False)  # [0, inf), [1, inf)
FRAC, UNIT = (float, 0, True, 1, False), (float, 0, True, 1, True)  # [0, 1), [0, 1]
UNIT0 = (float, 0, False, 1, True)  # (0, 1]
POS, NONNEG = (float, 0, False, INF, False), (float, 0, True, INF, False)  # (0, inf), [0, inf)

#: key: its range, written from docs/configuration.md, not read from seqcore.config_ranges.
#: A list parameter's range holds for each element.
RANGE_TABLE: dict[str, tuple[type, float, bool, float, bool]] = {
    "data.split_seed": INT0, "data.dev_fraction": FRAC, "data.test_fraction": FRAC,
    "data.max_pairs": INT0, "data.min_split_rows": INT0, "data.max_target_share": UNIT0,
    "data.max_copy_share": UNIT, "data.max_reject_rate": UNIT,
    "tokenizer.src_vocab_size": (int, 5, True, INF, False),
    "tokenizer.tgt_vocab_size": (int, 5, True, INF, False), "tokenizer.max_unk_rate": UNIT,
    "tokenizer.character_coverage": UNIT0, "tokenizer.pad_id": INT0, "tokenizer.unk_id": INT0,
    "tokenizer.bos_id": INT0, "tokenizer.eos_id": INT0,
    "sequence.max_src_len": INT1, "sequence.max_tgt_len": INT1, "sequence.label_smoothing": FRAC,
    "sequence.max_drop_rate": UNIT,
    "model.transformer.d_model": INT1, "model.transformer.n_heads": INT1,
    "model.transformer.enc_layers": INT1, "model.transformer.dec_layers": INT1,
    "model.transformer.d_ff": INT1, "model.transformer.dropout": FRAC,
    "model.rnn.embed_dim": INT1, "model.rnn.hidden": INT1, "model.rnn.enc_layers": INT1,
    "model.rnn.dec_layers": INT1, "model.rnn.dropout": FRAC,
    "train.seed": INT0, "train.batch_size": INT1, "train.bucket_width": INT1,
    "train.accum_steps": INT1, "train.max_steps": INT1, "train.lr": POS, "train.warmup_steps": INT0,
    "train.betas": FRAC, "train.eps": POS, "train.weight_decay": NONNEG, "train.clip_norm": NONNEG,
    "train.max_consecutive_skips": INT1, "train.eval_every": INT1, "train.checkpoint_every": INT1,
    "train.ledger_every": INT0, "train.keep_last": INT1, "train.log_every": INT1,
    "train.threads": INT1, "train.nproc": INT1, "train.ss_k": POS, "train.ss_cap": UNIT,
    "train.bptt_len": INT1, "train.dev_decode_words": INT0, "train.dev_decode_beam": INT1,
    "train.dev_decode_show": INT0, "train.mrt_steps": INT0,
    "train.mrt_candidates": (int, 2, True, INF, False), "train.mrt_alpha": POS, "train.mrt_lr": POS,
    "decode.beam_size": INT1, "decode.n_best": INT1, "decode.alpha": NONNEG, "decode.min_len": INT0,
    "decode.max_len": INT1, "decode.max_len_ratio": NONNEG, "decode.no_repeat_ngram": INT0,
    "decode.temperature": POS, "decode.top_k": INT0, "decode.top_p": UNIT0, "decode.seed": INT0,
    "decode.batch_size": INT1, "decode.banned_tokens": INT0, "decode.rescore_weight": UNIT,
    "evaluate.bucket_edges": INT1, "evaluate.repeat_ngram": INT1,
    "evaluate.repeat_times": (int, 2, True, INF, False), "evaluate.examples_per_failure": INT0,
    "evaluate.prediction_sample": INT0, "evaluate.bootstrap_samples": (int, 0, True, 10**6, True),
    "evaluate.bootstrap_seed": INT0, "evaluate.confidence": (float, 0, False, 1, False),
    "baseline.order": (int, 1, True, 20, True), "baseline.seq1_max": (int, 1, True, 8, True),
    "baseline.seq2_max": (int, 1, True, 8, True), "baseline.nbest": (int, 1, True, 100, True),
}


#: Lists: where the probed value goes (the last element, so every element is checked).
LIST_VALUE = {"train.betas": lambda v: [0.9, v], "decode.banned_tokens": lambda v: [v],
              "evaluate.bucket_edges": lambda v: [v]}
#: Other values a probe needs so that no cross-field rule speaks first (by hand: ids stay
#: distinct, d_model divisible by n_heads, dev + test fractions < 1).
CONTEXT = {"tokenizer.unk_id": {"tokenizer.pad_id": 1}, "tokenizer.bos_id": {"tokenizer.pad_id": 2},
           "tokenizer.eos_id": {"tokenizer.pad_id": 3},
           "model.transformer.d_model": {"model.transformer.n_heads": 1},
           "data.dev_fraction": {"data.test_fraction": 0.0},
           "data.test_fraction": {"data.dev_fraction": 0.0}}
EPS = 1e-6  # a float probe's distance from a bound; an int probe's is 1


def probes(key: str) -> list[tuple[float, bool]]:
    """(value, accepted) just inside and just outside each finite end of the key's range."""
    kind, low, low_in, high, high_in = RANGE_TABLE[key]
    step = 1 if kind is int else EPS
    out = [(low, low_in), (low - step, False) if low_in else (low + step, True)]
    if high != INF:
        out += [(high, high_in), (high + step, False) if high_in else (high - step, True)]
    return [(kind(v), ok) for v, ok in out]


def test_range_table_names_every_ranged_parameter() -> None:
    assert set(RANGE_TABLE) == set(RANGES)  # a new range needs a row here, and a dropped one shows


@pytest.mark.parametrize("key", sorted(RANGE_TABLE))
def test_each_range_accepts_just_inside_and_refuses_just_outside_both_ends(key: str) -> None:
    for value, accepted in probes(key):
        raw = {**CONTEXT.get(key, {}), key: LIST_VALUE.get(key, lambda v: v)(value)}
        if accepted:
            config_from_dict(nested(raw))  # no error
        else:
            with pytest.raises(ConfigError) as err:
                config_from_dict(nested(raw))
            assert str(err.value).startswith(f"params: {key}"), (value, str(err.value))
