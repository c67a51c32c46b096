"""Progress of the slow loops of decode and evaluate: a tqdm bar on a terminal, and a line
every tenth of the work otherwise (logs of `dvc repro`, CI), so a long stage never looks hung.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")
BATCHES_PER_CHUNK = 4


def in_chunks(items: Sequence[T], batch_size: int, label: str) -> Iterator[Sequence[T]]:
    """``items`` in file order, in chunks of whole batches, reporting progress on stderr.

    Each chunk holds a multiple of ``batch_size`` items, so a caller that batches a chunk
    in order forms exactly the batches it would form over all items (same results).
    """
    size = batch_size * BATCHES_PER_CHUNK
    total = len(items)
    bar = tqdm(total=total, desc=label, unit="ex", file=sys.stderr) if sys.stderr.isatty() \
        else None
    start, next_line = time.monotonic(), total / 10
    for i in range(0, total, size):
        chunk = items[i : i + size]
        yield chunk
        done = i + len(chunk)
        if bar is not None:
            bar.update(len(chunk))
        elif done >= next_line or done == total:
            print(f"[{label}] {done}/{total} examples ({time.monotonic() - start:.0f} s)",
                  file=sys.stderr, flush=True)
            next_line = done + total / 10
    if bar is not None:
        bar.close()
