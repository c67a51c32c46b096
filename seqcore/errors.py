"""Expected failures whose message is the whole story.

A stage (pipeline/stage.py) prints such an error as its one line and exits with status 1,
without a traceback: the message already names the file or parameter and what to do. Any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import json


class OneLineError(Exception):
    """An expected failure with a complete one-line message (no traceback needed)."""


class UnreadableFile(OneLineError, ValueError):
    """A file between stages that is not what its writer writes: not UTF-8, not JSON, a line
    cut off (issue 54). The message names the file, the line and what to do; a stage stops on
    it with exit status 2, as on a missing input."""


def unreadable(path: object, err: Exception, line: int | None = None) -> UnreadableFile:
    """The one line for ``path`` that failed to decode with ``err`` (UnicodeDecodeError or
    json.JSONDecodeError), at ``line`` when the file is read line by line."""
    if isinstance(err, UnicodeDecodeError):
        what = f"not UTF-8 (byte {err.object[err.start]:#04x} at offset {err.start})"
    elif isinstance(err, json.JSONDecodeError):
        what = f"not valid JSON ({err.msg})"
    elif type(err).__module__.startswith(("yaml", "ruamel")):  # a YAML parser's error
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        what = f"not valid YAML{at} ({getattr(err, 'problem', None) or type(err).__name__})"
    else:
        what = f"not readable ({err})"
    where = f" line {line}:" if line is not None else ""
    return UnreadableFile(f"{path}:{where} {what}; re-run the stage that writes it "
                          "(dvc repro), or restore it (dvc checkout)")
