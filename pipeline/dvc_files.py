"""The pipeline's DVC files as the pipeline reads them: dvc.yaml's stages and outputs, and
YAML 1.2 parsing as DVC does it (dvc.lock digests agree between evaluate and the audit)."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

from seqcore.config import Config
from seqcore.errors import UnreadableFile, unreadable
from seqcore.hashing import digest
from seqcore.signature import NO_RESULT_KEYS, result_params


def read_yaml12(path: Path) -> Any:
    """Parse YAML the way DVC does (ruamel, YAML 1.2: ``off`` is a string, ``1e-09`` a float),
    so dvc.lock digests and values agree between the evaluate stage and the audit."""
    from ruamel.yaml import YAMLError  # noqa: PLC0415 (only when a DVC file is parsed)

    try:
        return copy.deepcopy(_parse_yaml12(path.read_text(encoding="utf-8")))
    except (UnicodeDecodeError, YAMLError) as err:  # one line naming the file (issue 54)
        raise unreadable(path, err) from None


def parse_yaml12(text: str) -> Any:
    """``read_yaml12`` of a text (e.g. a dvc.lock read from a git commit)."""
    return copy.deepcopy(_parse_yaml12(text))


@functools.lru_cache(maxsize=8)
def _parse_yaml12(text: str) -> Any:
    """The parse, once per text: the audit reads one dvc.lock (40 kB) four times. DVC's own
    loader (``typ="safe"``): libyaml's C parser when ruamel.yaml.clib is installed (it is
    locked), ruamel's resolver (YAML 1.2) either way."""
    from ruamel.yaml import YAML  # noqa: PLC0415 (only when a DVC file is parsed)

    return YAML(typ="safe").load(text)


def dvc_stages(dvc_yaml: Path = Path("dvc.yaml")) -> dict[str, Any]:
    """The ``stages`` of dvc.yaml, in its order (none without the file); a file that holds
    no stages mapping is UnreadableFile, one line naming it (issue 54)."""
    if not dvc_yaml.exists():
        return {}
    stages = (read_yaml12(dvc_yaml) or {}).get("stages")
    if not isinstance(stages, dict):
        raise UnreadableFile(f"{dvc_yaml}: no stages (emptied or cut off?); restore it: "
                             f"git checkout {dvc_yaml}")
    return stages


def pipeline_stages(dvc_yaml: Path = Path("dvc.yaml")) -> list[str]:
    """The names of the stages in dvc.yaml, in its order (none without the file)."""
    return list(dvc_stages(dvc_yaml))


def pipeline_outputs(cfg: Config, dvc_yaml: Path = Path("dvc.yaml")) -> set[str]:
    """Every out, metric and plot file of the stages in dvc.yaml, templated with ``cfg``."""
    values = result_params(cfg)  # the templated keys (paths.*, evaluate.details_dir) are there
    stages = dvc_stages(dvc_yaml)
    out = set()
    for stage in stages.values():
        for kind in ("outs", "metrics", "plots"):
            for entry in stage.get(kind) or []:
                name = entry if isinstance(entry, str) else next(iter(entry))
                out.add(re.sub(r"\$\{([^}]+)\}", lambda m: str(values[m.group(1)]), name))
    return {name.rstrip("/") for name in out}


def upstream_lock_digest(lock: dict[str, Any], last_stage: str = "evaluate") -> str:
    """sha256 of dvc.lock's stages before ``last_stage``: what the evaluate stage saw.

    DVC rewrites dvc.lock after each stage, so while evaluate runs the file holds the final
    entries of every upstream stage but not yet evaluate's own. The evaluate stage logs it
    with the MLflow run and the audit recomputes it. The values of guards and bookkeeping
    keys (seqcore.signature.NO_RESULT_KEYS) are left out: raising a guard re-runs the stage
    that checks it, with the same outputs, and leaves the result and its run as they were.
    """
    return digest({k: _result_entry(v) for k, v in lock.get("stages", {}).items()
                   if k != last_stage})


def _result_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A stage's lock entry with its params less NO_RESULT_KEYS."""
    if not entry.get("params"):
        return entry
    return entry | {"params": {name: _without(values, NO_RESULT_KEYS)
                               for name, values in entry["params"].items()}}


def _without(values: dict[str, Any], keys: frozenset[str], prefix: str = "") -> dict[str, Any]:
    """Params as a lock holds them (dotted keys, or sections nested) less the dotted ``keys``."""
    out = {}
    for key, value in values.items():
        name = prefix + key
        if name not in keys:
            out[key] = _without(value, keys, name + ".") if isinstance(value, dict) else value
    return out
