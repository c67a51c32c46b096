"""The paired source/target tasks, ``g2p`` and ``parallel``: encoded pairs in, an
encoder-decoder trained on them, predictions decoded and scored against the references.

One module per stage (seqcore.tasks): ``prepare``, ``tokenizer``, ``train``, ``decode``,
``evaluate``. The two tasks differ in one piece: g2p's targets are ARPAbet, so its evaluation
counts predicted tokens outside that alphabet (seqcore.g2p); a user's parallel data has no
fixed alphabet. This module stays light: prepare imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seqcore.config import Config


def config_problems(cfg: Config) -> list[tuple[str, Any, str]]:
    """The pair tasks' params.yaml rules: (key, value, what is allowed) for each one broken."""
    if cfg.decode.rescore == "baseline" and cfg.baseline.kind == "none":
        return [("decode.rescore", cfg.decode.rescore, "needs the baseline's n-best, and "
                 "baseline.kind is none: set decode.rescore: none, or baseline.kind auto or "
                 "phonetisaurus")]
    return []


def ignored_settings(cfg: Config) -> list[str]:
    """Settings the pair tasks never read: none (every decode setting is read)."""
    return []
