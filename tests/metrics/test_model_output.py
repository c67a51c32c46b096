"""The model's figures on its own output (issue 52, item 0): seqcore/metrics/model_output.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from seqcore.artifacts.predictions import Predictions, model_rows_path
from seqcore.metrics.evaluation import EvalSpec, evaluate_predictions
from seqcore.metrics.failures import FailureRules
from seqcore.metrics.model_output import bucket_table, model_output, nll_sides, output_metrics
from seqcore.metrics.teacher import TeacherStats
from seqcore.tasks import TaskError
from seqcore.tasks.parallel.evaluate import model_rows
from tests.factories import make_rows

SPEC = EvalSpec(edges=(2,), rules=FailureRules(2, 3, 5), group_by="none", illegal=None)
#: The model's own rows: one right, one truncated (no EOS) with a wrong token.
OWN = make_rows([("0", "0", "A B", "A B", True, None), ("1", "1", "C D E", "C D D", False, None)])
#: The scored system's rows (re-ranked n-best entries: each ended, so none is truncated).
SYSTEM = make_rows([("0", "0", "A B", "A B", True, None), ("1", "1", "C D E", "C D E", True, None)])
#: Teacher-forced statistics of the references (NLL, tokens with EOS, correct).
REFERENCE = {"0": TeacherStats(1.5, 3, 3), "1": TeacherStats(6.0, 4, 2)}


def test_the_output_figures_are_the_models_and_the_systems_sit_beside_them() -> None:
    own, system = (evaluate_predictions(rows, SPEC, REFERENCE) for rows in (OWN, SYSTEM))
    out = output_metrics(system, own, rescored=True)
    assert out["failures"]["truncated"]["count"] == 1  # the model's truncation, not hidden
    assert out["system_output"]["failures"]["truncated"]["count"] == 0
    # the scores stay the scored system's: both rows right
    assert out["exact_match"] == 1.0 and out["word_error_rate"] == 0.0
    # fr accuracy of the model: 2 + EOS of row 0 right (3/3), row 1: C D right, no EOS (2/4)
    assert out["fr_token_accuracy"] == pytest.approx(5 / 7)
    assert out["system_output"]["fr_token_accuracy"] == 1.0
    assert "system_output" not in output_metrics(own, own, rescored=False)


def test_the_exposure_bias_gap_is_the_models_teacher_forced_minus_free_running() -> None:
    own = evaluate_predictions(OWN, SPEC, REFERENCE)
    # tf accuracy 5/7 (3 + 2 of 3 + 4 labels); fr accuracy 5/7 as above: the gap is 0 here,
    # and it would read 5/7 - 1 < 0 on the system's rows
    assert own.headline["exposure_bias_gap"] == pytest.approx(5 / 7 - 5 / 7)
    system = evaluate_predictions(SYSTEM, SPEC, REFERENCE)
    assert system.headline["exposure_bias_gap"] == pytest.approx(5 / 7 - 1)


def test_the_nll_gap_is_reference_minus_own_output_positive_when_it_prefers_its_own() -> None:
    # references: 7.5 nats over 7 tokens; own outputs: 2.0 over 5 tokens (no EOS on row 1)
    sides = nll_sides(list(REFERENCE.values()), [TeacherStats(0.5, 3, 3), TeacherStats(1.5, 2, 2)])
    assert sides["reference_token_nll"] == pytest.approx(7.5 / 7)
    assert sides["hypothesis_token_nll"] == pytest.approx(2.0 / 5)
    assert sides["nll_gap"] == pytest.approx(7.5 / 7 - 2.0 / 5) and sides["nll_gap"] > 0
    assert sides["hypothesis_tokens"] == 5


def test_each_bucket_carries_the_models_gap_and_its_nll_sides() -> None:
    own, system = (evaluate_predictions(rows, SPEC, REFERENCE) for rows in (OWN, SYSTEM))
    hyp = {"0": TeacherStats(0.5, 3, 3), "1": TeacherStats(1.5, 2, 2)}
    table = bucket_table(system, own, OWN, SPEC.edges, REFERENCE, hyp)
    assert [b["bucket"] for b in table] == ["1-2", ">2"]
    short, long = table
    assert short["exact_match"] == long["exact_match"] == 1.0  # the system's scores
    assert long["fr_token_accuracy"] == pytest.approx(2 / 4)  # the model's own row
    assert long["exposure_bias_gap"] == pytest.approx(2 / 4 - 2 / 4)
    assert long["hypothesis_token_nll"] == pytest.approx(1.5 / 2)
    assert long["nll_gap"] == pytest.approx(6.0 / 4 - 1.5 / 2)
    assert short["nll_gap"] == pytest.approx(1.5 / 3 - 0.5 / 3)
    # automatic edges are cut from the rows, as evaluate cut the system's and the model's
    auto = EvalSpec(edges="auto", rules=SPEC.rules, group_by="none", illegal=None)
    own, system = (evaluate_predictions(rows, auto, REFERENCE) for rows in (OWN, SYSTEM))
    assert [b["bucket"] for b in bucket_table(system, own, OWN, "auto", REFERENCE, hyp)] == \
        [b["bucket"] for b in system.buckets]


def test_the_model_output_part_holds_the_models_own_scores_and_nll_sides() -> None:
    own = evaluate_predictions(OWN, SPEC, REFERENCE)
    hyp = {"0": TeacherStats(0.5, 3, 3), "1": TeacherStats(1.5, 2, 2)}
    # row 0 right, row 1 one substitution in 3 tokens: WER 1/2, token error rate 1/5
    assert model_output(own, OWN, REFERENCE, hyp) == pytest.approx({
        "word_error_rate": 0.5, "token_error_rate": 0.2, "token_error_rate_multi_ref": 0.2,
        "exact_match": 0.5, "exact_match_multi_ref": 0.5, "word_error_rate_multi_ref": 0.5,
        "reference_token_nll": 7.5 / 7, "hypothesis_token_nll": 2.0 / 5,
        "nll_gap": 7.5 / 7 - 2.0 / 5, "hypothesis_tokens": 5})


def test_a_model_rows_file_of_other_examples_stops_evaluate_in_one_line(tmp_path: Path) -> None:
    pred = tmp_path / "test.jsonl"
    Predictions(OWN[:1]).save(model_rows_path(pred))  # a stale file: one row of two
    with pytest.raises(TaskError, match="test.model.jsonl: not the examples") as err:
        model_rows(pred, SYSTEM)
    assert "\n" not in str(err.value)
    Predictions(OWN).save(model_rows_path(pred))
    assert model_rows(pred, SYSTEM) == OWN
