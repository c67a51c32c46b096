"""The lm task: documents, parallel streams for truncated BPTT, and the carried state."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from seqcore.config import ConfigError, config_from_dict
from seqcore.contract import IGNORE_INDEX
from seqcore.metrics.bootstrap import Resampling
from seqcore.tasks.lm.documents import (
    CharVocab,
    Document,
    cmudict_documents,
    read_documents,
    split_documents,
)
from seqcore.tasks.lm.evaluate import interval_metrics, report_markdown, signed_result
from seqcore.tasks.lm.feed import LMFeed, StreamNLL, lm_nll, segment_loss, stream_nll
from seqcore.models.rnnlm import RNNLM, reset_state
from seqcore.tasks.lm.setup import lm_report, lm_setup
from seqcore.tasks.lm.streams import Segment, StreamBatcher
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.loop import TrainLoop
from seqcore.tasks import task_checked
from tests.factories import IDS, document_nll, tiny_lm

SPECIAL = (IDS.pad, IDS.bos, IDS.eos)


# -- documents -----------------------------------------------------------------------------------


def test_cmudict_becomes_one_document_per_initial_letter_in_dictionary_order(
    tmp_path: Path,
) -> None:
    raw = tmp_path / "cmudict.dict"
    raw.write_text(";;; comment\nabc AE1 B K\nable EY1 B AH0 L\nbe B IY1 # note\n"
                   "abe(2) EY1 B\nzoo Z UW1\n")
    docs = cmudict_documents(raw)
    assert docs == [Document("a", "abc AE1 B K\nable EY1 B AH0 L\nabe(2) EY1 B"),
                    Document("b", "be B IY1"), Document("z", "zoo Z UW1")]


def test_documents_are_files_of_a_folder_or_blank_line_separated(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "2.txt").write_text("second")
    (tmp_path / "d" / "1.txt").write_text("first")
    assert [d.text for d in read_documents(tmp_path / "d")] == ["first", "second"]
    f = tmp_path / "t.txt"
    f.write_text("a b\nc\n\n\nd\n  \ne f\n")
    assert [d.text for d in read_documents(f)] == ["a b\nc", "d", "e f"]


def test_split_holds_out_the_tail_of_every_document() -> None:
    train, dev, test = split_documents([Document("a", "0123456789")], 0.2, 0.1)
    assert (train[0].text, dev[0].text, test[0].text) == ("0123456", "78", "9")


def test_char_vocab_pins_special_ids_and_maps_unseen_chars_to_unk() -> None:
    v = CharVocab.build([Document("a", "ba")], IDS)
    assert v.encode("abz") == [4, 5, IDS.unk] and v.size == 6


# -- streams -------------------------------------------------------------------------------------


def slot_rows(batcher: StreamBatcher, n: int) -> list[Segment]:
    return [s for s in (batcher.next() for _ in range(n)) if s is not None]


def test_streams_read_each_document_once_with_a_reset_at_its_start() -> None:
    docs = [[4, 5, 6, 7, 8], [9, 10], [11]]
    b = StreamBatcher(docs, 2, 3, 0, False, SPECIAL)
    segs = slot_rows(b, 10)
    assert b.next() is None
    # Slot 0: doc 0 as BOS 4 5 | 6 7 8 (labels 4 5 6 | 7 8 EOS), then doc 2; slot 1: doc 1.
    assert segs[0].inputs.tolist() == [[2, 4, 5], [2, 9, 10]]
    assert segs[0].labels.tolist() == [[4, 5, 6], [9, 10, 3]]
    assert segs[0].reset.tolist() == [True, True]
    assert segs[1].labels.tolist() == [[7, 8, 3], [11, 3, IGNORE_INDEX]]
    assert segs[1].reset.tolist() == [False, True]  # doc 2 took slot 1: its state is reset
    assert segs[1].inputs[1].tolist() == [2, 11, IDS.pad]
    assert len(segs) == 2


def test_cycling_streams_deal_every_document_each_epoch_and_resume_from_state() -> None:
    docs = [[4] * n for n in (3, 7, 2, 5)]
    a = StreamBatcher(docs, 2, 2, 3, True, SPECIAL)
    slot_rows(a, 5)
    saved = a.state
    expected = slot_rows(a, 9)
    b = StreamBatcher(docs, 2, 2, 3, True, SPECIAL)
    b.load(saved)
    got = slot_rows(b, 9)
    assert all(torch.equal(x.inputs, y.inputs) and torch.equal(x.reset, y.reset)
               for x, y in zip(got, expected))
    assert a.state.epoch >= 1 and a.state == b.state
    labels = sum(int((s.labels >= 0).sum()) for s in slot_rows(StreamBatcher(
        docs, 2, 2, 3, False, SPECIAL), 20))
    assert labels == sum(len(d) + 1 for d in docs)  # every token and each EOS, once


# -- truncated BPTT ------------------------------------------------------------------------------


def test_gradient_stops_at_the_segment_boundary_while_the_value_carries_over() -> None:
    m = tiny_lm("lstm", embed_dim=6)
    feed = LMFeed(([[4, 5, 4, 5, 6, 7, 6, 7]], []), IDS, "token-mean", 0.0, 1, 4, 0)
    first, second = feed.draw(), feed.draw()  # BOS 4 5 4 | 5 6 7 6
    feed.loss(m, first, 0.0, torch.Generator())
    carried = feed.carried
    assert carried is not None and not any(t.requires_grad for t in carried)
    m.zero_grad()
    feed.loss(m, Segment(torch.tensor([[6, 7, 6, 7]]), second.labels, second.reset), 0.0,
              torch.Generator()).total.backward()
    # Tokens 4, 5 and BOS only fed the first segment: they reach the second one only through
    # the carried state, which is detached, so their embedding rows get no gradient.
    assert m.embed.weight.grad[[2, 4, 5]].abs().sum() == 0
    assert m.embed.weight.grad[[6, 7]].abs().sum() > 0
    fresh, _ = segment_loss(m, second, m.initial_state(1), "sum", 0.0, ())
    carried_loss, _ = segment_loss(m, second, carried, "sum", 0.0, ())
    assert float(fresh.nll.detach()) != pytest.approx(float(carried_loss.nll.detach()))


def test_reset_zeroes_only_the_slots_that_start_a_new_document() -> None:
    state = (torch.ones(1, 3, 2), torch.full((1, 3, 2), 2.0))
    h, c = reset_state(state, torch.tensor([False, True, False]))
    assert h[0, :, 0].tolist() == [1, 0, 1] and c[0, :, 0].tolist() == [2, 0, 2]


def test_a_new_document_in_a_slot_starts_from_the_zero_state() -> None:
    m = tiny_lm(embed_dim=6)
    seg = Segment(torch.tensor([[2, 4, 5]]), torch.tensor([[4, 5, 3]]), torch.tensor([True]))
    stale = (torch.randn(1, 1, 8),)
    from_stale, _ = segment_loss(m, seg, stale, "sum", 0.0, ())
    from_zero, _ = segment_loss(m, seg, m.initial_state(1), "sum", 0.0, ())
    assert float(from_stale.nll.detach()) == float(from_zero.nll.detach())


def test_perplexity_with_carried_state_counts_the_same_tokens_as_with_resets() -> None:
    m = tiny_lm(embed_dim=6)
    docs = [[4, 5, 6] * 4, [7, 8] * 3]
    carried = lm_nll(m, docs, IDS, 2, 3, carry=True)
    reset = lm_nll(m, docs, IDS, 2, 3, carry=False)
    assert carried[1] == reset[1] == sum(len(d) + 1 for d in docs)
    assert carried[0] != pytest.approx(reset[0])
    one = lm_nll(m, docs, IDS, 1, 100, carry=False)  # one segment per document: no boundary
    assert one[0] == pytest.approx(lm_nll(m, docs, IDS, 1, 3, carry=True)[0], rel=1e-5)


def nll_before_issue_27(m: RNNLM, docs: list[list[int]], streams: int, bptt: int,
                        carry: bool) -> tuple[float, int]:
    """lm_nll as it was before the per-document sums: the NLL summed segment by segment."""
    b = StreamBatcher(docs, streams, bptt, 0, False, SPECIAL)
    state, total, count = m.initial_state(streams), 0.0, 0
    with torch.no_grad():
        while (seg := b.next()) is not None:
            if not carry:
                seg = Segment(seg.inputs, seg.labels, torch.ones_like(seg.reset))
            out, state = segment_loss(m, seg, state, "sum", 0.0, ())
            total += float(out.nll)
            count += out.tokens
    return total, count


@pytest.mark.parametrize("carry", [True, False], ids=["carried", "reset"])
def test_per_document_nll_adds_up_to_the_total_and_leaves_the_perplexity_unchanged(
    carry: bool,
) -> None:
    m = tiny_lm("lstm", embed_dim=6)
    docs = [[4, 5, 6] * 4, [7, 8] * 3, [9, 10, 11], [4, 11] * 5]  # 2 slots: 4 documents dealt
    s = stream_nll(m, docs, IDS, 2, 3, carry)
    # the point figure is summed exactly as before (same bytes), and lm_nll is that figure
    assert (s.total, s.tokens) == nll_before_issue_27(m, docs, 2, 3, carry)
    assert lm_nll(m, docs, IDS, 2, 3, carry) == (s.total, s.tokens)
    assert [t for _, t in s.documents] == [len(d) + 1 for d in docs]
    assert sum(n for n, _ in s.documents) == pytest.approx(s.total, rel=1e-6)
    # Known answer: each document alone, read whole (carried) or in windows of 3 positions
    # from the zero state (reset), whichever slot and segment it was dealt to.
    by_hand = [document_nll(m, d, None if carry else 3) for d in docs]
    assert [n for n, _ in s.documents] == pytest.approx(by_hand, rel=1e-5)
    assert stream_nll(m, [], IDS, 2, 3, carry) == StreamNLL(0.0, 0, ())  # an empty split


# -- the lm task end to end in the library -----------------------------------------------------


def test_lm_setup_trains_and_reports_carried_and_reset_perplexity(tmp_path: Path) -> None:
    cfg = config_from_dict({
        "task": "lm", "data": {"dev_fraction": 0.2, "test_fraction": 0.2},
        "model": {"family": "gru", "rnn": {"embed_dim": 4, "hidden": 8, "dec_layers": 1}},
        "train": {"batch_size": 2, "max_steps": 3, "bptt_len": 5, "eval_every": 3,
                  "schedule": "constant", "lr": 0.01, "warmup_steps": 0, "threads": 1}})
    docs = [Document(c, f"{c}x{c}y {c}z\n" * 8) for c in "abc"]
    setup = lm_setup(cfg, docs)
    trainer = TrainLoop(setup.model, cfg.train, setup.feed, CheckpointDir(tmp_path, 2),
                      setup.contract, setup.d_model)
    state = trainer.run(lambda entry, tokens_per_s: None)
    assert state.step == 3 and state.best_step == 3
    report = setup.report()["lm"]
    # Recomputed by hand from the model: each held-out document read as BOS text EOS, whole
    # (carried state) or in windows of bptt_len that each start from the zero state (reset).
    parts = split_documents(docs, 0.2, 0.2)
    vocab = CharVocab.build(parts[0], IDS)
    for name, split in (("dev", parts[1]), ("test", parts[2])):
        encoded = [vocab.encode(d.text) for d in split]
        tokens = sum(len(d) + 1 for d in encoded)
        assert report[f"{name}_tokens"] == tokens
        carried = sum(document_nll(setup.model, d, None) for d in encoded)
        reset = sum(document_nll(setup.model, d, 5) for d in encoded)
        assert report[f"{name}_ppl_carried"] == pytest.approx(math.exp(carried / tokens), rel=1e-5)
        assert report[f"{name}_ppl_reset_every_segment"] == pytest.approx(
            math.exp(reset / tokens), rel=1e-5)
        assert carried != pytest.approx(reset)  # the windows cut these documents
    # the report is the held-out NLL's, and each perplexity's document interval holds it
    held_out = setup.held_out()
    assert lm_report(held_out) == setup.report()
    interval = interval_metrics(held_out, Resampling(200, 1, 0.95))["interval"]
    assert set(interval) == {f"{split}_ppl_{mode}" for split in ("dev", "test")
                             for mode in ("carried", "reset_every_segment")}
    for key, bounds in interval.items():
        assert bounds["low"] <= report[key] <= bounds["high"], (key, bounds, report[key])
        assert bounds["low"] < bounds["high"]  # three different documents
    assert interval_metrics(held_out, Resampling(0, 1, 0.95)) == {}
    assert setup.contract["task"] == "lm" and "trunc:bptt-5" in setup.signature
    with pytest.raises(ValueError, match="number of parallel streams"):
        lm_setup(cfg, docs[:1])


def test_lm_task_needs_a_recurrent_model_and_no_scheduled_sampling() -> None:
    # the task's own rules: applied after loading (seqcore.tasks.task_checked, issue 50)
    with pytest.raises(ConfigError, match="gru or lstm"):
        task_checked(config_from_dict({"task": "lm"}), "params")
    with pytest.raises(ConfigError, match="ss_schedule = 'linear': must be off"):
        task_checked(config_from_dict({"task": "lm", "model": {"family": "gru"},
                                       "train": {"ss_schedule": "linear"}}), "params")


def test_the_lm_report_shows_each_perplexity_with_its_interval_and_the_resampling() -> None:
    lm = {"dev_ppl_carried": 5.0, "dev_tokens": 40}
    drawn = {"interval": {"dev_ppl_carried": {"low": 4.5, "high": 5.75}},
             "interval_signature": "ci:90|bs:500|rs:7|by:document"}
    text = report_markdown("task:lm", lm, drawn)
    assert "| metric | value | 90 % interval |" in text
    assert "| dev_ppl_carried | 5.0 | [4.5000, 5.7500] |" in text
    assert "| dev_tokens | 40 | - |" in text
    assert ("Intervals: 90 % percentile bootstrap, 500 resamples of the split's documents"
            in text and "seed 7 (`ci:90|bs:500|rs:7|by:document`)" in text)
    off = report_markdown("task:lm", lm, {})
    assert "Intervals" not in off and "| dev_ppl_carried | 5.0 | - |" in off


def test_the_lm_result_signature_carries_the_document_bootstrap_settings() -> None:
    contract = "task:lm|data:abc|fmt:2|version:1"
    cfg = config_from_dict({"task": "lm", "model": {"family": "gru"}})
    assert signed_result(cfg, contract, {"k": 1}, "f" * 64).endswith(
        "|model:ffffffffffff|decode:none|ci:95|bs:1000|rs:12345|by:document|fmt:2|version:1")
    off = config_from_dict({"task": "lm", "model": {"family": "gru"},
                            "evaluate": {"bootstrap_samples": 0}})
    assert signed_result(off, contract, {"k": 1}, "f" * 64).endswith(
        "|model:ffffffffffff|decode:none|fmt:2|version:1")


def test_the_dev_nll_of_training_reads_each_document_with_the_carried_state() -> None:
    # one dev document longer than bptt on one stream: its NLL is the whole document read
    # from one state (document_nll without a window), not restarted at each segment
    torch.manual_seed(0)
    model = tiny_lm("gru")
    doc = [4, 5, 6, 7, 8, 9, 4, 5, 6, 7]
    feed = LMFeed(([doc], [doc]), IDS, "token-mean", 0.0, streams=1, bptt=3, seed=0)
    nll, tokens = feed.dev_nll(model)
    assert tokens == len(doc) + 1  # every token and EOS
    assert nll == pytest.approx(document_nll(model, doc, None), rel=1e-5)
    assert abs(nll - document_nll(model, doc, 3)) > 1e-3  # reset every 3 positions differs
