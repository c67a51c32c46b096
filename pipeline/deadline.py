"""How long an MLflow store may take: logging a run (``SEQCORE_MLFLOW_SECONDS``) and a replay
(``--timeout``) give up at a wall-clock deadline, and the HTTP client retries less than
MLflow's defaults, so an unreachable store never holds a stage (pipeline/tracking.py keeps
the run instead).
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

#: How long logging a run (``SEQCORE_MLFLOW_SECONDS``) and a replay (``--timeout``) try before
#: they give up, and the HTTP client's settings under them unless the environment says
#: otherwise: MLflow's defaults (7 retries, 120 s per request) kept an unreachable server busy
#: for over 4 minutes (#15).
LOG_SECONDS = 120.0
REPLAY_SECONDS = 60.0
STORE_HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


class StoreDeadline(BaseException):
    """The store's time is up. A BaseException, so that the retry loops of MLflow's HTTP
    client and SQLAlchemy store (which catch Exception) cannot swallow it."""


def _deadline(signum: int, frame: Any) -> None:
    raise StoreDeadline


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise StoreDeadline in the block after ``seconds`` of wall time (main thread only;
    elsewhere the block runs unbounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGALRM, _deadline)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def log_seconds(text: str | None) -> float:
    """``SEQCORE_MLFLOW_SECONDS`` as seconds (``LOG_SECONDS`` when unset); a value that is not
    a number of seconds > 0 stops the stage with one line."""
    if text is None:
        return LOG_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        sys.exit(f"SEQCORE_MLFLOW_SECONDS = {text!r}: must be a number of seconds > 0 (unset: "
                 f"{LOG_SECONDS:g})")
    return seconds
