"""The GRU/LSTM encoder-decoder (seqcore/models/rnn.py): shapes, layout, dropout, bridge and
attention."""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

from seqcore.contract import pad_batch
from seqcore.models.rnn import LSTM, RNNSeq2Seq, RNNShape
from tests.factories import IDS, PAD, tiny_model

V = 12


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
def test_rnn_shape_refusals_name_the_valid_choices(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rnn_shape(**{field: value})


def luong_parameters(cell: str, attention: str, e: int = 6, h: int = 8, layers: int = 1
                     ) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of the documented layout, written out by hand."""
    gates = 3 if cell == "gru" else 4
    out = {"src_embed.weight": (V, e), "tgt_embed.weight": (V, e), "bridge_h.weight": (h, h),
           "bridge_h.bias": (h,), "combine.weight": (h, 2 * h), "combine.bias": (h,),
           "proj.weight": (V, h), "proj.bias": (V,)}
    for layer in range(layers):
        width = e if layer == 0 else h  # the first layer reads embeddings
        # the encoder's two directions of h / 2 units each, then the decoder's h units
        for rnn, units, sfx in (("encoder", h // 2, ""), ("encoder", h // 2, "_reverse"),
                                ("decoder", h, "")):
            out |= {f"{rnn}.weight_ih_l{layer}{sfx}": (gates * units, width),
                    f"{rnn}.weight_hh_l{layer}{sfx}": (gates * units, units),
                    f"{rnn}.bias_ih_l{layer}{sfx}": (gates * units,),
                    f"{rnn}.bias_hh_l{layer}{sfx}": (gates * units,)}
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
    with warnings.catch_warnings(action="error"):
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
    """Without oneDNN bf16, the LSTM under CPU autocast runs with oneDNN off (other oneDNN
    settings untouched: setting TF32 warns on CPU) on the caller's tensors; outside, it is on."""
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
        with warnings.catch_warnings(action="error"), torch.autocast("cpu", dtype=torch.bfloat16):
            lstm(x, hx)
        lstm(x, hx)
    (x1, hx1, inside), (_, _, outside) = seen
    assert x1 is x and hx1 is hx
    assert inside == (False, True, "bf16") and outside == (True, True, "bf16")


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_rnn_encoder_gives_an_empty_source_no_state(cell: str) -> None:
    # Packing needs length >= 1, so an empty source runs one PAD step inside the encoder;
    # the rule (PAD holds no state) must still hold where the decoder reads the states.
    model = tiny_model(cell, embed_dim=8, hidden=8, enc_layers=1, dec_layers=1)
    src, mask = pad_batch([[], [4, 5, 6]], IDS.pad)
    memory = model.encode(src, mask)
    assert (memory.states[0] == 0).all() and (memory.states[1] != 0).any()
