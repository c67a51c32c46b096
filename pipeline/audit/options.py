"""What one audit is asked to do: the one options object the command line, the ``--run``
mode, ``copy_run`` and the tests build and pass down (issue 50: the MLflow store is an
argument, never a swapped ``os.environ``)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.record import tracking_uri
from seqcore.config import Config

#: Segments of the training the default audit replays (``--replay K``; 0: none).
REPLAY_SEGMENTS = 3


@dataclass(frozen=True)
class AuditOptions:
    """One audit's settings (``python -m pipeline.audit --help`` says each).

    ``tracking_uri``: the MLflow store that holds the result's run. None: the result's own
    (``mlflow.tracking_uri`` of its params, MLFLOW_TRACKING_URI first); ``--run`` sets the
    store the run was read from, since the result's copy names a store inside the copy.
    """

    params: str = "params.yaml"
    run_id: str | None = None
    use_mlflow: bool = True
    strict_env: bool = False
    rebuild: bool = False
    only: tuple[str, ...] = ()
    replay: int = REPLAY_SEGMENTS
    replay_seed: int | None = None
    tracking_uri: str | None = None

    def store(self, cfg: Config) -> str:
        """The tracking URI of the store the audit reads the run from and stamps."""
        return self.tracking_uri or tracking_uri(cfg.mlflow.tracking_uri)
