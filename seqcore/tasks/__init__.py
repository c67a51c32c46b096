"""Tasks behind one interface (seqcore.tasks.base.Task): the stages ask the task of
params.yaml's ``task`` for their pieces and never branch on its name (STYLE rule 15).

Adding a task is adding one module with a Task subclass and one line in ``TASKS``
(docs/tasks.md).
"""

from __future__ import annotations

from seqcore.g2p import is_illegal_phoneme
from seqcore.tasks.base import Task, TaskError
from seqcore.tasks.lm import LMTask
from seqcore.tasks.parallel import ParallelTask

#: params.yaml ``task`` -> the task object (the only place a task name chooses code).
TASKS: dict[str, Task] = {
    "g2p": ParallelTask("g2p", is_illegal_phoneme),
    "parallel": ParallelTask("parallel", None),
    "lm": LMTask(),
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
