"""Tasks behind one interface: the stages ask the task of params.yaml's ``task`` for their
pieces and never branch on its name (STYLE rule 15).

A task is a small package with one module per stage that asks it for something, named after
that stage: ``<package>.prepare``, ``.tokenizer``, ``.baseline``, ``.train``, ``.decode``, ``.evaluate``,
and ``.audit`` for ``pipeline.audit``.
:class:`Task` imports a stage's module only when that stage asks (importlib, by name), so each
stage loads only its own piece: prepare and tokenizer never import training, model, decoding
or metrics code (nor torch, in prepare), and editing training code leaves them fresh in
``dvc status`` (issue 11). tests/stages/test_declared_reads.py adds ``<package>.<stage>`` of
every task to stage ``<stage>``'s import closure, so dvc.yaml declares exactly these modules.

Adding a task is adding one package and one line in ``TASKS`` (docs/tasks.md). This module
stays light: it is in the import closure of every stage that asks a task.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from seqcore import config_rules
from seqcore.config import Config, ConfigError, DataConfig, problem_line
from seqcore.config_ranges import Problem
from seqcore.errors import OneLineError
from seqcore.signature import derived_params


class TaskError(OneLineError, ValueError):
    """A task cannot run with these inputs; the message says what to change (one line)."""


#: The stages that ask a task for a piece; a task's package has one module per stage.
PIECE_STAGES = ("prepare", "tokenizer", "baseline", "train", "decode", "evaluate")


@dataclass(frozen=True)
class Task:
    """The pieces of task ``name``, each read from ``<package>.<stage>`` when asked for.

    The return types are the piece modules' (e.g. ``seqcore.training.setups.Setup`` for
    ``training_setup``): naming them here would import the model side into every stage.
    """

    name: str
    package: str

    def piece(self, stage: str) -> ModuleType:
        """The module of this task's piece for ``stage`` (imported now, once per process)."""
        return importlib.import_module(f"{self.package}.{stage}")

    def config_problems(self, cfg: Config) -> list[tuple[str, Any, str]]:
        """params.yaml rules of this task (:func:`task_checked`): (key, value, what is
        allowed) for each one broken. From the task's package itself (light: every stage
        loads params)."""
        return importlib.import_module(self.package).config_problems(cfg)

    def ignored_settings(self, cfg: Config) -> list[str]:
        """Settings this task never reads, when set (one warning line each; nothing stops)."""
        return importlib.import_module(self.package).ignored_settings(cfg)

    def scored_splits(self, data: DataConfig) -> dict[str, float]:
        """prepare: the prepared splits this task scores, with their ``data.*_fraction``;
        prepare stops when one holds fewer than ``data.min_split_rows`` rows."""
        return self.piece("prepare").scored_splits(data)

    def data_subset(self) -> str:
        """prepare: how ``data.max_pairs`` cuts this task's data, as the data signature marks
        it after N (``g``: whole groups at random; empty: the first N rows)."""
        return self.piece("prepare").SUBSET

    def coverage_problems(self, cfg: Config, coverage: dict[str, Any]) -> list[str]:
        """tokenizer: one sentence per coverage figure (``seqcore.data.coverage.SplitCoverage``
        by split) too poor to train on (none: go on)."""
        return self.piece("tokenizer").coverage_problems(cfg, coverage)

    def baseline(self, cfg: Config, io: Any) -> None:
        """baseline: train the classic baseline on the train rows and write its predictions
        for dev and test, or a record saying why there is none.

        Raises:
            TaskError, seqcore.baselines.phonetisaurus.BaselineError: the stage prints the
                message and stops.
        """
        self.piece("baseline").baseline(cfg, io)

    def training_setup(self, cfg: Config, io: Any, device: Any, world: Any) -> Any:
        """train: read the declared inputs and build the model, feed and training contract
        (``io``: a seqcore.tasks.base.StageIO; returns a seqcore.training.setups.Setup)."""
        return self.piece("train").training_setup(cfg, io, device, world)

    def decode(self, cfg: Config, io: Any) -> None:
        """decode: write ``predictions/<decode.split>.jsonl`` and its header.

        Raises:
            TaskError, DeviceUnavailable: the stage prints the message and stops.
        """
        self.piece("decode").decode(cfg, io)

    def evaluate(self, cfg: Config, io: Any) -> Any:
        """evaluate: write metrics, results, headline, buckets, details and report; return
        the seqcore.tasks.base.Evaluated the stage builds the MLflow record from."""
        return self.piece("evaluate").evaluate(cfg, io)

    def derived_params(self, cfg: Config) -> dict[str, str]:
        """evaluate: the rules fixed by code that the MLflow run states beside the params
        (``derived.*``): the training loop's (seqcore.signature.derived_params), then this
        task's batching, loss, EOS, teacher-forcing and BPTT rules."""
        return derived_params(cfg) | self.piece("evaluate").derived_params(cfg)

    # The audit's piece, ``<package>.audit`` (no stage: pipeline.audit asks for it). ``files``
    # is a seqcore.artifacts.result_files.ResultFiles; each returns one line per mismatch.

    def audit_contract(self, cfg: Config, files: Any) -> list[str]:
        """audit: the contract signature and training contract recomputed from the params
        and this task's inputs, against every file of the result that records them."""
        return self.piece("audit").contract_diffs(cfg, files)

    def audit_counts(self, cfg: Config, files: Any) -> list[str]:
        """audit: the scored split's counts in every file that records one agree."""
        return self.piece("audit").count_diffs(cfg, files)


#: params.yaml ``task`` -> the task (the only place a task name chooses code). g2p and
#: parallel share the pair pieces; they differ in the target alphabet evaluate checks.
TASKS: dict[str, Task] = {
    "g2p": Task("g2p", "seqcore.tasks.parallel"),
    "parallel": Task("parallel", "seqcore.tasks.parallel"),
    "lm": Task("lm", "seqcore.tasks.lm"),
}


def get_task(name: str) -> Task:
    """The task called ``name``.

    Raises:
        TaskError: an unknown name (one line naming the known ones).
    """
    try:
        return TASKS[name]
    except KeyError:
        raise TaskError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}") \
            from None


def task_checked(cfg: Config, source: str) -> Config:
    """``cfg`` once its task's own rules hold. ``load_config`` checks types, ranges and the
    rules between keys; each stage's entry, validate and every user command then apply the
    task's (the loader imports no task: issue 50).

    Raises:
        ConfigError: the first rule broken, one line starting with ``source`` (the params
            file), as the loader's lines do.
    """
    for key, value, allowed in get_task(cfg.task).config_problems(cfg):
        raise ConfigError(f"{source}: {problem_line(Problem(key, value, allowed))}")
    return cfg


def ignored_settings(cfg: Config) -> list[str]:
    """Every setting these params set that nothing reads: the decode strategy's
    (seqcore.config_rules.ignored_settings), then the task's. One warning line each."""
    return config_rules.ignored_settings(cfg) + get_task(cfg.task).ignored_settings(cfg)
