"""Decoding rules: greedy, beam search and sampling over real and oracle models."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Self

import pytest
import torch

from seqcore.config import DecodeConfig
from seqcore.data.examples import Example
from seqcore.decoding.beam import BeamSettings, beam_search, length_penalty
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.greedy import greedy
from seqcore.decoding.predictions import decode_examples
from seqcore.decoding.sampling import SamplingSettings, sample
from seqcore.decoding.search import Hypothesis, Masking
from seqcore.models.base import EncoderDecoder
from tests.factories import FAMILIES, IDS, IdPieces, tiny_model

SRC_V, TGT_V = 11, 13
#: PAD and BOS are never outputs (what the factory bans).
RULES = Masking(banned=(IDS.pad, IDS.bos))
EOS_SETTINGS = (2.0, 5.0)  # (weight scale, EOS logit bias): mixed lengths


def varied_model(family: str, seed: int = 0) -> EncoderDecoder:
    """A tiny random-init model in eval mode with outputs of varied content and length."""
    model = tiny_model(family, vocab=SRC_V, tgt_vocab=TGT_V, enc_layers=1, dec_layers=2,
                       tie=False, embed_dim=16, seed=seed)
    with torch.no_grad():  # sharper random distributions, so greedy and samples differ
        for p in model.parameters():
            p.mul_(EOS_SETTINGS[0])
    # a constant on the EOS logit (decode and cached step both end in proj): varied lengths
    eos = EOS_SETTINGS[1] * (torch.arange(TGT_V) == IDS.eos)
    model.proj.register_forward_hook(lambda module, args, logits: logits + eos)
    return model.eval()


def source_batch(b: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S) random real-token sources of lengths 2..7, right-padded."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 8, (b,), generator=g)
    src = torch.randint(4, SRC_V, (b, 7), generator=g)
    mask = torch.arange(7)[None, :] < lengths[:, None]
    return src.masked_fill(~mask, IDS.pad), mask


def ones(src: torch.Tensor) -> torch.Tensor:
    """The all-real mask of an unpadded (B, S) source."""
    return torch.ones_like(src, dtype=torch.bool)


# --- an oracle model: next-token log-probs are a fixed function of (source, prefix) ---------
@dataclass
class Rows:
    """Oracle memory/state: (N, t) token history per row (reorderable like a real cache)."""

    tokens: torch.Tensor

    def reorder(self, index: torch.Tensor) -> Self:
        return Rows(self.tokens.index_select(0, index))


class Oracle(EncoderDecoder):
    """Vocabulary 5; the logits after a prefix are a seeded random row picked by a hash of the
    source's first token and the whole prefix, plus ``eos_bias`` on EOS."""

    def __init__(self, seed: int, eos_bias: float = 0.0, scale: float = 2.0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(4099, 5, generator=g) * scale
        self.table[:, IDS.eos] += eos_bias
        self.eval()

    def _logits(self, seed: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
        h = seed.clone()
        for t in range(prefix.shape[1]):
            h = (h * 31 + prefix[:, t] + 1) % 4099
        return self.table[h]  # (N, 5)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Rows:
        return Rows(src[:, :1])

    def decode(self, tgt_in: torch.Tensor, memory: Rows) -> torch.Tensor:
        seed = memory.tokens[:, 0]
        return torch.stack([self._logits(seed, tgt_in[:, : t + 1])
                            for t in range(tgt_in.shape[1])], dim=1)  # (N, T, 5)

    def start(self, memory: Rows) -> Rows:
        return Rows(memory.tokens[:, :0])

    def step(self, tokens: torch.Tensor, memory: Rows, state: Rows) -> tuple[torch.Tensor, Rows]:
        prefix = torch.cat([state.tokens, tokens[:, None]], dim=1)
        return self._logits(memory.tokens[:, 0], prefix), Rows(prefix)


def enumerate_all(model: Oracle, first: int, max_len: int) -> list[tuple[list[int], float, bool]]:
    """Every output (tokens, log-prob, eos) up to max_len generated tokens, by brute force."""
    src = torch.tensor([[first]])
    memory = model.encode(src, ones(src))
    others = [v for v in range(5) if v != IDS.eos]
    out = []
    for n in range(max_len + 1):
        eos = n < max_len  # n tokens + EOS, or n = max_len tokens cut at the cap
        seqs = [list(t) for t in itertools.product(others, repeat=n)]
        labels = torch.tensor([t + [IDS.eos] if eos else t for t in seqs])  # (M, L)
        tgt_in = torch.cat([torch.full((len(seqs), 1), IDS.bos), labels[:, :-1]], dim=1)
        logp = torch.log_softmax(model.decode(tgt_in, memory.reorder(
            torch.zeros(len(seqs), dtype=torch.long))), dim=-1)  # (M, L, 5)
        scores = logp.gather(2, labels[:, :, None])[:, :, 0].sum(dim=1)
        out += [(t, float(sc), eos) for t, sc in zip(seqs, scores, strict=True)]
    return out


def teacher_forced_score(model: EncoderDecoder, src: torch.Tensor, mask: torch.Tensor,
                         hyp: Hypothesis) -> float:
    """log P(tokens [+ EOS]) recomputed by one teacher-forced pass."""
    labels = hyp.tokens + ([IDS.eos] if hyp.eos else [])
    tgt_in = torch.tensor([[IDS.bos, *labels[:-1]]])
    with torch.no_grad():
        logp = torch.log_softmax(model.decode(tgt_in, model.encode(src, mask))[0].float(), -1)
    return float(sum(logp[i, y] for i, y in enumerate(labels)))


def all_strategies(model: EncoderDecoder, src: torch.Tensor, mask: torch.Tensor,
                   caps: int | list[int], rules: Masking) -> list[tuple[int, Hypothesis]]:
    """(example row, hypothesis) from greedy, then beam (4-best, avg), then sampling."""
    out = list(enumerate(greedy(model, src, mask, IDS, caps, masking=rules)))
    beams = beam_search(model, src, mask, IDS, caps, BeamSettings(4, 4, "avg"), rules)
    out += [(i, h) for i, nbest in enumerate(beams) for h in nbest]
    samples = sample(model, src, mask, IDS, [str(i) for i in range(src.shape[0])], caps,
                     SamplingSettings(seed=1), rules)
    return out + list(enumerate(samples))


@pytest.mark.parametrize("family", FAMILIES)
def test_beam_of_one_equals_greedy(family: str) -> None:
    model, (src, mask) = varied_model(family), source_batch(6)
    caps, rules = [9, 3, 12, 6, 1, 10], Masking(min_len=2, banned=RULES.banned)
    g = greedy(model, src, mask, IDS, caps, masking=rules)
    b = beam_search(model, src, mask, IDS, caps, BeamSettings(1, 1, "none"), rules)
    assert [h.tokens for h in g] == [n[0].tokens for n in b]
    assert [h.eos for h in g] == [n[0].eos for n in b]
    assert [h.score for h in g] == pytest.approx([n[0].score for n in b], abs=1e-5)
    assert any(h.eos for h in g) and not all(h.eos for h in g)  # both endings exercised


@pytest.mark.parametrize("family", FAMILIES)
def test_cached_decoding_matches_full_recompute(family: str) -> None:
    model, (src, mask) = varied_model(family), source_batch(5)
    caps, ex_ids = [12, 5, 12, 8, 12], ["a", "b", "c", "d", "e"]
    beam, temp = BeamSettings(3, 3, "gnmt", 0.6), SamplingSettings(1.3, 6, 0.9, 7)
    runs = {}
    for cache in (True, False):
        runs[cache] = (
            [[h] for h in greedy(model, src, mask, IDS, caps, masking=RULES, use_cache=cache)]
            + beam_search(model, src, mask, IDS, caps, beam, RULES, use_cache=cache)
            + [[h] for h in sample(model, src, mask, IDS, ex_ids, caps, temp, RULES, cache)])
    for with_cache, without in zip(runs[True], runs[False], strict=True):
        assert [h.tokens for h in with_cache] == [h.tokens for h in without]
        assert [h.eos for h in with_cache] == [h.eos for h in without]
        assert [h.score for h in with_cache] == pytest.approx([h.score for h in without], abs=1e-4)


@pytest.mark.parametrize(("norm", "eos_bias", "firsts", "n_best"), [
    # sources 10 and 26: a stop bound at the next length only would stop early
    *[pytest.param(norm, 0.0, [5, 10, 26], 1, id=norm) for norm in ("none", "avg", "gnmt")],
    pytest.param("avg", 1.0, [6], 4, id="test_wide_beam_n_best_equals_exhaustive_top_n")])
def test_wide_beam_equals_exhaustive_search(norm: str, eos_bias: float, firsts: list[int],
                                            n_best: int) -> None:
    model, max_len, src = Oracle(seed=5, eos_bias=eos_bias), 6, torch.tensor([[f] for f in firsts])
    # 5120 = 5 * 4**5 slots: every candidate of every step fits, so only the stop rule prunes.
    got = beam_search(model, src, ones(src), IDS, max_len,
                      BeamSettings(5120, n_best, norm, 0.8))  # type: ignore[arg-type]
    lp = lambda n: float(length_penalty(torch.tensor(n), norm, 0.8))  # noqa: E731
    for first, nbest in zip(firsts, got, strict=True):
        table = sorted(enumerate_all(model, first, max_len),
                       key=lambda r: -r[1] / lp(len(r[0]) + r[2]))  # stable: ties keep order
        toks, score, eos = table[0]
        assert [(h.tokens, h.eos) for h in nbest] == [r[::2] for r in table[:n_best]]
        assert nbest[0].score == pytest.approx(score, abs=1e-4)
        assert nbest[0].norm_score == pytest.approx(score / lp(len(toks) + eos), abs=1e-4)


def test_normalisations_choose_different_outputs_on_the_oracle() -> None:
    """Guards the exhaustive test against a degenerate oracle where every norm agrees."""
    table = enumerate_all(Oracle(seed=5), 26, 6)
    best = []
    for norm in ("none", "avg", "gnmt"):
        lp = lambda n: float(length_penalty(torch.tensor(n), norm, 0.8))  # noqa: E731
        best.append(max(table, key=lambda r: r[1] / lp(len(r[0]) + r[2]))[::2])
    assert len(set(map(str, best))) == 3 and any(eos for _, eos in best)
    assert not all(eos for _, eos in best)  # a truncated output wins under some norm


def test_beam_ties_go_to_the_lower_token_then_the_earlier_hypothesis() -> None:
    model, src = Oracle(seed=0), torch.tensor([[4]])
    model.table[:] = torch.tensor([-1.0, 0.0, -1.0, -9.0, 0.0])  # tokens 1 and 4 always tie
    got = beam_search(model, src, ones(src), IDS, 2, BeamSettings(2, 2, "none"))[0]
    # step 0: [1] before [4]; step 1: all four extensions tie -> token 1 first, from the
    # earlier hypothesis first: [1, 1], [4, 1] (token-major), not [1, 1], [1, 4] (parent-major)
    assert [h.tokens for h in got] == [[1, 1], [4, 1]]
    assert greedy(model, src, ones(src), IDS, 2)[0].tokens == [1, 1]


def test_length_penalty_formulas() -> None:
    lengths = torch.tensor([1, 7])
    assert length_penalty(lengths, "none", 0.6).tolist() == [1.0, 1.0]
    assert length_penalty(lengths, "avg", 0.6).tolist() == [1.0, 7.0]
    # ((5 + 1) / 6) ** a = 1; ((5 + 7) / 6) ** 0.6 = 2 ** 0.6
    assert length_penalty(lengths, "gnmt", 0.6).tolist() == pytest.approx([1.0, 2**0.6])


def test_eos_is_never_emitted_before_min_len() -> None:
    model = Oracle(seed=2, eos_bias=4.0)  # EOS is by far the likeliest token everywhere
    src = torch.tensor([[4], [5], [6]])
    unconstrained = all_strategies(model, src, ones(src), 6, Masking())
    assert min(len(h.tokens) for _, h in unconstrained) < 3  # the rule below has work to do
    for _, h in all_strategies(model, src, ones(src), 6, Masking(min_len=3)):
        assert len(h.tokens) >= 3


@pytest.mark.parametrize("family", FAMILIES)
def test_hypothesis_never_continues_after_eos(family: str) -> None:
    model, (src, mask) = varied_model(family), source_batch(4)
    hyps = all_strategies(model, src, mask, 10, RULES)
    assert any(h.eos for _, h in hyps)
    for row, h in hyps:
        assert IDS.eos not in h.tokens
        # the score is exactly the log-prob of tokens (+ EOS): nothing was scored after EOS
        assert h.score == pytest.approx(
            teacher_forced_score(model, src[row : row + 1], mask[row : row + 1], h), abs=1e-4)


def test_max_len_is_honoured_and_marked_truncated() -> None:
    model = Oracle(seed=4, eos_bias=-30.0)  # EOS practically never wins
    src, caps = torch.tensor([[4], [5], [6]]), [2, 4, 6]
    for row, h in all_strategies(model, src, ones(src), caps, Masking()):
        assert len(h.tokens) == caps[row] and not h.eos


@pytest.mark.parametrize("family", FAMILIES)
def test_sampling_with_top_k_one_equals_greedy(family: str) -> None:
    model, (src, mask) = varied_model(family), source_batch(6)
    g = greedy(model, src, mask, IDS, 10, masking=RULES)
    s = sample(model, src, mask, IDS, list("abcdef"), 10,
               SamplingSettings(temperature=2.0, top_k=1, seed=3), RULES)
    assert [h.tokens for h in g] == [h.tokens for h in s]


def test_same_seed_gives_same_samples_with_batch_of_one_and_of_32() -> None:
    model, (src, mask) = varied_model("transformer"), source_batch(32, seed=9)
    ex_ids, cfg = [f"ex{i}" for i in range(32)], SamplingSettings(temperature=1.5, seed=11)
    batched = sample(model, src, mask, IDS, ex_ids, 12, cfg, RULES)
    alone = [sample(model, src[i : i + 1, :n], mask[i : i + 1, :n], IDS, ex_ids[i : i + 1], 12,
                    cfg, RULES)[0] for i, n in enumerate(mask.sum(1).tolist())]
    assert [h.tokens for h in batched] == [h.tokens for h in alone]
    reseeded = sample(model, src, mask, IDS, ex_ids, 12, SamplingSettings(1.5, seed=12), RULES)
    assert [h.tokens for h in reseeded] != [h.tokens for h in batched]  # the seed matters
    assert len({tuple(h.tokens) for h in batched}) > 8  # samples really vary


def test_decoding_runs_in_eval_mode_without_a_gradient_graph() -> None:
    model, (src, mask) = varied_model("transformer"), source_batch(3)
    seen: list[tuple[bool, bool]] = []

    def hook(module: torch.nn.Module, args: object, output: object) -> None:
        out = output[0] if isinstance(output, tuple) else output
        seen.append((module.training, torch.is_tensor(out) and out.requires_grad))

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    all_strategies(model, src, mask, 6, RULES)
    for h in handles:
        h.remove()
    assert seen and not any(training or grad for training, grad in seen)
    model.train()
    with pytest.raises(RuntimeError, match="eval"):
        greedy(model, src, mask, IDS, 6)


def test_n_best_fills_the_prediction_rows() -> None:
    examples = [Example(f"e{i}", "g", "src", "ref", [4 + i, 5, 6], [4], True) for i in range(3)]
    cfg = DecodeConfig(strategy="beam", beam_size=4, n_best=3, max_len=8, max_len_ratio=1.0)
    rows = decode_examples(varied_model("transformer"), examples, make_decoder(cfg, IDS), IDS,
                           IdPieces(), 2)  # type: ignore[arg-type]
    for r in rows:
        assert len(r.nbest) == 2 and r.length == len(r.tokens) <= math.ceil(1.0 * 3) + 5
        assert r.norm_score >= max(
            float(n["norm_score"]) for n in r.nbest)  # type: ignore[arg-type]
