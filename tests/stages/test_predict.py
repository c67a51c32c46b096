"""`python -m pipeline.predict` on a broken result (one line naming the file, exit 1, no
traceback) and on bad input (its own error line; every other line its answer; issue 31)."""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from pipeline.predict import main
from seqcore.blobs import load_blob, save_blob

pytestmark = pytest.mark.slow  # the shared tiny result
Predict = Callable[..., tuple[int, str, str]]


@pytest.fixture
def repo(result: Path, tmp_path: Path) -> Path:
    """A throwaway copy of the result's files that predict reads (a case may break them)."""
    dest = tmp_path / "repo"
    dest.mkdir()
    for name in ("params.yaml", "models", "tokenizer", "baseline"):
        src = result / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest / name)
    return dest


@pytest.fixture
def run(repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Predict:
    """``run(stdin, *argv)``: predict in ``repo``; (exit status, stdout, stderr)."""
    def predict(stdin: bytes, *argv: str) -> tuple[int, str, str]:
        monkeypatch.chdir(repo)
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
        return main(list(argv)), *capsys.readouterr()  # main runs first

    return predict


def nan_weights(repo: Path) -> None:
    payload = load_blob(repo / "models/model.pt")
    name = next(k for k, t in payload["model"].items() if t.is_floating_point())
    payload["model"][name] = torch.full_like(payload["model"][name], float("nan"))
    save_blob(repo / "models/model.pt", payload)  # a matching sidecar: only the values are bad


BROKEN = {
    "missing model": (lambda r: (r / "models/model.pt").unlink(), "models/model.pt"),
    "corrupt model": (lambda r: (r / "models/model.pt").write_bytes(b"not a model"),
                      "models/model.pt"),
    "NaN weights": (nan_weights, "holds NaN or infinity; the model is unusable"),
    "missing tokenizer contract": (lambda r: (r / "tokenizer/contract.json").unlink(),
                                   "tokenizer/contract.json"),
    "corrupt tokenizer model": (
        lambda r: next((r / "tokenizer").glob("*.model")).write_bytes(b"garbage"),
        "does not match tokenizer/contract.json sha256"),
    "missing tokenizer model": (lambda r: next((r / "tokenizer").glob("*.model")).unlink(),
                                "missing (named by tokenizer/contract.json)"),
    # the default rescores the baseline's n-best: its WFST is part of the system (issue 51)
    "missing baseline WFST": (lambda r: (r / "baseline/model.fst").unlink(),
                              "baseline/model.fst: missing"),
    "another baseline WFST": (lambda r: (r / "baseline/model.fst").write_bytes(b"other"),
                              "is not the baseline the result was decoded with"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_result_stops_predict_in_one_line_with_status_1(
        case: str, repo: Path, run: Predict) -> None:
    breaks, want = BROKEN[case]
    breaks(repo)
    code, out, err = run(b"cat\n")
    assert code == 1 and not out, out
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("[predict] ") and want in lines[0], err


def test_an_invalid_utf8_line_gets_its_own_error_and_the_others_their_answers(run: Predict) -> None:
    code, out, err = run("cat\ncaf\u00e9\n".encode("cp1252") + b"dog\n")
    assert code == 1 and "Traceback" not in err
    assert "[predict] line 2 'caf\\\\xe9': not valid UTF-8" in err.splitlines()
    answered = {line.split("\t")[0] for line in out.splitlines()}
    flagged = {line.split("'")[1] for line in err.splitlines() if line.startswith("[predict] line")}
    assert answered | flagged == {"cat", "caf\\\\xe9", "dog"}  # every line answered or flagged
    assert json.dumps(sorted(answered & flagged)) == "[]"


def test_an_invalid_utf8_argument_gets_its_own_error_and_the_others_their_answers(
        run: Predict) -> None:
    # issue 54: the shell passes bytes; Python decodes them with surrogateescape, which
    # crashed SentencePiece and left the other arguments unanswered
    bad = os.fsdecode("caf\u00e9".encode("cp1252"))
    from_args = run(b"", "cat", bad, "dog")
    from_stdin = run("cat\ncaf\u00e9\n".encode("cp1252") + b"dog\n")
    assert from_args == from_stdin and from_args[0] == 1 and "Traceback" not in from_args[2]
    assert "[predict] line 2 'caf\\\\xe9': not valid UTF-8" in from_args[2].splitlines()


def test_predict_is_quiet_on_success_and_names_what_it_knows_when_it_refuses(run: Predict) -> None:
    code, out, err = run(b"", "abc")
    # the tiny model may give no answer it can stand behind; either way only the answer or
    # the line's reason is printed: the signature only with -v
    assert (code, err) == (0, "") if out else err.startswith("[predict] line 1 'abc': "), err
    assert len(err.splitlines()) <= 1 and "contract:" not in err
    _, _, err = run(b"", "-v", "abc")
    assert err.startswith("[predict] contract: task:g2p|"), err
    code, out, err = run(b"", "a%c")
    assert code == 1 and not out
    assert err.startswith("[predict] line 1 'a%c': not in the source vocabulary: '%' (known: "), err
    known = err.split("(known: ", 1)[1].rsplit(" (", 1)[0].split()  # the pieces it knows
    assert err.rstrip().endswith(" pieces))") and {"a", "b", "c"} <= set(known), err


def test_inputs_from_a_file_are_answered_line_by_line_as_from_stdin(
        run: Predict, tmp_path: Path) -> None:
    words = tmp_path / "words.txt"
    words.write_bytes(b"cat\na%c\n" + "caf\u00e9".encode("cp1252") + b"\ndog\n")
    from_file = run(b"", "--file", str(words))
    from_stdin = run(words.read_bytes())
    assert from_file == from_stdin and from_file[0] == 1
    assert "[predict] line 2 'a%c': not in the source vocabulary" in from_file[2]
    assert "[predict] line 3 'caf\\\\xe9': not valid UTF-8" in from_file[2]


@pytest.mark.parametrize(("argv", "want"), [
    (("--file", "absent.txt"), "[predict] --file absent.txt: No such file or directory"),
    (("--file", "words.txt", "cat"), "[predict] give inputs as arguments or with --file, "
                                     "not both"),
])
def test_a_bad_input_file_argument_is_one_line_with_status_2(
        argv: tuple[str, ...], want: str, run: Predict) -> None:
    code, out, err = run(b"", *argv)
    assert (code, out, err) == (2, "", want + "\n")


@pytest.mark.parametrize(("span", "known", "named"), [
    # issue 55: a space was named '' and the typographic apostrophe got no hint
    ("", {"a"}, "' ' (U+0020 SPACE: a space between words; the vocabulary has none)"),
    ("\u2019", {"'", "a"}, "'\u2019' (U+2019 RIGHT SINGLE QUOTATION MARK; the vocabulary has "
                           "' U+0027)"),
    ("\u2019", {"a"}, "'\u2019' (U+2019 RIGHT SINGLE QUOTATION MARK)"),  # no hint it lacks
    ("\u2013", {"\u2581-"}, "'\u2013' (U+2013 EN DASH; the vocabulary has - U+002D)"),
    ("%", {"a"}, "'%'"),  # plain ASCII as it is
])
def test_an_unknown_character_is_named_by_its_code_point_with_the_plain_one_to_type(
        span: str, known: set[str], named: str) -> None:
    from seqcore.data.inputs import describe_span  # noqa: PLC0415

    assert describe_span(span, known) == named


def test_a_space_in_a_word_is_named_not_printed_as_an_empty_string(run: Predict) -> None:
    code, out, err = run(b"", "ab c")
    assert code == 1 and not out
    assert err.startswith("[predict] line 1 'ab c': not in the source vocabulary: ' ' "
                          "(U+0020 SPACE"), err
