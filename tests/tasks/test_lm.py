"""The lm task: documents, parallel streams for truncated BPTT, and the carried state."""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
import torch

from seqcore.config import ConfigError, config_from_dict
from seqcore.contract import IGNORE_INDEX, SpecialIds
from seqcore.data.records import Reject
from seqcore.metrics.bootstrap import Resampling
from seqcore.models.rnnlm import RNNLM, reset_state
from seqcore.tasks import task_checked
from seqcore.tasks.lm.documents import (CharVocab, Document, cmudict_documents, read_corpus,
                                        read_documents, split_documents)
from seqcore.tasks.lm.evaluate import interval_metrics, report_markdown, signed_result
from seqcore.tasks.lm.feed import LMFeed, StreamNLL, lm_nll, segment_loss, segment_rows, stream_nll
from seqcore.tasks.lm.setup import lm_report, lm_setup
from seqcore.tasks.lm.streams import Segment, StreamBatcher, StreamState
from seqcore.training.distributed import World
from tests.factories import (
    IDS, document_nll, dropout_modes, smoothed_token_losses, tiny_lm, train_setup, written)

SPECIAL = (IDS.pad, IDS.bos, IDS.eos)
META = torch.device("meta")  # a device without storage, on any machine
TWO_DOCS = [[4, 5, 6, 7, 8, 9] * 3, [9, 8, 7, 6, 5, 4] * 2]


def _feed(docs: list[list[int]], norm: str = "token-mean", streams: int = 1, bptt: int = 4,
          seed: int = 0, world: World = World(), device: torch.device = torch.device("cpu"),
          ids: SpecialIds = IDS) -> LMFeed:
    return LMFeed((docs, []), ids, norm, 0.0, streams, bptt, seed,  # type: ignore[arg-type]
                  world, device)


# -- documents -----------------------------------------------------------------------------------
def test_cmudict_becomes_one_document_per_initial_letter_in_dictionary_order(
        tmp_path: Path) -> None:
    raw = written(tmp_path / "cmudict.dict", ";;; comment\nabc AE1 B K\nable EY1 B AH0 L\n"
                  "be B IY1 # note\nabe(2) EY1 B\nzoo Z UW1\n")
    assert cmudict_documents(raw) == [
        Document("a", "abc AE1 B K\nable EY1 B AH0 L\nabe(2) EY1 B"),
        Document("b", "be B IY1"), Document("z", "zoo Z UW1")]


def test_documents_are_files_of_a_folder_or_blank_line_separated(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "2.txt").write_text("second")
    (tmp_path / "d" / "1.txt").write_text("first")
    assert [d.text for d in read_documents(tmp_path / "d")] == ["first", "second"]
    f = written(tmp_path / "t.txt", "a b\nc\n\n\nd\n  \ne f\n")
    assert [d.text for d in read_documents(f)] == ["a b\nc", "d", "e f"]


def test_documents_are_named_after_their_file_or_their_paragraph_number(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.txt").write_text("one\ntwo\n")
    (tmp_path / "d" / "a.txt").write_text("x\n")
    folder = read_corpus(tmp_path / "d", "text", "skip").documents
    assert folder == [Document("a.txt", "x"), Document("b.txt", "one\ntwo")]
    f = written(tmp_path / "t.txt", "p q\nr\n\ns\n")
    assert read_corpus(f, "text", "skip").documents == [Document("t.txt#0", "p q\nr"),
                                                        Document("t.txt#1", "s")]


def test_a_line_that_is_not_utf8_is_rejected_under_the_file_s_label_with_its_bytes_escaped(
        tmp_path: Path) -> None:
    f = written(tmp_path / "t.txt", b"good\nab\xff\n")
    # read_lines shows undecodable bytes with backslash escapes: b"ab\xff" -> "ab\\xff"
    assert read_corpus(f, "text", "skip").rejects == [
        Reject(str(f), 2, "invalid-utf8", "ab\\xff", "dropped")]
    labelled = read_corpus(f, "text", "skip", label="raw/t.txt")
    assert labelled.rejects == [Reject("raw/t.txt", 2, "invalid-utf8", "ab\\xff", "dropped")]
    assert labelled.documents == [Document("t.txt#0", "good")]


def test_only_cmudict_entries_count_as_rows_and_comments_end_at_the_first_hash(
        tmp_path: Path) -> None:
    raw = tmp_path / "cmudict.dict"
    # A comment line (two '#'), an entry with two '#', a blank line, then two more entries:
    # with max_rows 2 the rows are "abc" and "be"; the comment and blank lines do not count.
    raw.write_text("# note # twice\nabc AE1 B K # a # b\n   \nbe B IY1\ncat K AE1 T\n")
    corpus = read_corpus(raw, "cmudict", "skip", max_rows=2)
    assert corpus.rows == 2
    assert corpus.documents == [Document("a", "abc AE1 B K"), Document("b", "be B IY1")]


def test_split_holds_out_the_tail_of_every_document() -> None:
    train, dev, test = split_documents([Document("a", "0123456789")], 0.2, 0.1)
    assert (train[0].text, dev[0].text, test[0].text) == ("0123456", "78", "9")


def test_a_split_part_too_short_to_hold_a_character_is_left_out_and_names_are_kept() -> None:
    # n = 1: a = 1 - round(0.2) = 1, b = 1 - round(0.1) = 1, so dev and test are empty
    assert split_documents([Document("a", "x")], 0.1, 0.1) == ([Document("a", "x")], [], [])
    # n = 10: train 0..7, dev 7..9, test 9..10
    assert split_documents([Document("w", "0123456789")], 0.2, 0.1) == (
        [Document("w", "0123456")], [Document("w", "78")], [Document("w", "9")])


def test_char_vocab_pins_special_ids_and_maps_unseen_chars_to_unk() -> None:
    v = CharVocab.build([Document("a", "ba")], IDS)
    assert v.encode("abz") == [4, 5, IDS.unk] and v.size == 6


def test_a_char_vocabulary_refuses_special_ids_other_than_0_to_3_and_says_so() -> None:
    with pytest.raises(ValueError, match=r"^special ids must be 0\.\.3 for a char vocabulary"):
        CharVocab(["a"], SpecialIds(pad=0, unk=1, bos=2, eos=4))


def test_the_vocabulary_hash_is_sha256_of_its_chars_and_ids_as_utf8_json() -> None:
    # written by hand: json with ", " and ": " separators, non-ASCII kept as UTF-8
    blob = '{"chars": ["a", "é"], "ids": [0, 1, 2, 3]}'
    assert CharVocab(["é", "a", "a"], IDS).sha256() == hashlib.sha256(blob.encode()).hexdigest()
    assert CharVocab(["a"], IDS).sha256() != CharVocab(["b"], IDS).sha256()
    assert CharVocab(["a"], IDS).sha256() != CharVocab(
        ["a"], SpecialIds(pad=1, unk=0, bos=2, eos=3)).sha256()


# -- streams -------------------------------------------------------------------------------------
def slot_rows(batcher: StreamBatcher, n: int) -> list[Segment]:
    return [s for s in (batcher.next() for _ in range(n)) if s is not None]


def test_streams_read_each_document_once_with_a_reset_at_its_start() -> None:
    b = StreamBatcher([[4, 5, 6, 7, 8], [9, 10], [11]], 2, 3, 0, False, SPECIAL)
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
    assert all(torch.equal(x.inputs, y.inputs) and torch.equal(x.reset, y.reset)
               for x, y in zip(slot_rows(b, 9), expected))
    assert a.state.epoch >= 1 and a.state == b.state
    labels = sum(int((s.labels >= 0).sum()) for s in slot_rows(StreamBatcher(
        docs, 2, 2, 3, False, SPECIAL), 20))
    assert labels == sum(len(d) + 1 for d in docs)  # every token and each EOS, once


def test_streams_deal_every_document_once_per_epoch_in_the_epoch_s_seeded_order() -> None:
    docs = [[4], [5], [6]]
    streams = StreamBatcher(docs, 1, 8, seed=2, cycle=True, ids=(0, 2, 3))
    assert streams.state.slots == ((-1, 0),)  # an empty slot before the first segment
    dealt = []
    for _ in range(9):
        streams.next()
        dealt.append((streams.state.epoch, streams.owners()[0]))
    assert dealt == [(e, d) for e in range(3) for d in torch.randperm(
        3, generator=torch.Generator().manual_seed(2 * 1_000_003 + e)).tolist()]
    once = StreamBatcher(docs, 2, 8, seed=2, cycle=False, ids=(0, 2, 3))
    assert [once.next() is None for _ in range(3)] == [False, False, True]
    with pytest.raises(ValueError, match="^no documents$"):
        StreamBatcher([], 1, 8, seed=2, cycle=True, ids=(0, 2, 3))
    with pytest.raises(ValueError, match="^1 stream slots stored, 2 configured$"):
        once.load(StreamState(slots=((-1, 0),)))


def test_a_one_position_segment_reads_bos_and_predicts_the_first_token() -> None:
    first = StreamBatcher([[7, 8]], 1, 1, seed=0, cycle=False, ids=(0, 2, 3)).next()
    assert first.inputs.tolist() == [[2]] and first.labels.tolist() == [[7]]


def test_a_slot_left_without_a_document_is_owned_by_minus_one() -> None:
    b = StreamBatcher([[5, 6]], 2, 4, 0, False, SPECIAL)
    assert b.next() is not None
    assert (b.owners(), b.state.slots) == ([0, -1], ((0, 4), (-1, 4)))


# -- truncated BPTT ------------------------------------------------------------------------------
def test_gradient_stops_at_the_segment_boundary_while_the_value_carries_over() -> None:
    m = tiny_lm("lstm", embed_dim=6)
    feed = _feed([[4, 5, 4, 5, 6, 7, 6, 7]])
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
    h, c = reset_state((torch.ones(1, 3, 2), torch.full((1, 3, 2), 2.0)),
                       torch.tensor([False, True, False]))
    assert h[0, :, 0].tolist() == [1, 0, 1] and c[0, :, 0].tolist() == [2, 0, 2]


def test_a_new_document_in_a_slot_starts_from_the_zero_state() -> None:
    m = tiny_lm(embed_dim=6)
    seg = Segment(torch.tensor([[2, 4, 5]]), torch.tensor([[4, 5, 3]]), torch.tensor([True]))
    from_stale, _ = segment_loss(m, seg, (torch.randn(1, 1, 8),), "sum", 0.0, ())
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
        carry: bool) -> None:
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


# -- the feed ------------------------------------------------------------------------------------
@pytest.mark.parametrize("asked,used", [("sum", "sum"), ("token-mean", "token-mean"),
                                        ("sequence-mean", "token-mean")])
def test_a_stream_feed_normalises_by_tokens_unless_the_sum_is_asked_for(asked: str,
                                                                        used: str) -> None:
    # the loop divides by the token count unless feed.norm is "sum"; the signature shows it
    assert _feed([[4, 5]], norm=asked).norm == used


def test_the_segment_loss_uses_the_normalisation_it_is_given() -> None:
    m = tiny_lm("gru")
    seg = Segment(torch.tensor([[2, 4, 5], [2, 6, 0]]),
                  torch.tensor([[4, 5, 3], [6, 3, IGNORE_INDEX]]), torch.tensor([True, True]))
    with torch.no_grad():
        out, _ = segment_loss(m, seg, m.initial_state(2), "sequence-mean", 0.0, ())
        logits, _ = m(seg.inputs, m.initial_state(2))
    logp = logits.log_softmax(-1)
    row0 = -(logp[0, 0, 4] + logp[0, 1, 5] + logp[0, 2, 3]) / 3
    row1 = -(logp[1, 0, 6] + logp[1, 1, 3]) / 2
    assert float(out.total) == pytest.approx(float(row0 + row1), rel=1e-6)


def test_lm_feed_minimises_the_smoothed_loss_without_pad_or_bos_mass() -> None:
    model = tiny_lm("gru", vocab=10)
    feed = LMFeed((TWO_DOCS, TWO_DOCS), IDS, "token-mean", 0.2, 2, 4, 0)
    seg = feed.draw()
    got = feed.loss(model, seg, 0.0, torch.Generator())
    logits, _ = model(seg.inputs, model.initial_state(2))  # (B, K, V), first segment
    expected = torch.cat(smoothed_token_losses(torch.log_softmax(logits, -1), seg.labels, 0.2))
    assert float(got.total.detach()) == pytest.approx(float(expected.sum().detach()), rel=1e-5)


def test_rank_r_of_w_trains_the_slots_r_r_plus_w_of_the_global_segment() -> None:
    docs = [[4, 5, 6], [7, 8], [9, 10, 11, 12], [13], [5, 5]]
    feed = _feed(docs, streams=4, bptt=3, seed=7, world=World(rank=1, size=2))
    assert feed.local_streams == 2
    whole = StreamBatcher(docs, 4, 3, 7, True, SPECIAL).next()
    mine = feed.draw()
    assert torch.equal(mine.inputs, whole.inputs[[1, 3]])
    assert torch.equal(mine.labels, whole.labels[[1, 3]])
    assert torch.equal(mine.reset, whole.reset[[1, 3]])


def test_the_feed_puts_segments_and_the_restored_state_on_its_device() -> None:
    feed = _feed([[4, 5, 6]], device=META)
    seg = feed.draw()
    assert [(t.device, t.dtype) for t in (seg.inputs, seg.labels, seg.reset)] == [
        (META, torch.long), (META, torch.long), (META, torch.bool)]
    whole = Segment(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long),
                    torch.ones(2, dtype=torch.bool))
    part = segment_rows(whole, slice(1, None), META)
    assert [(t.device, tuple(t.shape)) for t in (part.inputs, part.labels, part.reset)] == [
        (META, (1, 3)), (META, (1, 3)), (META, (1,))]
    state = _feed([[4, 5, 6]]).state_dict()
    state["carried"] = [torch.zeros(1, 1, 8)]
    feed.load_state_dict(state)
    assert feed.carried is not None and feed.carried[0].device == META


def test_the_token_count_includes_eos_labels_when_eos_is_id_0() -> None:
    # params accept any distinct ids 0..3 for a char vocabulary, e.g. EOS = 0, PAD = 3
    feed = _feed([[4, 5]], bptt=4, ids=SpecialIds(pad=3, unk=1, bos=2, eos=0))
    seg = feed.draw()
    assert seg.labels.tolist() == [[4, 5, 0, IGNORE_INDEX]]
    assert feed.tokens(seg) == feed.count(seg) == 3  # two characters and the EOS


def test_a_fresh_feed_s_state_has_no_carried_state_and_loads_back() -> None:
    fresh = _feed([[4, 5, 6]], seed=3).state_dict()
    assert fresh == {"epoch": 0, "next_doc": 0, "slots": [[-1, 0]], "seed": 3, "carried": None}
    other = _feed([[4, 5, 6]], seed=3)
    other.carried = (torch.ones(1, 1, 8),)
    other.load_state_dict(fresh)
    assert other.carried is None


def test_a_feed_refuses_a_state_of_another_stream_seed_and_names_both() -> None:
    state = _feed([[4, 5, 6]], seed=5).state_dict()
    with pytest.raises(ValueError, match="^stream seed 5 != 3$"):
        _feed([[4, 5, 6]], seed=3).load_state_dict(state)


def test_the_dev_nll_of_training_reads_each_document_with_the_carried_state() -> None:
    # one dev document longer than bptt on one stream: its NLL is the whole document read
    # from one state (document_nll without a window), not restarted at each segment
    model = tiny_lm("gru")
    doc = [4, 5, 6, 7, 8, 9, 4, 5, 6, 7]
    nll, tokens = LMFeed(([doc], [doc]), IDS, "token-mean", 0.0, streams=1, bptt=3,
                         seed=0).dev_nll(model)
    assert tokens == len(doc) + 1  # every token and EOS
    assert nll == pytest.approx(document_nll(model, doc, None), rel=1e-5)
    assert abs(nll - document_nll(model, doc, 3)) > 1e-3  # reset every 3 positions differs


def test_lm_dev_nll_runs_with_dropout_off() -> None:
    # eval mode in every no-gradient pass behind a reported number
    model = tiny_lm("gru", vocab=10, layers=2, dropout=0.5).train()
    feed = LMFeed((TWO_DOCS, TWO_DOCS), IDS, "token-mean", 0.0, 2, 4, 0)
    seen = dropout_modes(model)
    first = feed.dev_nll(model)
    assert seen and not any(seen)
    assert model.training
    assert feed.dev_nll(model) == first  # dropout off: the same number every time


# -- the lm task end to end in the library -------------------------------------------------------
def test_lm_setup_trains_and_reports_carried_and_reset_perplexity(tmp_path: Path) -> None:
    cfg = config_from_dict({
        "task": "lm", "data": {"dev_fraction": 0.2, "test_fraction": 0.2},
        "model": {"family": "gru", "rnn": {"embed_dim": 4, "hidden": 8, "dec_layers": 1}},
        "train": {"batch_size": 2, "max_steps": 3, "bptt_len": 5, "eval_every": 3,
                  "schedule": "constant", "lr": 0.01, "warmup_steps": 0, "threads": 1}})
    docs = [Document(c, f"{c}x{c}y {c}z\n" * 8) for c in "abc"]
    setup = lm_setup(cfg, docs)
    state = train_setup(setup, cfg.train, tmp_path)
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
    assert not any(k.startswith("train.dev_decode") for k in setup.contract)
    with pytest.raises(ValueError, match="number of parallel streams"):
        lm_setup(cfg, docs[:1])


def test_lm_task_needs_a_recurrent_model_and_no_scheduled_sampling() -> None:
    # the task's own rules, applied after loading (seqcore.tasks.task_checked, issue 50); nothing
    # to decode: no selection by dev WER or PER (issue 52), no dev-decoding key in the contract
    with pytest.raises(ConfigError, match="gru or lstm"):
        task_checked(config_from_dict({"task": "lm"}), "params")
    for train, says in (({"ss_schedule": "linear"}, "ss_schedule = 'linear': must be off"),
                        ({"mrt_steps": 3}, "mrt_steps = 3: must be 0 when task is lm"),
                        ({"select": "best_dev_wer"},
                         "select = 'best_dev_wer': must be best_dev or last")):
        with pytest.raises(ConfigError, match=says):
            task_checked(config_from_dict({"task": "lm", "model": {"family": "gru"},
                                           "train": train}), "params")


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
    contract, gru = "task:lm|data:abc|fmt:2|version:1", {"task": "lm", "model": {"family": "gru"}}
    assert signed_result(config_from_dict(gru), contract, {"k": 1}, "f" * 64).endswith(
        "|model:ffffffffffff|decode:none|ci:95|bs:1000|rs:12345|by:document|fmt:2|version:1")
    off = config_from_dict(gru | {"evaluate": {"bootstrap_samples": 0}})
    assert signed_result(off, contract, {"k": 1}, "f" * 64).endswith(
        "|model:ffffffffffff|decode:none|fmt:2|version:1")
