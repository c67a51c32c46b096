"""Parameter ranges (seqcore/config_ranges.py): every ranged key, both ends."""

from __future__ import annotations

import math

import pytest

from seqcore.config import ConfigError, config_from_dict
from seqcore.config_ranges import RANGES
from tests.pipeline_helpers import nested


# -- known answers at the call sites (rule 16); was tests/test_known_answers.py -------------------

# -- 5. every numeric parameter's range, at both ends ---------------------------------------
INF = math.inf


#: key: (type, low, low included, high, high included), written from docs/configuration.md,
#: not read from seqcore.config_ranges. A list parameter's range holds for each element.
RANGE_TABLE: dict[str, tuple[type, float, bool, float, bool]] = {
    "data.split_seed": (int, 0, True, INF, False),
    "data.dev_fraction": (float, 0, True, 1, False),
    "data.test_fraction": (float, 0, True, 1, False),
    "data.max_pairs": (int, 0, True, INF, False),
    "data.min_split_rows": (int, 0, True, INF, False),
    "data.max_target_share": (float, 0, False, 1, True),
    "data.max_copy_share": (float, 0, True, 1, True),
    "data.max_reject_rate": (float, 0, True, 1, True),
    "tokenizer.src_vocab_size": (int, 5, True, INF, False),
    "tokenizer.tgt_vocab_size": (int, 5, True, INF, False),
    "tokenizer.max_unk_rate": (float, 0, True, 1, True),
    "tokenizer.character_coverage": (float, 0, False, 1, True),
    "tokenizer.pad_id": (int, 0, True, INF, False),
    "tokenizer.unk_id": (int, 0, True, INF, False),
    "tokenizer.bos_id": (int, 0, True, INF, False),
    "tokenizer.eos_id": (int, 0, True, INF, False),
    "sequence.max_src_len": (int, 1, True, INF, False),
    "sequence.max_tgt_len": (int, 1, True, INF, False),
    "sequence.label_smoothing": (float, 0, True, 1, False),
    "sequence.max_drop_rate": (float, 0, True, 1, True),
    "model.transformer.d_model": (int, 1, True, INF, False),
    "model.transformer.n_heads": (int, 1, True, INF, False),
    "model.transformer.enc_layers": (int, 1, True, INF, False),
    "model.transformer.dec_layers": (int, 1, True, INF, False),
    "model.transformer.d_ff": (int, 1, True, INF, False),
    "model.transformer.dropout": (float, 0, True, 1, False),
    "model.rnn.embed_dim": (int, 1, True, INF, False),
    "model.rnn.hidden": (int, 1, True, INF, False),
    "model.rnn.enc_layers": (int, 1, True, INF, False),
    "model.rnn.dec_layers": (int, 1, True, INF, False),
    "model.rnn.dropout": (float, 0, True, 1, False),
    "train.seed": (int, 0, True, INF, False),
    "train.batch_size": (int, 1, True, INF, False),
    "train.bucket_width": (int, 1, True, INF, False),
    "train.accum_steps": (int, 1, True, INF, False),
    "train.max_steps": (int, 1, True, INF, False),
    "train.lr": (float, 0, False, INF, False),
    "train.warmup_steps": (int, 0, True, INF, False),
    "train.betas": (float, 0, True, 1, False),
    "train.eps": (float, 0, False, INF, False),
    "train.weight_decay": (float, 0, True, INF, False),
    "train.clip_norm": (float, 0, True, INF, False),
    "train.max_consecutive_skips": (int, 1, True, INF, False),
    "train.eval_every": (int, 1, True, INF, False),
    "train.checkpoint_every": (int, 1, True, INF, False),
    "train.ledger_every": (int, 0, True, INF, False),
    "train.keep_last": (int, 1, True, INF, False),
    "train.log_every": (int, 1, True, INF, False),
    "train.threads": (int, 1, True, INF, False),
    "train.nproc": (int, 1, True, INF, False),
    "train.ss_k": (float, 0, False, INF, False),
    "train.ss_cap": (float, 0, True, 1, True),
    "train.bptt_len": (int, 1, True, INF, False),
    "train.dev_decode_words": (int, 0, True, INF, False),
    "train.dev_decode_beam": (int, 1, True, INF, False),
    "train.dev_decode_show": (int, 0, True, INF, False),
    "train.mrt_steps": (int, 0, True, INF, False),
    "train.mrt_candidates": (int, 2, True, INF, False),
    "train.mrt_alpha": (float, 0, False, INF, False),
    "train.mrt_lr": (float, 0, False, INF, False),
    "decode.beam_size": (int, 1, True, INF, False),
    "decode.n_best": (int, 1, True, INF, False),
    "decode.alpha": (float, 0, True, INF, False),
    "decode.min_len": (int, 0, True, INF, False),
    "decode.max_len": (int, 1, True, INF, False),
    "decode.max_len_ratio": (float, 0, True, INF, False),
    "decode.no_repeat_ngram": (int, 0, True, INF, False),
    "decode.temperature": (float, 0, False, INF, False),
    "decode.top_k": (int, 0, True, INF, False),
    "decode.top_p": (float, 0, False, 1, True),
    "decode.seed": (int, 0, True, INF, False),
    "decode.batch_size": (int, 1, True, INF, False),
    "decode.banned_tokens": (int, 0, True, INF, False),
    "evaluate.bucket_edges": (int, 1, True, INF, False),
    "evaluate.repeat_ngram": (int, 1, True, INF, False),
    "evaluate.repeat_times": (int, 2, True, INF, False),
    "evaluate.examples_per_failure": (int, 0, True, INF, False),
    "evaluate.prediction_sample": (int, 0, True, INF, False),
    "evaluate.bootstrap_samples": (int, 0, True, 1000000, True),
    "evaluate.bootstrap_seed": (int, 0, True, INF, False),
    "evaluate.confidence": (float, 0, False, 1, False),
    "baseline.order": (int, 1, True, 20, True),
    "baseline.seq1_max": (int, 1, True, 8, True),
    "baseline.seq2_max": (int, 1, True, 8, True),
    "baseline.nbest": (int, 1, True, 100, True),
    "decode.rescore_weight": (float, 0, True, 1, True),
}


#: Lists: where the probed value goes (the last element, so every element is checked).
LIST_VALUE = {"train.betas": lambda v: [0.9, v], "decode.banned_tokens": lambda v: [v],
              "evaluate.bucket_edges": lambda v: [v]}


#: Other values a probe needs so that no cross-field rule speaks first (by hand: ids stay
#: distinct, d_model divisible by n_heads, dev + test fractions < 1).
CONTEXT = {"tokenizer.unk_id": {"tokenizer.pad_id": 1},
           "tokenizer.bos_id": {"tokenizer.pad_id": 2},
           "tokenizer.eos_id": {"tokenizer.pad_id": 3},
           "model.transformer.d_model": {"model.transformer.n_heads": 1},
           "data.dev_fraction": {"data.test_fraction": 0.0},
           "data.test_fraction": {"data.dev_fraction": 0.0}}


#: A float probe's distance from a bound; an int probe's is 1.
EPS = 1e-6


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
