"""Model rules: cross-attention masks source PAD (4), RNN padding invariance (5), eval() is
deterministic (10), cached decoding matches the teacher-forced pass, and every family trains."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from seqcore.artifacts.base import ArtifactError
from seqcore.artifacts.model_file import ModelFile, ModelInfo, ModelMeta
from seqcore.blobs import load_blob, save_blob
from seqcore.contract import SpecialIds, pad_batch
from seqcore.models import build_model
from seqcore.models.base import EncoderDecoder
from seqcore.models.rnn import RNNSeq2Seq
from tests.factories import FAMILIES, PAD, tiny_config, tiny_model

VOCAB = 12


def logits_of(model: EncoderDecoder, srcs: list[list[int]], tgt: list[int]) -> torch.Tensor:
    """Teacher-forced logits (B, T, V) of each source with the same target input."""
    src, mask = pad_batch(srcs, PAD)
    tgt_in = torch.tensor([tgt] * len(srcs))
    return model(src, mask, tgt_in)


#: Every family, the RNNs with each attention score.
SCORED = [("transformer", "general")] + [
    (cell, score) for cell in ("gru", "lstm") for score in ("dot", "general", "additive")]


@pytest.mark.parametrize(("family", "attention"), SCORED)
def test_cross_attention_masks_source_pad(family: str, attention: str) -> None:
    model = tiny_model(family, attention=attention)
    src, tgt = [4, 5, 6], [2, 7, 8, 9]
    alone = logits_of(model, [src], tgt)[0]
    padded = model(torch.tensor([src + [PAD] * 50]), torch.arange(53)[None] < 3,
                   torch.tensor([tgt]))[0]
    batched = logits_of(model, [[4, 5, 6, 7, 8, 9, 10], src, [11, 10, 9, 8, 7]], tgt)[1]
    torch.testing.assert_close(padded, alone, rtol=0, atol=1e-5)
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-5)
    alone = logits_of(model, [[4, 5]], [2, 7, 8])[0]  # a short source beside a longer one
    batched = logits_of(model, [[9, 8, 7, 6, 5, 4], [4, 5]], [2, 7, 8])[1]
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ("gru", "lstm"))
def test_rnn_padding_invariance_of_outputs_and_final_state(family: str) -> None:
    model = tiny_model(family)
    assert isinstance(model, RNNSeq2Seq)
    src, mask = pad_batch([[4, 5, 6]], PAD)
    alone = model.encode(src, mask)
    src, mask = pad_batch([[7, 8, 9, 10, 11, 4, 5], [4, 5, 6], [8, 9, 10, 11]], PAD)
    batched = model.encode(src, mask).reorder(torch.tensor([1]))
    torch.testing.assert_close(batched.states[:, :3], alone.states, rtol=0, atol=1e-6)
    assert (batched.states[:, 3:] == 0).all()  # PAD positions hold no state
    torch.testing.assert_close(batched.init.h, alone.init.h, rtol=0, atol=1e-6)
    if family == "lstm":
        torch.testing.assert_close(batched.init.c, alone.init.c, rtol=0, atol=1e-6)
    # The decoder's final state after the same target is unchanged too.
    states = []
    for mem in (alone, batched):
        st = model.start(mem)
        for tok in (2, 7, 8):
            _, st = model.step(torch.tensor([tok]), mem, st)
        states.append(st.h)
    torch.testing.assert_close(states[1], states[0], rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_eval_is_deterministic(family: str) -> None:
    model = tiny_model(family, dropout=0.5)
    src, mask = pad_batch([[4, 5, 6], [7, 8]], PAD)
    tgt = torch.tensor([[2, 7, 8], [2, 9, PAD]])
    assert torch.equal(model(src, mask, tgt), model(src, mask, tgt))
    model.train()  # the same model with dropout live does vary: the check above can fail
    assert not torch.equal(model(src, mask, tgt), model(src, mask, tgt))


@pytest.mark.parametrize(("family", "attention"), SCORED)
def test_cached_decoding_matches_full_recompute(family: str, attention: str) -> None:
    model = tiny_model(family, attention=attention)
    src, mask = pad_batch([[4, 5, 6], [7], [8, 9, 10, 11, 4]], PAD)
    tgt = torch.tensor([[2, 7, 8, 9], [2, 10, 11, PAD], [2, 4, PAD, PAD]])
    memory = model.encode(src, mask)
    full = model.decode(tgt, memory)
    state, steps = model.start(memory), []
    order = torch.tensor([2, 0, 1])  # beam search reorders states: reorder twice = identity
    inverse = torch.argsort(order)
    for t in range(tgt.shape[1]):
        state = state.reorder(order).reorder(inverse)
        logits, state = model.step(tgt[:, t], memory, state)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=0, atol=1e-5)


def test_a_model_file_from_another_seqcore_is_refused_in_one_line_naming_it(
        tmp_path: Path, ids: SpecialIds) -> None:
    """Weights under old names (r1/r2/r3 before issue 11), a tensor of another shape, or a meta
    field no longer written (environment, before issue 34): one line, no half-loaded model."""
    model = tiny_model("transformer")
    info = ModelInfo(tiny_config("transformer"), VOCAB, VOCAB, ids.pad, 64)
    meta = ModelMeta("sig", 20, "last", 20, 0, None, {})
    renamed = {k.replace("ff_residual", "r3"): v for k, v in model.state_dict().items()}
    ModelFile(renamed, meta, info).save(tmp_path / "old-names.pt")
    with pytest.raises(ArtifactError, match=r"old-names\.pt: its weights do not fit .*"
                       r"8 weight\(s\) missing \(encoder\.0\.ff_residual.*"
                       r"8 unexpected \(encoder\.0\.r3"):
        ModelFile.load(tmp_path / "old-names.pt").build()
    reshaped = model.state_dict() | {"src_embed.weight": torch.zeros(3, 2)}
    assert "src_embed.weight" in model.state_dict()
    ModelFile(reshaped, meta, info).save(tmp_path / "old-shape.pt")
    with pytest.raises(ArtifactError, match=r"old-shape\.pt: its weights do not fit .*size"):
        ModelFile.load(tmp_path / "old-shape.pt").build()
    ModelFile(model.state_dict(), meta, info).save(tmp_path / "env.pt")
    payload = load_blob(tmp_path / "env.pt")
    payload["meta"]["environment"] = {"platform": "x"}
    save_blob(tmp_path / "env.pt", payload)
    with pytest.raises(ArtifactError, match=r"env\.pt: not a model file this code reads .*"
                       "environment"):
        ModelFile.load(tmp_path / "env.pt")


SRC, MASK = pad_batch([[4, 5, 6, 7], [4, 5]], PAD)
TGT = torch.tensor([[2, 4, 5], [2, 6, 7]])


def attention_ops(model: EncoderDecoder) -> set[str]:
    """The attention kernels (aten op names) one forward and backward pass of ``model`` runs."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(SRC, MASK, TGT).sum().backward()
    return {e.key for e in prof.key_averages() if "attention" in e.key or e.key == "aten::bmm"
            or e.key == "aten::matmul"}


@pytest.mark.parametrize("kernel", ["auto", "math"])
def test_attention_kernel_picks_the_fused_or_the_reference_computation(kernel: str) -> None:
    """``model.transformer.attention_kernel``: auto runs PyTorch's fused CPU kernel, math runs
    QK^T / softmax / AV as plain matmuls; the two agree to rounding."""
    cfg = tiny_config("transformer")
    cfg = replace(cfg, transformer=replace(cfg.transformer, attention_kernel=kernel))
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB, VOCAB, PAD, 64)
    ops = attention_ops(model)
    fused = any("flash_attention" in op for op in ops)
    assert fused == (kernel == "auto"), ops
    assert ("aten::_scaled_dot_product_attention_math" in ops) == (kernel == "math"), ops
    reference = tiny_model("transformer")  # the same seed: the same weights, kernel auto
    torch.testing.assert_close(model.eval()(SRC, MASK, TGT), reference(SRC, MASK, TGT))
