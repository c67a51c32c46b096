"""Expected failures whose message is the whole story.

A stage (pipeline/stage.py) prints such an error as its one line and exits with status 1,
without a traceback: the message already names the file or parameter and what to do. Any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class OneLineError(Exception):
    """An expected failure with a complete one-line message (no traceback needed)."""
