"""The text of a signature, sacrebleu's style: ``key:value|key:value|...`` (seqcore.signature
builds them from params and artifacts). The ground floor: it imports nothing of seqcore, so
any module that writes or reads a signature (the baseline's, a stage's check) can use it."""

from __future__ import annotations


def format_signature(fields: dict[str, str]) -> str:
    """``k1:v1|k2:v2|...`` in the given order."""
    return "|".join(f"{k}:{v}" for k, v in fields.items())


def parse_signature(sig: str) -> dict[str, str]:
    """Inverse of :func:`format_signature`."""
    return dict(kv.split(":", 1) for kv in sig.split("|") if kv)


def inherited_diff(stored: str, base: str) -> list[str]:
    """Where ``stored`` does not extend ``base``: each field of ``base`` (the signature of an
    upstream file, e.g. the tokenizer's) that ``stored`` (a later one, e.g. the model's) lacks
    or spells differently. Empty when ``stored`` carries ``base`` unchanged."""
    a, b = parse_signature(stored), parse_signature(base)
    return [f"{k}: {a.get(k)!r} != {v!r}" for k, v in b.items() if a.get(k) != v]
