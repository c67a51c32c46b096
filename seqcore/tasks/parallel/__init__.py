"""The paired source/target tasks, ``g2p`` and ``parallel``: encoded pairs in, an
encoder-decoder trained on them, predictions decoded and scored against the references.

One module per stage (seqcore.tasks): ``prepare``, ``tokenizer``, ``train``, ``decode``,
``evaluate``. The two tasks differ in one piece: g2p's targets are ARPAbet, so its evaluation
counts predicted tokens outside that alphabet (seqcore.g2p); a user's parallel data has no
fixed alphabet. This module stays light: prepare imports it.
"""

from __future__ import annotations
