"""Rules the third tranche's generated mutants of the models, the seq2seq feed and scheduled
sampling found unguarded (issue 32): model internals against plain-torch recomputations from
their own weights, sinusoidal positions from the formula, scheduled sampling's draws from
the training generator alone, and the feed's and models' refusals."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional

from seqcore.config import SequenceConfig, TrainConfig
from seqcore.contract import pad_batch
from seqcore.models.rnn import LSTM, RNNSeq2Seq, RNNShape
from seqcore.models.transformer import (
    Transformer,
    TransformerShape,
    feed_forward,
    sinusoidal_positions,
)
from seqcore.sequences import make_batch
from seqcore.training.distributed import World
from seqcore.training.feeds import Seq2SeqFeed, choose_tokens
from seqcore.training.scheduled_sampling import mix_model_tokens
from tests.factories import IDS, PAD, examples, tiny_model

NOLS = SequenceConfig(label_smoothing=0.0)
V = 12


# -- scheduled sampling: the choice and the draw ---------------------------------------------


def bumped_logits(hot: torch.Tensor, bump: float) -> torch.Tensor:
    """(B, T, V) logits, zero except ``bump`` at the token ``hot`` (B, T) names."""
    return functional.one_hot(hot, V).float() * bump


HOT = torch.tensor([[4, 9, 5, 11], [7, 6, 10, 3]])  # (B, T): a different token at each position


def test_argmax_choice_takes_the_most_likely_token_even_when_it_is_barely_ahead() -> None:
    got = choose_tokens(bumped_logits(HOT, 0.01), "argmax", torch.Generator().manual_seed(0))
    assert torch.equal(got, HOT)


def test_sampled_choice_follows_each_positions_softmax_over_the_vocabulary() -> None:
    """Nearly one-hot rows: a sample is the hot token (a softmax over another axis spreads it)."""
    got = choose_tokens(bumped_logits(HOT, 40.0), "sample", torch.Generator().manual_seed(0))
    assert got.shape == HOT.shape and torch.equal(got, HOT)


def test_sampled_choice_draws_from_the_given_generator_and_only_from_it() -> None:
    """Uniform rows: the draw is torch.multinomial over 1/V with the seeded generator, whatever
    the global RNG holds (rule 7: the generator's state is checkpointed)."""
    logits = torch.zeros(2, 4, V)
    expected = torch.multinomial(torch.full((8, V), 1 / V), 1,
                                 generator=torch.Generator().manual_seed(3)).view(2, 4)
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        gen = torch.Generator().manual_seed(3)
        assert torch.equal(choose_tokens(logits, "sample", gen), expected)
    assert not torch.equal(gen.get_state(), torch.Generator().manual_seed(3).get_state())


class Oracle(nn.Module):
    """Fixed logits ``bump`` at token 7 everywhere; records each call's decoder input."""

    def __init__(self, bump: float) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(V))
        with torch.no_grad():
            self.bias[7] = bump
        self.calls: list[torch.Tensor] = []

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor
                ) -> torch.Tensor:
        self.calls.append(tgt_in.clone())
        return self.bias.expand(*tgt_in.shape, V)  # (B, T, V)


def ss_feed(choice: str) -> Seq2SeqFeed:
    return Seq2SeqFeed((examples(4), []), IDS, NOLS, TrainConfig(batch_size=4, ss_choice=choice))


def eligible(batch_mask: torch.Tensor) -> torch.Tensor:
    out = batch_mask.clone()
    out[:, 0] = False  # BOS is never replaced
    return out


def mixed_inputs(feed: Seq2SeqFeed, batch, bump: float, p: float, seed: int
                 ) -> list[torch.Tensor]:
    """The second pass's decoder inputs under two global seeds (which must play no part),
    with the training generator seeded ``seed``."""
    seen = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        model = Oracle(bump)
        feed.loss(model, batch, p, torch.Generator().manual_seed(seed))
        seen.append(model.calls[1])
    return seen


def test_scheduled_sampling_off_runs_one_pass_and_draws_nothing_from_the_generator() -> None:
    feed = ss_feed("sample")
    batch, model, gen = feed.draw(), Oracle(0.01), torch.Generator().manual_seed(4)
    before = gen.get_state()
    feed.loss(model, batch, 0.0, gen)
    assert len(model.calls) == 1 and torch.equal(model.calls[0], batch.tf.inputs)
    assert torch.equal(gen.get_state(), before)


def test_scheduled_sampling_replaces_inputs_where_the_generators_uniform_draw_is_below_p() -> None:
    """argmax choice (token 7, barely ahead): input t+1 is 7 where the training generator's
    rand(B, T) < p, BOS and PAD excepted; the global RNG plays no part."""
    feed = ss_feed("argmax")
    batch = feed.draw()
    u = torch.rand(batch.tf.inputs.shape, generator=torch.Generator().manual_seed(11))
    expected = torch.where(eligible(batch.tf.mask) & (u < 0.5), 7, batch.tf.inputs)
    assert not torch.equal(expected, batch.tf.inputs)
    for seen in mixed_inputs(feed, batch, 0.01, 0.5, 11):
        assert torch.equal(seen, expected)


def test_scheduled_sampling_samples_the_first_pass_from_the_training_generator() -> None:
    """sample choice over uniform logits, p = 1: every eligible input is the previous
    position's multinomial draw from the training generator."""
    feed = ss_feed("sample")
    batch = feed.draw()
    b, t = batch.tf.inputs.shape
    g = torch.Generator().manual_seed(12)
    draws = torch.multinomial(torch.full((b * t, V), 1 / V), 1, generator=g).view(b, t)
    shifted = torch.cat([batch.tf.inputs[:, :1], draws[:, :-1]], dim=1)
    expected = torch.where(eligible(batch.tf.mask), shifted, batch.tf.inputs)
    for seen in mixed_inputs(feed, batch, 0.0, 1.0, 12):
        assert torch.equal(seen, expected)


def test_scheduled_sampling_draws_on_the_cpu_and_mixes_on_the_batchs_device() -> None:
    tf = make_batch(examples(3), IDS).tf
    meta = type(tf)(tf.inputs.to("meta"), tf.labels.to("meta"), tf.mask.to("meta"))
    out = mix_model_tokens(meta, torch.zeros_like(meta.inputs), 0.5,
                           torch.Generator().manual_seed(0))
    assert out.device.type == "meta" and out.shape == tf.inputs.shape


def test_scheduled_sampling_refusal_says_the_predictions_must_be_detached() -> None:
    b = make_batch(examples(2), IDS)
    preds = torch.zeros(b.tf.inputs.shape, requires_grad=True)
    with pytest.raises(ValueError, match=r"^scheduled-sampling predictions must be detached$"):
        mix_model_tokens(b.tf, preds, 0.5, torch.Generator())


# -- the seq2seq feed ------------------------------------------------------------------------


def test_no_dev_examples_give_zero_nll_over_zero_tokens() -> None:
    assert ss_feed("argmax").dev_nll(tiny_model()) == (0.0, 0)


def test_a_cursor_saved_under_another_seed_is_refused_naming_both_seeds() -> None:
    feed = Seq2SeqFeed((examples(4), []), IDS, NOLS, TrainConfig(batch_size=2, seed=5))
    with pytest.raises(ValueError, match=r"^sampler seed 7 != 5$"):
        feed.load_state_dict({"epoch": 0, "cursor": 1, "seed": 7})


def test_a_feed_for_another_device_draws_its_batches_there() -> None:
    feed = Seq2SeqFeed((examples(4), []), IDS, NOLS, TrainConfig(batch_size=2),
                       device=torch.device("meta"))
    b = feed.draw()
    assert {t.device.type for t in (b.src, b.src_mask, b.tf.inputs, b.tf.labels, b.tf.mask)} \
        == {"meta"}


def test_each_rank_draws_its_shard_of_the_global_batch_stream() -> None:
    """Rank r of 2 draws the global batches 2k + r of the single-process stream."""
    data = examples(12, seed=3)
    cfg = TrainConfig(batch_size=2, bucket_width=2, seed=5)
    single = Seq2SeqFeed((data, []), IDS, NOLS, cfg)
    stream = [single.draw() for _ in range(6)]
    for rank in (0, 1):
        feed = Seq2SeqFeed((data, []), IDS, NOLS, cfg, world=World(rank=rank, size=2))
        for k in range(3):
            assert torch.equal(feed.draw().src, stream[2 * k + rank].src)


# -- the encoder-decoder interface ------------------------------------------------------------


@pytest.mark.parametrize(("src", "mask", "tgt"), [
    (torch.ones(1, 3, dtype=torch.long), torch.ones(1, 4, dtype=torch.bool),
     torch.ones(1, 2, dtype=torch.long)),  # a mask of another shape
    (torch.ones(1, 3, 1, dtype=torch.long), torch.ones(1, 3, 1, dtype=torch.bool),
     torch.ones(1, 2, dtype=torch.long)),  # a 3-D source with a mask of its shape
    (torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.bool),
     torch.ones(1, 2, 1, dtype=torch.long)),  # a 3-D decoder input
])
def test_forward_refuses_inputs_of_another_rank_or_a_mask_of_another_shape(
    src: torch.Tensor, mask: torch.Tensor, tgt: torch.Tensor,
) -> None:
    with pytest.raises(ValueError, match=r"^expected \(B,S\),\(B,S\),\(B,T\); got "):
        tiny_model()(src, mask, tgt)


def test_forward_refuses_a_mask_that_is_not_bool_naming_its_dtype() -> None:
    with pytest.raises(TypeError, match=r"^src_mask must be bool \(True = real token\), got "
                                        r"torch.int64$"):
        tiny_model()(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long),
                     torch.ones(1, 2, dtype=torch.long))


# -- GRU/LSTM ----------------------------------------------------------------------------------


def rnn_shape(**over: object) -> RNNShape:
    kw: dict[str, object] = {"cell": "gru", "src_vocab": V, "tgt_vocab": V, "embed_dim": 6,
                             "hidden": 8, "enc_layers": 1, "dec_layers": 1, "dropout": 0.0,
                             "attention": "general", "pad_id": PAD}
    return RNNShape(**{**kw, **over})  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("cell", "rnn", r"^cell must be 'gru' or 'lstm', got 'rnn'$"),
    ("attention", "mlp", r"^attention must be dot/general/additive, got 'mlp'$"),
    ("hidden", 7, r"^hidden must be even \(two encoder directions\), got 7$"),
])
def test_rnn_shape_refusals_name_the_valid_choices(field: str, value: object, message: str
                                                   ) -> None:
    with pytest.raises(ValueError, match=message):
        rnn_shape(**{field: value})


def luong_parameters(cell: str, attention: str, e: int = 6, h: int = 8, layers: int = 1
                     ) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of the documented layout, written out by hand."""
    gates = 3 if cell == "gru" else 4
    out = {"src_embed.weight": (V, e), "tgt_embed.weight": (V, e),
           "bridge_h.weight": (h, h), "bridge_h.bias": (h,),
           "combine.weight": (h, 2 * h), "combine.bias": (h,),
           "proj.weight": (V, h), "proj.bias": (V,)}
    for layer in range(layers):
        for sfx in ("", "_reverse"):
            width = e if layer == 0 else h
            out |= {f"encoder.weight_ih_l{layer}{sfx}": (gates * h // 2, width),
                    f"encoder.weight_hh_l{layer}{sfx}": (gates * h // 2, h // 2),
                    f"encoder.bias_ih_l{layer}{sfx}": (gates * h // 2,),
                    f"encoder.bias_hh_l{layer}{sfx}": (gates * h // 2,)}
        out |= {f"decoder.weight_ih_l{layer}": (gates * h, e if layer == 0 else h),
                f"decoder.weight_hh_l{layer}": (gates * h, h),
                f"decoder.bias_ih_l{layer}": (gates * h,), f"decoder.bias_hh_l{layer}": (gates * h,)}
    if cell == "lstm":
        out |= {"bridge_c.weight": (h, h), "bridge_c.bias": (h,)}
    if attention != "dot":  # W_a / W_k: no bias (a per-query constant the softmax cancels)
        out |= {"key.weight": (h, h)}
    if attention == "additive":  # W_q h + b, then v . tanh(.): v has no bias for the same reason
        out |= {"query.weight": (h, h), "query.bias": (h,), "score_v.weight": (1, h)}
    return out


@pytest.mark.parametrize("attention", ("dot", "general", "additive"))
@pytest.mark.parametrize("cell", ("gru", "lstm"))
def test_rnn_parameters_are_exactly_those_of_the_luong_layout(cell: str, attention: str) -> None:
    """No parameter that no path uses (DDP refuses those; a model file would carry them)."""
    model = RNNSeq2Seq(rnn_shape(cell=cell, attention=attention, enc_layers=2, dec_layers=2))
    got = {k: tuple(p.shape) for k, p in model.named_parameters()}
    assert got == luong_parameters(cell, attention, layers=2)


def test_rnn_dropout_acts_between_stacked_layers_and_a_single_layer_gets_none() -> None:
    """nn.GRU/LSTM apply dropout between layers only and warn when given it for one layer."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        single = RNNSeq2Seq(rnn_shape(dropout=0.5, enc_layers=1, dec_layers=1))
    assert single.encoder.dropout == 0.0 and single.decoder.dropout == 0.0
    stacked = RNNSeq2Seq(rnn_shape(dropout=0.5, enc_layers=2, dec_layers=2)).train()
    assert stacked.encoder.dropout == 0.5 and stacked.decoder.dropout == 0.5
    x = torch.randn(1, 5, 6, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    a = stacked.encoder(x)[0]
    torch.manual_seed(1)
    assert not torch.equal(a, stacked.encoder(x)[0])  # live between the two layers


@pytest.mark.parametrize("cell", ("gru", "lstm"))
def test_rnn_decoder_starts_from_the_bridged_final_states_of_the_top_encoder_layer(cell: str
                                                                                   ) -> None:
    """init = tanh(W_b [h_fwd; h_bwd] + b_b) of the top layer's finals, run unpadded here;
    an empty source bridges zeros (tanh(b_b)). The one-token source reads no PAD."""
    model = RNNSeq2Seq(rnn_shape(cell=cell, enc_layers=2, dec_layers=2)).eval()
    sources = [[5], [4, 6, 7, 8], []]
    src, mask = pad_batch(sources, PAD)
    with torch.no_grad():
        init = model.encode(src, mask).init
        for i, tokens in enumerate(sources):
            if tokens:
                _, final = model.encoder(model.src_embed(torch.tensor([tokens])))
            else:
                final = (torch.zeros(4, 1, 4),) * 2 if cell == "lstm" else torch.zeros(4, 1, 4)
            finals = final if cell == "lstm" else (final,)
            for got, fin, bridge in zip((init.h, init.c), finals, (model.bridge_h, model.bridge_c)):
                top = torch.cat([fin[2, 0], fin[3, 0]])  # layer 2: forward, backward
                expected = torch.tanh(top @ bridge.weight.T + bridge.bias)
                for layer in range(2):
                    torch.testing.assert_close(got[layer, i], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("attention", ("dot", "general", "additive"))
def test_rnn_attention_weights_are_the_softmax_of_luongs_or_bahdanaus_score(attention: str
                                                                             ) -> None:
    model = RNNSeq2Seq(rnn_shape(attention=attention)).eval()
    src, mask = pad_batch([[4, 5, 6], [7, 8]], PAD)
    query = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        memory = model.encode(src, mask)
        m = memory.states  # (B, S, H)
        if attention == "dot":
            scores = torch.einsum("bth,bsh->bts", query, m)
        elif attention == "general":
            scores = torch.einsum("bth,bsh->bts", query, m @ model.key.weight.T)
        else:
            q = query @ model.query.weight.T + model.query.bias  # (B, T, H)
            k = m @ model.key.weight.T  # (B, S, H)
            scores = (torch.tanh(q[:, :, None] + k[:, None]) @ model.score_v.weight.T)[..., 0]
        expected = torch.softmax(scores.masked_fill(~mask[:, None], -math.inf), -1)
        torch.testing.assert_close(model.attend(query, memory), expected, rtol=0, atol=1e-6)


def test_lstm_without_onednn_bf16_runs_torchs_kernel_under_cpu_autocast(monkeypatch) -> None:
    """Where the CPU lacks oneDNN bf16, the LSTM's call under CPU autocast runs with oneDNN
    off, on the caller's input and state, leaving oneDNN's other settings alone (setting TF32
    warns on a CPU build); outside autocast oneDNN is left on."""
    seen: list[tuple[object, object, tuple[object, ...]]] = []
    original = nn.LSTM.forward

    def spy(self: nn.LSTM, x: torch.Tensor, hx: object = None) -> object:
        c = torch._C
        seen.append((x, hx, (c._get_mkldnn_enabled(), c._get_mkldnn_deterministic(),
                             c._get_fp32_precision_getter("mkldnn", "all"))))
        return original(self, x, hx)

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    monkeypatch.setattr(nn.LSTM, "forward", spy)
    lstm = LSTM(4, 6, batch_first=True)
    x, hx = torch.randn(1, 3, 4), (torch.randn(1, 1, 6), torch.randn(1, 1, 6))
    with torch.backends.mkldnn.flags(enabled=True, deterministic=True, allow_tf32=None,
                                     fp32_precision="bf16"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lstm(x, hx)
        lstm(x, hx)
    (x1, hx1, inside), (_, _, outside) = seen
    assert x1 is x and hx1 is hx
    assert inside == (False, True, "bf16") and outside == (True, True, "bf16")


# -- Transformer -------------------------------------------------------------------------------


def test_sinusoidal_positions_are_vaswanis_formula() -> None:
    """PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d))."""
    d, positions = 6, [0, 1, 2, 7]
    expected = torch.tensor([[f(p / 10000 ** (2 * (j // 2) / d)) for j, f in
                              zip(range(d), [math.sin, math.cos] * (d // 2))]
                             for p in positions])
    got = sinusoidal_positions(torch.tensor(positions), d)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_sinusoidal_positions_are_built_on_the_positions_device() -> None:
    assert sinusoidal_positions(torch.arange(4, device="meta"), 6).device.type == "meta"


def test_feed_forward_is_linear_relu_dropout_on_the_hidden_units_linear() -> None:
    ff = feed_forward(4, 8, 0.5).train()
    lin1, lin2 = ff[0], ff[-1]
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(5)
    got = ff(x)
    torch.manual_seed(5)
    hidden = functional.dropout(torch.relu(x @ lin1.weight.T + lin1.bias), 0.5, training=True)
    torch.testing.assert_close(got, hidden @ lin2.weight.T + lin2.bias, rtol=0, atol=1e-6)


def test_embeddings_start_normal_with_std_inverse_sqrt_d_and_a_zero_pad_row() -> None:
    torch.manual_seed(0)
    model = Transformer(TransformerShape(64, 64, 64, 4, 0, 0, 32, 0.0, True, "sinusoidal", False,
                                         8, PAD))
    for table in (model.src_embed.weight, model.tgt_embed.weight):
        assert not table[PAD].any()
        rest = table[1:].detach()
        assert abs(float(rest.mean())) < 0.02 and 0.115 < float(rest.std()) < 0.135


def layer_norm(x: torch.Tensor, ln: nn.LayerNorm) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def attention(att: nn.Module, xq: torch.Tensor, xkv: torch.Tensor, allowed: torch.Tensor,
              heads: int) -> torch.Tensor:
    """Vaswani's multi-head attention by hand; allowed (B, T, S) bool."""
    b, t, d = xq.shape
    dh = d // heads

    def split(y: torch.Tensor) -> torch.Tensor:
        return y.view(b, y.shape[1], heads, dh).transpose(1, 2)  # (B, H, L, Dh)

    q = split(xq @ att.q.weight.T + att.q.bias)
    kv = xkv @ att.kv.weight.T + att.kv.bias
    k, v = split(kv[..., :d]), split(kv[..., d:])
    scores = (q @ k.transpose(-1, -2) / math.sqrt(dh)).masked_fill(~allowed[:, None], -math.inf)
    y = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, t, d)
    return y @ att.out.weight.T + att.out.bias


def block(x: torch.Tensor, f, residual: nn.Module, pre_ln: bool) -> torch.Tensor:
    """Pre-LN x + f(ln(x)) or post-LN ln(x + f(x))."""
    if pre_ln:
        return x + f(layer_norm(x, residual.norm))
    return layer_norm(x + f(x), residual.norm)


def ffn(ff: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ ff[0].weight.T + ff[0].bias) @ ff[3].weight.T + ff[3].bias


def reference_logits(model: Transformer, src: torch.Tensor, mask: torch.Tensor,
                     tgt: torch.Tensor) -> torch.Tensor:
    """The Transformer's teacher-forced logits recomputed with plain torch ops from its
    weights; the positions come from the formula (or the learned table's rows)."""
    s = model.shape
    d, heads = s.d_model, s.n_heads

    def embed(table: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        if s.positions == "learned":
            pos = model.pos.weight[:n]
        else:
            pos = torch.tensor([[(math.sin if j % 2 == 0 else math.cos)(
                p / 10000 ** (2 * (j // 2) / d)) for j in range(d)] for p in range(n)])
        return table.weight[tokens] * math.sqrt(d) + pos

    x = embed(model.src_embed, src)
    enc_allowed = mask[:, None, :].expand(-1, src.shape[1], -1)
    for layer in model.encoder:
        x = block(x, lambda h: attention(layer.attn, h, h, enc_allowed, heads),
                  layer.attn_residual, s.norm_first)
        x = block(x, lambda h: ffn(layer.ff, h), layer.ff_residual, s.norm_first)
    memory = layer_norm(x, model.enc_norm) if s.norm_first else x
    t = tgt.shape[1]
    y = embed(model.tgt_embed, tgt)
    causal = torch.ones(t, t, dtype=torch.bool).tril()[None].expand(tgt.shape[0], -1, -1)
    cross_allowed = mask[:, None, :].expand(-1, t, -1)
    for layer in model.decoder:
        y = block(y, lambda h: attention(layer.self_attn, h, h, causal, heads),
                  layer.self_attn_residual, s.norm_first)
        y = block(y, lambda h: attention(layer.cross_attn, h, memory, cross_allowed, heads),
                  layer.cross_attn_residual, s.norm_first)
        y = block(y, lambda h: ffn(layer.ff, h), layer.ff_residual, s.norm_first)
    if s.norm_first:
        y = layer_norm(y, model.dec_norm)
    return y @ model.proj.weight.T  # the output projection has no bias


@pytest.mark.parametrize(("norm_first", "positions", "tie", "heads"), [
    (True, "sinusoidal", True, 2),
    (False, "learned", False, 4),
    (True, "learned", False, 4),
    (False, "sinusoidal", True, 2),
])
def test_transformer_logits_equal_vaswanis_layers_recomputed_from_its_weights(
    norm_first: bool, positions: str, tie: bool, heads: int,
) -> None:
    """Pre-LN (Xiong et al., 2020: a final norm per stack) or post-LN (Vaswani), eval mode
    (dropout 0.1 off), teacher-forced and step-wise; LayerNorms given trained-like affines."""
    torch.manual_seed(0)
    model = Transformer(TransformerShape(V, V, 16, heads, 2, 2, 32, 0.1, norm_first, positions,
                                         tie, 16, PAD, "math")).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for ln in (m for m in model.modules() if isinstance(m, nn.LayerNorm)):
            ln.weight.copy_(torch.rand(ln.weight.shape, generator=g) + 0.5)
            ln.bias.copy_(torch.randn(ln.bias.shape, generator=g) * 0.3)
        src, mask = pad_batch([[4, 5, 6, 7, 8], [9, 4, 5]], PAD)
        tgt = torch.tensor([[2, 6, 7, 8], [2, 10, 11, 5]])
        expected = reference_logits(model, src, mask, tgt)
        torch.testing.assert_close(model(src, mask, tgt), expected, rtol=0, atol=2e-5)
        memory = model.encode(src, mask)
        state = model.start(memory)
        for i in range(tgt.shape[1]):
            logits, state = model.step(tgt[:, i], memory, state)
            torch.testing.assert_close(logits, expected[:, i], rtol=0, atol=2e-5)
