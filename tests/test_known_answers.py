"""Known answers at the call sites that turn a parameter into behaviour (rule 16).

A relation test ("resumed equals uninterrupted", "beam of one equals greedy") cannot see a
bug made the same way on both sides. Each test here pins the value itself, worked out by hand
(or by a formula written out below) and never copied from a run: the learning rate the
optimiser used at step t, the decoder inputs scheduled sampling fed, the failure flags of
hand-made predictions, each guard exactly at, just below and just above its threshold, and
every numeric parameter's range at both ends.
"""

from __future__ import annotations

import hashlib
import math
import typing
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import pipeline.prepare
from seqcore.artifacts.coverage import SplitCoverage, UnkStats
from seqcore.artifacts.predictions import PredictionRow, Predictions
from seqcore.config import (
    Config, ConfigError, DecodeConfig, SequenceConfig, TrainConfig, config_from_dict)
from seqcore.config_ranges import RANGES
from seqcore.data.examples import Example, encode_pairs
from seqcore.data.records import Pair
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.metrics.evaluation import evaluate_predictions, prediction_metrics
from seqcore.models.base import EncoderDecoder
from seqcore.tasks import get_task
from seqcore.tasks.parallel.evaluate import eval_spec
from seqcore.tokenizer import Tokenizer, TokenizerSettings, train_sentencepiece
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TrainLoop
from tests.factories import IDS, examples, tiny_model
from tests.pipeline_helpers import nested

# -- 1. the learning rate the optimiser used ------------------------------------------------

#: The run every schedule is checked on: 8 steps, 4 of them warmup, d_model 16 (tiny_model).
STEPS, WARMUP, D_MODEL = 8, 4, 16


def formula_lr(schedule: str, t: int, lr: float, warmup: int, total: int, d_model: int) -> float:
    """The schedules as written in docs and papers, at 1-based step ``t``.

    noam: Vaswani et al. 2017 eq. 3 scaled by ``lr``; constant and cosine: linear warmup from
    lr/warmup at step 1 to lr at step ``warmup``, then constant, or a half cosine to 0 at
    ``total``.
    """
    if schedule == "noam":
        return lr * d_model**-0.5 * min(t**-0.5, t * max(warmup, 1) ** -1.5)
    if warmup and t <= warmup:
        return lr * t / warmup
    if schedule == "constant":
        return lr
    return lr * 0.5 * (1 + math.cos(math.pi * (t - warmup) / (total - warmup)))


#: Hand-worked values at step 1, the last warmup step (4), warmup+1 (5) and the last step (8).
#: noam, lr 1, d 16 (16^-0.5 = 1/4), warmup 4 (4^-1.5 = 1/8):
#:   t=1: 1/4 * min(1, 1/8) = 1/32;  t=4: 1/4 * min(1/2, 4/8) = 1/8;
#:   t=5: 1/4 * min(5^-0.5, 5/8) = 1/(4 sqrt 5);  t=8: 1/4 * 8^-0.5 = 1/(8 sqrt 2).
#: constant, lr 0.01: 0.01 * 1/4, then 0.01 from step 4 on.
#: cosine, lr 0.01: 0.01 * 1/4; 0.01; 0.01 * (1 + cos(pi/4)) / 2; 0.01 * (1 + cos(pi)) / 2 = 0.
HAND_LR = {
    "noam": (1.0, {1: 1 / 32, 4: 1 / 8, 5: 1 / (4 * math.sqrt(5)), 8: 1 / (8 * math.sqrt(2))}),
    "constant": (0.01, {1: 0.0025, 4: 0.01, 5: 0.01, 8: 0.01}),
    "cosine": (0.01, {1: 0.0025, 4: 0.01, 5: 0.01 * (0.5 + math.sqrt(2) / 4), 8: 0.0}),
}


def test_schedule_table_covers_every_schedule_the_config_allows() -> None:
    assert set(HAND_LR) == set(typing.get_args(typing.get_type_hints(TrainConfig)["schedule"]))


def run_recording_lr(tmp_path: Path, schedule: str, lr: float, warmup: int
                     ) -> tuple[list[float], list[float], float]:
    """Train the tiny model STEPS steps; returns the lr of every param group as the optimiser
    stepped, the logged lr of each step, and the largest parameter move of step 1."""
    cfg = TrainConfig(amp="none", batch_size=4, max_steps=STEPS, schedule=schedule, lr=lr,
                      warmup_steps=warmup, threads=1, eval_every=100, checkpoint_every=100)
    model = tiny_model(enc_layers=1, dec_layers=1, max_len=16).train()
    feed = Seq2SeqFeed((examples(16), []), IDS, SequenceConfig(), cfg)
    loop = TrainLoop(model, cfg, feed, CheckpointDir(tmp_path / "ck", 1), {}, D_MODEL)
    used: list[float] = []
    first_move: list[float] = []
    optimiser_step = loop.opt.step

    def recording_step(*args: Any, **kwargs: Any) -> Any:
        groups = {g["lr"] for g in loop.opt.param_groups}
        assert len(groups) == 1  # one rate for every group
        used.append(groups.pop())
        before = [p.detach().clone() for p in model.parameters()]
        out = optimiser_step(*args, **kwargs)
        if len(used) == 1:
            first_move.append(max(float((p.detach() - b).abs().max())
                                  for p, b in zip(model.parameters(), before)))
        return out

    loop.opt.step = recording_step  # type: ignore[method-assign]
    state = loop.run(lambda entry, tokens_per_s: None)
    return used, [h.lr for h in state.history], first_move[0]


@pytest.mark.parametrize("schedule", sorted(HAND_LR))
def test_optimiser_uses_the_scheduled_lr_at_each_step_not_one_step_late(
        tmp_path: Path, schedule: str) -> None:
    lr, hand = HAND_LR[schedule]
    used, logged, move = run_recording_lr(tmp_path, schedule, lr, WARMUP)
    assert len(used) == STEPS  # every step was taken (none skipped)
    for t, value in hand.items():
        assert used[t - 1] == pytest.approx(value, rel=1e-12, abs=1e-15), (schedule, t)
    for t in range(1, STEPS + 1):
        assert used[t - 1] == pytest.approx(
            formula_lr(schedule, t, lr, WARMUP, STEPS, D_MODEL), rel=1e-12, abs=1e-15), t
    assert logged == used  # the train log reports the rate that was used
    # Adam's first (bias-corrected) update is lr * g / (|g| + eps): a move of lr exactly
    # wherever |g| >> eps, so the largest move of step 1 is the step-1 rate.
    assert move == pytest.approx(hand[1], rel=1e-3)


@pytest.mark.parametrize("schedule", sorted(HAND_LR))
def test_without_warmup_the_first_step_already_follows_the_schedule(
        tmp_path: Path, schedule: str) -> None:
    lr = HAND_LR[schedule][0]
    used, _, _ = run_recording_lr(tmp_path, schedule, lr, 0)
    # by hand: noam (warmup counts as 1) lr/4 * t^-0.5; constant lr; cosine lr(1+cos(pi t/8))/2
    hand = {"noam": [lr / 4 * t**-0.5 for t in range(1, STEPS + 1)],
            "constant": [lr] * STEPS,
            "cosine": [lr * (1 + math.cos(math.pi * t / STEPS)) / 2
                       for t in range(1, STEPS + 1)]}[schedule]
    assert used == pytest.approx(hand, rel=1e-12, abs=1e-15)


# -- 2. scheduled sampling feeds the previous position's prediction --------------------------

#: The oracle's choice at decoder position t: 4 + t (a different token at every position).
def oracle_choice(t: int) -> int:
    return 4 + t


class PositionOracle(EncoderDecoder):
    """Predicts token ``oracle_choice(t)`` at position t whatever the inputs, by a margin of
    10 logits; records every decoder input it is given."""

    def __init__(self, vocab: int = 12) -> None:
        super().__init__()
        self.vocab = vocab
        self.bias = nn.Parameter(torch.zeros(vocab))  # something for the optimiser to step
        self.calls: list[torch.Tensor] = []

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Any:
        return src

    def decode(self, tgt_in: torch.Tensor, memory: Any) -> torch.Tensor:
        self.calls.append(tgt_in.detach().clone())
        b, t = tgt_in.shape
        table = torch.zeros(t, self.vocab)
        table[torch.arange(t), torch.tensor([oracle_choice(i) for i in range(t)])] = 10.0
        return table.expand(b, t, self.vocab) + self.bias  # (B, T, V)

    def start(self, memory: Any) -> Any:
        raise NotImplementedError

    def step(self, tokens: torch.Tensor, memory: Any, state: Any) -> tuple[torch.Tensor, Any]:
        raise NotImplementedError


def test_scheduled_sampling_feeds_the_previous_positions_prediction_after_bos(
        tmp_path: Path) -> None:
    # Gold inputs BOS 10 11 10 and BOS 11 PAD PAD; the oracle predicts 4 5 6 7 at positions
    # 0..3, so input t+1 becomes the prediction at t: BOS 4 5 6 and BOS 4 PAD PAD (PAD stays).
    # Unshifted predictions would give BOS 5 6 7 / BOS 5 PAD PAD.
    data = [Example("a", "a", "", "", [4, 5], [10, 11, 10], True),
            Example("b", "b", "", "", [6], [11], True)]
    expected = {(IDS.bos, 10, 11, 10): [IDS.bos, 4, 5, 6],
                (IDS.bos, 11, IDS.pad, IDS.pad): [IDS.bos, 4, IDS.pad, IDS.pad]}
    # linear with k = 1 and cap 1: probability 1 (every eligible input replaced) from the
    # second step on, whichever step the schedule counts from
    cfg = TrainConfig(amp="none", batch_size=2, bucket_width=100, max_steps=2, lr=1e-6,
                      schedule="constant", warmup_steps=0, threads=1, ss_schedule="linear",
                      ss_k=1.0, ss_cap=1.0, ss_choice="argmax", eval_every=100,
                      checkpoint_every=100)
    model = PositionOracle()
    loop = TrainLoop(model, cfg, Seq2SeqFeed((data, []), IDS, SequenceConfig(), cfg),
                     CheckpointDir(tmp_path / "ck", 1), {}, 16)
    state = loop.run(lambda entry, tokens_per_s: None)
    assert state.history[-1].ss_prob == 1.0
    gold, mixed = model.calls[-2], model.calls[-1]  # the last step's two passes
    assert sorted(map(tuple, gold.tolist())) == sorted(expected)  # first pass: teacher forced
    for g, m in zip(gold.tolist(), mixed.tolist()):
        assert m == expected[tuple(g)]


# -- 3. failure-mode flags through the evaluate path, and the decoder's eos ----------------

#: (id, hypothesis, eos, expected flags) with evaluate.repeat_ngram 2 and repeat_times 3.
FAILURE_ROWS = [
    ("empty", "", True, {"empty"}),
    ("truncated", "K AE", False, {"truncated"}),
    ("bigram-x3", "AH B AH B AH B", True, {"repeated"}),  # (AH B) three times back to back
    ("bigram-x2", "AH B AH B", True, set()),  # twice: just below repeat_times
    ("unigram-x3", "K K K", True, {"repeated"}),
    ("unigram-x2", "K K T", True, set()),
    ("trigram-x3", "AH B K AH B K AH B K", True, set()),  # n-gram longer than repeat_ngram
    ("apart", "K T K T S K T", True, set()),  # (K T) three times, not back to back
    ("clean", "D AO G", True, set()),
]


def failure_rows() -> list[PredictionRow]:
    return [PredictionRow(id_, id_, f"src-{id_}", "D AO G", hyp, list(range(len(hyp.split()))),
                          hyp.split(), -1.0, -1.0, len(hyp.split()), eos, [])
            for id_, hyp, eos, _ in FAILURE_ROWS]


def evaluated_failures(rows: list[PredictionRow], cfg: Config, tmp_path: Path
                       ) -> dict[str, Any]:
    """The failure part of metrics.json, through the predictions file as evaluate reads it."""
    path = tmp_path / "test.jsonl"
    Predictions(rows).save(path)
    ev = evaluate_predictions(Predictions.load(path).rows, eval_spec(cfg))
    flagged = {k: [e["id"] for e in ev.failures[k]["examples"]] for k in
               ("empty", "truncated", "repeated", "illegal")}
    return {"metrics": prediction_metrics(ev)["failures"], "ids": flagged}


def test_empty_truncated_and_repeated_rows_get_exactly_their_flags(tmp_path: Path) -> None:
    cfg = config_from_dict({"task": "g2p", "evaluate": {"examples_per_failure": 20}})
    got = evaluated_failures(failure_rows(), cfg, tmp_path)
    n = len(FAILURE_ROWS)
    for kind in ("empty", "truncated", "repeated", "illegal"):
        ids = [id_ for id_, _, _, flags in FAILURE_ROWS if kind in flags]
        assert got["ids"][kind] == ids, kind
        assert got["metrics"][kind] == {"count": len(ids), "rate": len(ids) / n}, kind
    assert got["metrics"]["truncated"]["count"] == 1 and got["metrics"]["repeated"]["count"] == 2


def test_repeat_ngram_and_repeat_times_set_the_repeated_flag(tmp_path: Path) -> None:
    # repeat_ngram 3 also sees (AH B K) x3; repeat_times 2 also sees the rows repeated twice
    # (and K T K T at the start of "apart"); repeat_times 4 sees none (none repeats 4 times).
    cases = {(3, 3): ["bigram-x3", "unigram-x3", "trigram-x3"],
             (2, 2): ["bigram-x3", "bigram-x2", "unigram-x3", "unigram-x2", "apart"],
             (2, 4): []}
    for (ngram, times), ids in cases.items():
        cfg = config_from_dict({"evaluate": {"repeat_ngram": ngram, "repeat_times": times,
                                             "examples_per_failure": 20}})
        got = evaluated_failures(failure_rows(), cfg, tmp_path)
        assert got["ids"]["repeated"] == ids, (ngram, times)


class IdPieces:
    """A target tokenizer stand-in: a token's piece is its id."""

    def decode(self, tokens: list[int]) -> str:
        return " ".join(map(str, tokens))

    def piece(self, token: int) -> str:
        return str(token)


def greedy_rows(eos_bias: float, max_len: int) -> list[PredictionRow]:
    """Greedy decode of 3 sources by the tiny GRU model with ``eos_bias`` added to EOS."""
    model = tiny_model("gru", enc_layers=1, dec_layers=1)
    with torch.no_grad():
        model.proj.bias[IDS.eos] += eos_bias
    data = [Example(str(i), str(i), f"s{i}", "4 5", [4 + i, 5, 6], [4, 5], True)
            for i in range(3)]
    decoder = make_decoder(DecodeConfig(strategy="greedy", max_len=max_len), IDS)
    return decode_examples(model, data, decoder, IDS, IdPieces(), 2)  # type: ignore[arg-type]


def test_greedy_decode_hitting_max_len_writes_eos_false_and_is_flagged_truncated(
        tmp_path: Path) -> None:
    rows = greedy_rows(-1e4, max_len=5)  # EOS never wins: every row runs to the cap
    assert [(r.length, len(r.tokens), r.eos) for r in rows] == [(5, 5, False)] * 3
    assert IDS.eos not in [t for r in rows for t in r.tokens]
    got = evaluated_failures(rows, config_from_dict({"task": "parallel"}), tmp_path)
    assert got["metrics"]["truncated"] == {"count": 3, "rate": 1.0}
    assert got["metrics"]["empty"]["count"] == 0


def test_greedy_decode_ending_on_eos_writes_eos_true_and_is_not_truncated(
        tmp_path: Path) -> None:
    rows = greedy_rows(1e4, max_len=5)  # EOS wins at once: empty hypotheses that did end
    assert [(r.hypothesis, r.tokens, r.length, r.eos) for r in rows] == [("", [], 0, True)] * 3
    got = evaluated_failures(rows, config_from_dict({"task": "parallel"}), tmp_path)
    assert got["metrics"]["truncated"]["count"] == 0
    assert got["metrics"]["empty"] == {"count": 3, "rate": 1.0}


# -- 4. guards at, just below and just above their thresholds ------------------------------

#: Thresholds set apart from each other so a guard reading the wrong parameter shows.
GUARDS = {"tokenizer": {"max_unk_rate": 0.25}, "sequence": {"max_drop_rate": 0.125},
          "data": {"min_split_rows": 3}}
#: A count over 4,000,000 tokens (or rows) a hair above or below a quarter / an eighth.
BIG = 4_000_000


def coverage(split: str = "", side: str = "", unk: tuple[int, int] = (0, 10),
             drop: tuple[int, int] = (0, 10), kept: int | None = None
             ) -> dict[str, SplitCoverage]:
    """Train/dev/test coverage with no problem, except ``split``: ``unk`` = (UNK tokens,
    tokens) on ``side``, ``drop`` = (dropped, read) rows, ``kept`` rows left."""
    out = {}
    for s in ("train", "dev", "test"):
        clean = UnkStats(10, 0, 10, 0)
        if s != split:
            out[s] = SplitCoverage(clean, clean, 10, 10, 0)
            continue
        stats = UnkStats(10, min(unk[0], 10), unk[1], unk[0])
        dropped, read = drop
        out[s] = SplitCoverage(stats if side == "src" else clean,
                               stats if side == "tgt" else clean, read,
                               read - dropped if kept is None else kept, dropped)
    return out


def problems(cov: dict[str, SplitCoverage]) -> list[str]:
    """What the tokenizer stage's guard says, through the task and the config (GUARDS)."""
    cfg = config_from_dict(GUARDS)
    return get_task(cfg.task).coverage_problems(cfg, cov)


@pytest.mark.parametrize("side", ["src", "tgt"])
@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_unk_rate_equal_to_max_unk_rate_passes_and_just_above_stops(split: str,
                                                                      side: str) -> None:
    assert problems(coverage(split, side, unk=(1, 4))) == []  # exactly 0.25
    assert problems(coverage(split, side, unk=(BIG // 4 - 1, BIG))) == []  # just below
    (msg,) = problems(coverage(split, side, unk=(BIG // 4 + 1, BIG)))  # 0.25 + 2.5e-7
    assert f"{side} UNK rate {split} 25.0%" in msg and "> tokenizer.max_unk_rate 0.25" in msg


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_drop_rate_equal_to_max_drop_rate_passes_and_just_above_stops(split: str) -> None:
    assert problems(coverage(split, drop=(1, 8))) == []  # exactly 1/8
    assert problems(coverage(split, drop=(BIG // 8 - 1, BIG))) == []  # just below
    (msg,) = problems(coverage(split, drop=(BIG // 8 + 1, BIG)))
    assert msg.startswith(f"{split}: {BIG // 8 + 1} of {BIG} rows (12.5%) dropped as over-long "
                          "> sequence.max_drop_rate 0.125")


@pytest.mark.parametrize("split", ["dev", "test"])
def test_rows_left_equal_to_min_split_rows_pass_and_one_fewer_stops(split: str) -> None:
    assert problems(coverage(split, kept=4)) == []
    assert problems(coverage(split, kept=3)) == []  # exactly data.min_split_rows
    assert problems(coverage(split, kept=2)) == [
        f"{split}: 2 rows left after the length limits < data.min_split_rows 3; raise "
        "sequence.max_src_len / max_tgt_len"]


#: 40 rows in 40 groups; each group's split by the keyed hash the docs describe.
PREPARE_ROWS = 40


def hand_split(group: str, seed: int, dev: float, test: float) -> str:
    """sha256("<seed>\\0<group>"), first 8 bytes big-endian / 2^64: test below ``test``, dev
    below ``test + dev``, train above (docs: seqcore.data.splits)."""
    u = int.from_bytes(hashlib.sha256(f"{seed}\x00{group}".encode()).digest()[:8], "big") / 2**64
    return "test" if u < test else "dev" if u < test + dev else "train"


def prepare_config(tmp_path: Path, min_rows: int) -> Config:
    raw = tmp_path / "user.tsv"
    raw.write_text("source\ttarget\tgroup\n" + "".join(
        f"w{i}\tT {i}\tg{i}\n" for i in range(PREPARE_ROWS)))  # not a copy of the source
    out = tmp_path / f"min{min_rows}"
    return config_from_dict({
        "task": "parallel",
        "data": {"source": "tsv", "path": str(raw), "sha256": "", "dev_fraction": 0.25,
                 "test_fraction": 0.25, "min_split_rows": min_rows},
        "paths": {"raw": str(raw), "prepared": str(out / "prepared"),
                  "rejects": str(out / "rejects.tsv")}})


def test_prepare_passes_a_split_of_exactly_min_split_rows_and_stops_one_below(
        tmp_path: Path) -> None:
    d = prepare_config(tmp_path, 0).data
    counts = {"dev": 0, "test": 0, "train": 0}
    for i in range(PREPARE_ROWS):
        counts[hand_split(f"g{i}", d.split_seed, d.dev_fraction, d.test_fraction)] += 1
    smallest = min(counts["dev"], counts["test"])
    assert smallest > 0  # the data must make the boundary a real split size
    ok = prepare_config(tmp_path, smallest)
    pipeline.prepare.run(ok)  # each scored split holds >= min_split_rows: goes on
    assert (Path(ok.paths.prepared) / "test.jsonl").exists()
    short = prepare_config(tmp_path, smallest + 1)
    with pytest.raises(SystemExit) as stop:
        pipeline.prepare.run(short)
    named = [f"{s} has {counts[s]} rows (data.{s}_fraction 0.25)" for s in ("dev", "test")
             if counts[s] == smallest]
    assert str(stop.value).startswith(f"[prepare] {' and '.join(named)} of {PREPARE_ROWS} kept "
                                      f"rows, fewer than data.min_split_rows {smallest + 1}")
    assert not Path(short.paths.prepared).exists()


def test_lengths_at_max_src_len_and_max_tgt_len_with_eos_are_kept_one_more_is_dropped(
        tmp_path: Path) -> None:
    # A char model: one token per letter. max_src_len 4 counts source tokens; max_tgt_len 4
    # counts EOS, so a kept target has at most 3 tokens.
    tok = Tokenizer(train_sentencepiece(["abcdef"], TokenizerSettings("char", 40, 1.0), IDS,
                                        tmp_path / "char.model"))
    seq = config_from_dict({"sequence": {"max_src_len": 4, "max_tgt_len": 4}}).sequence
    pairs = [Pair("fits", "abcd", "abc", "g1", 1), Pair("long-src", "abcde", "abc", "g2", 2),
             Pair("long-tgt", "abcd", "abcd", "g3", 3)]
    kept, rejects = encode_pairs(pairs, tok, tok, seq.max_src_len, seq.max_tgt_len, "drop", "f")
    assert [(e.id, len(e.src), len(e.tgt), e.has_eos) for e in kept] == [("fits", 4, 3, True)]
    assert [(r.line, r.reason, r.action) for r in rejects] == [
        (2, "overlong-source", "dropped"), (3, "overlong-target", "dropped")]
    kept, _ = encode_pairs(pairs, tok, tok, seq.max_src_len, seq.max_tgt_len, "truncate", "f")
    # truncated: the source cut to 4 tokens; the target keeps 4 tokens and loses its EOS
    assert [(e.id, len(e.src), len(e.tgt), e.has_eos) for e in kept] == [
        ("fits", 4, 3, True), ("long-src", 4, 3, True), ("long-tgt", 4, 4, False)]


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
