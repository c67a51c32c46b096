"""seqcore.metrics functions against hand-computed cases."""
from __future__ import annotations

import math

import pytest

from seqcore.artifacts.predictions import PredictionRow
from seqcore.g2p import is_illegal_phoneme
from seqcore.metrics.edit import aligned_matches, levenshtein
from seqcore.metrics.evaluation import bucket_name
from seqcore.metrics.failures import (
    FailureRules, failure_kinds, failure_modes, has_loop, unlicensed_repeats)
from seqcore.metrics.scores import ErrorStats, error_stats, perplexity
from seqcore.tokenizer import UNK_PIECE


def row(hyp: str, ref: str, eos: bool = True, pieces: list[str] | None = None,
        id_: str = "x") -> PredictionRow:
    toks = hyp.split()
    return PredictionRow(id_, "g", "src", ref, hyp, list(range(len(toks))),
                         toks if pieces is None else pieces, 0.0, 0.0, len(toks), eos, [])


@pytest.mark.parametrize(("hyp", "ref", "dist"), [
    ("", "", 0), ("a", "", 1), ("", "a b", 2), ("a b c", "a b c", 0),
    ("a x c", "a b c", 1),          # one substitution
    ("a c", "a b c", 1),            # one deletion from the reference
    ("b a", "a b", 2),              # a swap is two edits, not one
    pytest.param("k i t t e n", "s i t t i n g", 3,
                 id="test_levenshtein_of_the_textbook_character_case"),
])
def test_levenshtein_matches_hand_counted_edits(hyp: str, ref: str, dist: int) -> None:
    assert levenshtein(hyp.split(), ref.split()) == dist


@pytest.mark.parametrize(("hyp", "ref", "matches"), [
    ("a b c", "a b c", 3), ("", "a b", 0), ("a x c", "a b c", 2),
    ("b a", "a b", 1),              # 2 edits either way; the best alignment keeps one match
    ("a a b", "a b", 2),            # one insertion; both remaining tokens match
    ("x y", "a b", 0),
])
def test_aligned_matches_counts_matches_of_the_best_minimum_edit_alignment(
        hyp: str, ref: str, matches: int) -> None:
    assert aligned_matches(hyp.split(), ref.split()) == matches


def test_error_stats_of_one_pair_by_hand() -> None:
    st = error_stats("AH B K", "AH B", eos=True)
    # tokens: 1 insertion over 2 reference tokens; chars: "AH B K" vs "AH B" = 2 insertions.
    assert (st.exact, st.token_edits, st.ref_tokens, st.char_edits, st.ref_chars) == (0, 1, 2, 2, 4)
    # free-running: [AH B K eos] vs [AH B eos]: AH, B and eos match, over 3.
    assert (st.fr_matches, st.fr_tokens) == (3, 3)
    assert error_stats("AH B", "AH B", eos=False).fr_matches == 2  # truncated: no EOS to match


def test_error_stats_add_up_and_scores_divide_the_sums() -> None:
    total = error_stats("A B", "A B") + error_stats("A", "A C D")
    s = total.scores()
    assert s["exact_match"] == 0.5 and s["word_error_rate"] == 0.5
    assert s["token_error_rate"] == pytest.approx(2 / 5)
    assert math.isnan(ErrorStats().scores()["exact_match"])  # undefined, never 0


def test_multi_reference_exact_counts_any_reference_of_the_group() -> None:
    refs = frozenset({"IY DH ER", "AY DH ER"})
    st = error_stats("AY DH ER", "IY DH ER", references=refs)
    assert (st.exact, st.exact_multi) == (0, 1)
    assert error_stats("EH DH ER", "IY DH ER", references=refs).exact_multi == 0


def test_multi_reference_per_scores_against_the_closest_reference_of_the_group() -> None:
    refs = frozenset({"IY DH ER", "AY DH ER Z", "AY DH"})
    st = error_stats("AY DH ER", "IY DH ER", references=refs)
    # own reference 1 edit of 3; "AY DH ER Z" and "AY DH" are 1 edit too: ties keep the own
    assert (st.token_edits, st.ref_tokens) == (1, 3)
    assert (st.token_edits_multi, st.ref_tokens_multi) == (1, 3)
    variant = error_stats("AY DH ER Z", "IY DH ER", references=refs)  # equals a variant
    assert (variant.token_edits, variant.token_edits_multi, variant.ref_tokens_multi) == (2, 0, 4)
    closer = error_stats("AY", "IY DH ER", references=refs)  # "AY DH": 1 edit, closer than own (3)
    assert (closer.token_edits_multi, closer.ref_tokens_multi) == (1, 2)
    total = variant + closer
    assert total.scores()["token_error_rate_multi_ref"] == pytest.approx(1 / 6)
    assert total.scores()["token_error_rate"] == pytest.approx(5 / 6)


@pytest.mark.parametrize(("length", "edges", "name"), [
    *[pytest.param(n, (4, 6, 8, 10), name, id=f"{n}-{name}") for n, name in [
        (0, "1-4"), (1, "1-4"), (4, "1-4"), (5, "5-6"), (6, "5-6"), (10, "9-10"), (11, ">10")]],
    pytest.param(7, (), "all", id="test_bucket_name_without_edges_is_all"),
    # a bucket of one length is named by that length
    *[pytest.param(n, (4, 5, 8), name, id=f"a_bucket_of_one_length-{n}")
      for n, name in [(5, "5"), (4, "1-4"), (6, "6-8"), (9, ">8")]],
])
def test_bucket_names_cover_every_length_once(length: int, edges: tuple, name: str) -> None:
    assert bucket_name(length, edges) == name


@pytest.mark.parametrize(("tokens", "looped"), [
    ("K K K", True), ("K K", False), ("A B A B A B", True), ("A B A B", False),
    ("A B C A B C A B C", False),  # a 3-gram loop is beyond n=2
    ("X A B A B A B Y", True), ("A B C D", False), ("", False),
    ("K K X", False), ("A B A B C D", False),  # two in a row is not yet a loop
])
def test_loop_rule_is_an_ngram_up_to_n_repeated_k_times_in_a_row(tokens: str, looped: bool) -> None:
    assert has_loop(tokens.split(), 2, 3) is looped


def test_unlicensed_repeats_subtract_what_the_reference_repeats() -> None:
    # hyp bigrams: (A,B) x3, (B,A) x2 -> repeats 2 + 1; reference licenses one (A,B) repeat.
    assert unlicensed_repeats("A B A B A B".split(), "A B A B".split(), 2) == (2, 5)
    assert unlicensed_repeats("A B".split(), "".split(), 2) == (0, 1)


def test_each_failure_mode_is_detected_by_its_rule() -> None:
    rules = FailureRules(repeat_ngram=2, repeat_times=3, examples=5)
    assert failure_kinds(row("", "A"), rules, None) == {"empty"}
    assert failure_kinds(row("A B", "A B", eos=False), rules, None) == {"truncated"}
    assert failure_kinds(row("", "A", eos=False), rules, None) == {"empty", "truncated"}
    assert failure_kinds(row("K K K", "K"), rules, None) == {"repeated"}
    assert failure_kinds(row("A ⁇", "A B", pieces=["A", UNK_PIECE]), rules, None) == {"illegal"}
    assert failure_kinds(row("AH QQ", "AH"), rules, is_illegal_phoneme) == {"illegal"}
    assert failure_kinds(row("AH B", "AH B"), rules, is_illegal_phoneme) == set()


def test_failure_modes_give_counts_rates_examples_and_length_ratios() -> None:
    rows = [row("", "A B", id_="1"), row("A B", "A B", id_="2"), row("A B C D", "A B", id_="3"),
            row("A", "A B C", id_="4")]
    out = failure_modes(rows, FailureRules(2, 3, examples=1), None)
    assert out["empty"] == {"count": 1, "rate": 0.25, "examples": [
        {"id": "1", "source": "src", "reference": "A B", "hypothesis": ""}]}
    # ratios 0, 1, 2, 1/3: mean 0.8333, below 0.5: two, above 1.5: one.
    assert out["length_ratio"]["mean"] == pytest.approx((0 + 1 + 2 + 1 / 3) / 4)
    assert out["length_ratio"]["below_0.5"] == 0.5 and out["length_ratio"]["above_1.5"] == 0.25


def test_illegal_phoneme_rule_accepts_arpabet_with_stress_only() -> None:
    assert not is_illegal_phoneme("AH0") and not is_illegal_phoneme("ZH")
    assert is_illegal_phoneme("AX") and is_illegal_phoneme("<unk>") and is_illegal_phoneme("ah")


def test_perplexity_is_exp_of_mean_nll_and_undefined_without_tokens() -> None:
    assert perplexity(2 * math.log(4), 2) == pytest.approx(4.0)
    assert math.isnan(perplexity(0.0, 0))
