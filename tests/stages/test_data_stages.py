"""The real fetch/prepare/tokenizer stages on a user's own TSV, in a temporary workspace."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from seqcore.data.examples import read_examples
from seqcore.tokenizer import TokenizerMismatch, load_tokenizers
from tests.data_samples import BAD_TSV, BAD_TSV_COUNTS, BAD_TSV_DROPPED
from tests.pipeline_helpers import run_stage

pytestmark = pytest.mark.slow  # every test here runs a stage or repro in a subprocess


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("work")
    (work / "data/external").mkdir(parents=True)
    (work / "data/external/user.tsv").write_bytes(BAD_TSV)
    # two thirds of BAD_TSV are bad rows of every kind, on purpose: the reject-rate guard
    # (tests/data/test_own_data.py) is off here
    for stage in ("fetch", "prepare", "tokenizer"):
        res = run_stage(work, stage, {"data": {"max_reject_rate": 1.0}})
        assert res.returncode == 0, res.stderr
    return work


def test_fetch_copies_the_users_file_and_prepare_pins_its_hash(work: Path) -> None:
    manifest = json.loads((work / "data/prepared/manifest.json").read_text())
    assert (work / "data/raw/user.tsv").read_bytes() == BAD_TSV
    assert manifest["raw"]["sha256"] == hashlib.sha256(BAD_TSV).hexdigest()
    assert manifest["raw"]["label"] == "data/external/user.tsv"


def test_prepare_manifest_counts_every_bad_row_kind(work: Path) -> None:
    manifest = json.loads((work / "data/prepared/manifest.json").read_text())
    assert manifest["rejects"] == BAD_TSV_COUNTS
    assert manifest["rows"] == {"train": 5, "dev": 0, "test": 0}
    assert manifest["variants"] == {"sources_with_variants": 1, "variant_rows": 2,
                                    "sources_in_several_groups": 0}


def test_rejects_tsv_lists_each_dropped_row_with_file_and_line(work: Path) -> None:
    rows = [line.split("\t") for line in
            (work / "reports/data_rejects.tsv").read_text().splitlines()[1:]]
    dropped = [(int(r[1]), r[3]) for r in rows if r[2] == "dropped"]
    assert dropped == BAD_TSV_DROPPED
    assert {r[0] for r in rows} == {"data/external/user.tsv"}


def test_length_policy_truncates_in_tokens_and_a_cut_target_has_no_eos(work: Path) -> None:
    rows = (work / "reports/length_rejects.tsv").read_text().splitlines()[1:]
    got = sorted((int(r.split("\t")[1]), r.split("\t")[3]) for r in rows)
    # line 16: "<s> and </s>" is 12 chars > 10; line 17: "f ih sh sh" is 4 words + EOS > 4
    assert got == [(16, "truncated-source"), (17, "truncated-target")]
    ex = {e.source: e for e in read_examples(work / "data/encoded/train.jsonl")}
    assert len(ex["<s> and </s>"].src) == 10 and ex["<s> and </s>"].has_eos
    assert len(ex["fish"].tgt) == 4 and not ex["fish"].has_eos
    assert all(e.has_eos for s, e in ex.items() if s != "fish")


def test_text_spelling_special_tokens_never_encodes_to_a_special_id(work: Path) -> None:
    toks = load_tokenizers(work / "tokenizer/contract.json")
    special = {toks.ids.pad, toks.ids.unk, toks.ids.bos, toks.ids.eos}
    ex = {e.source: e for e in read_examples(work / "data/encoded/train.jsonl")}
    row = ex["<s> and </s>"]
    assert not special & set(row.src) and not special & set(row.tgt)
    assert toks.tgt.decode(row.tgt) == "<pad> <unk>"


def test_every_training_row_round_trips_and_the_contract_says_so(work: Path) -> None:
    contract = json.loads((work / "tokenizer/contract.json").read_text())
    assert contract["round_trip"]["src"]["failed"] == 0
    assert contract["round_trip"]["tgt"] == {"rows": 5, "failed": 0, "by_reason": {},
                                             "examples": []}


def test_a_model_file_that_differs_from_the_contract_is_refused_naming_both_hashes(
        work: Path, tmp_path: Path) -> None:
    for name in ("contract.json", "src.model", "tgt.model"):
        shutil.copy(work / "tokenizer" / name, tmp_path / name)
    contract = json.loads((tmp_path / "contract.json").read_text())
    shutil.copy(tmp_path / "src.model", tmp_path / "tgt.model")  # another tokenizer's file
    with pytest.raises(TokenizerMismatch) as err:
        load_tokenizers(tmp_path / "contract.json")
    assert contract["tgt"]["sha256"] in str(err.value)
    assert contract["src"]["sha256"] in str(err.value)  # the file's actual hash


def test_a_contract_that_differs_from_the_checkpoint_is_refused_naming_both_hashes(
        work: Path) -> None:
    contract = json.loads((work / "tokenizer/contract.json").read_text())
    stored = {"src": contract["src"]["sha256"], "tgt": "0" * 64}
    with pytest.raises(TokenizerMismatch, match=f"{contract['tgt']['sha256']}.*{'0' * 64}"):
        load_tokenizers(work / "tokenizer/contract.json", expected_sha256=stored)
    assert load_tokenizers(work / "tokenizer/contract.json",
                           expected_sha256={s: contract[s]["sha256"] for s in ("src", "tgt")})


def test_strict_prepare_stage_exits_naming_file_line_reason_and_row(work: Path) -> None:
    res = run_stage(work, "prepare", {"data": {"bad_rows": "strict"}})
    assert res.returncode != 0
    assert "data/external/user.tsv:4: invalid-utf8: 'caf\\\\xe9\\tK AE F\\tg3'" in res.stderr


@pytest.mark.parametrize(("user_file", "params", "said"), [
    pytest.param("elsewhere.tsv", {"data": {"path": "elsewhere.tsv"}, "paths": {
        "raw": "data/raw/elsewhere.tsv"}}, "outside data/external/",
        id="test_fetch_refuses_a_user_file_outside_the_tracked_external_folder"),
    pytest.param("data/external/user.tsv", {"data": {"sha256": "1" * 64}}, "1" * 64,
                 id="test_fetch_refuses_a_user_file_whose_sha256_differs_from_the_pinned_one"),
])
def test_fetch_refuses_a_user_file_and_copies_nothing(
        user_file: str, params: dict, said: str, tmp_path: Path) -> None:
    (tmp_path / user_file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / user_file).write_bytes(b"a\tb\n")
    res = run_stage(tmp_path, "fetch", params)
    assert res.returncode != 0 and said in res.stderr
    assert not (tmp_path / "data/raw" / Path(user_file).name).exists()
