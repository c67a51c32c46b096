"""The ``lm`` task: plain-text documents in, a stateful RNN language model trained with
truncated BPTT, perplexity out (with the state carried across segments and reset at each).

One module per stage (seqcore.tasks), and ``corpus`` for the documents train and evaluate
read. It reads its documents itself (seqcore.tasks.lm.documents) under the same data policy as
the parallel tasks: ``data.bad_rows`` and ``data.max_pairs``. The prepare and tokenizer stages
still run on the raw file's pairs (the pipeline is one graph), but nothing of theirs is
scored: no split-size or coverage guard. There is nothing to decode. This module stays
light: prepare imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seqcore.config import Config


def config_problems(cfg: Config) -> list[tuple[str, Any, str]]:
    """The lm task's params.yaml rules: (key, value, what is allowed) for each one broken."""
    tr, out = cfg.train, []
    if cfg.model.family == "transformer":
        out.append(("model.family", cfg.model.family,
                    "must be gru or lstm when task is lm (the stateful RNN LM)"))
    if tr.ss_schedule != "off":
        out.append(("train.ss_schedule", tr.ss_schedule,
                    "must be off when task is lm (no decoder inputs to mix)"))
    if tr.nproc > tr.batch_size:
        out.append(("train.nproc", tr.nproc, f"must be <= train.batch_size ({tr.batch_size}) "
                    "when task is lm: each rank trains its own streams"))
    if tr.mrt_steps:
        out.append(("train.mrt_steps", tr.mrt_steps, "must be 0 when task is lm (minimum risk "
                    "training needs outputs to score against a reference)"))
    if tr.select in ("best_dev_wer", "best_dev_per"):
        out.append(("train.select", tr.select, "must be best_dev or last when task is lm (a "
                    "language model has no source to decode: no dev WER or PER)"))
    if cfg.baseline.kind == "phonetisaurus":
        out.append(("baseline.kind", cfg.baseline.kind,
                    "must be auto or none when task is lm (a G2P baseline needs parallel rows)"))
    return out


def ignored_settings(cfg: Config) -> list[str]:
    """Settings the lm task never reads (it decodes nothing)."""
    if cfg.decode.rescore != "none":
        return [f"decode.rescore = {cfg.decode.rescore!r} is ignored: task lm decodes nothing"]
    return []
