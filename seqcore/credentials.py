"""Credentials in URIs (tracking stores, DVC remotes): find them and hide them.

A URI may carry a secret in its user-info (``http://user:password@host``, or a token as the
user name) or in its query (``?token=...``, a signed URL's ``X-Amz-Signature``). Such a URI
must never reach a committed file, an MLflow param, tag or artifact, or the console
unredacted (issue 15).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

MASK = "***"
#: Query keys whose values are secrets (case-insensitive substring match).
SECRET_QUERY_KEYS = ("token", "secret", "password", "passwd", "pwd", "key", "signature", "sig",
                     "credential", "auth", "session")
#: A URI as it appears inside free text (an exception message, a log line).
_URI_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()]+")


def _secret_key(key: str) -> bool:
    return any(word in key.lower() for word in SECRET_QUERY_KEYS)


def secret_parts(uri: str) -> list[str]:
    """The secrets in ``uri``, longest first: the password (or the whole user-info when it has
    no password: a token) and the values of secret-looking query keys."""
    parts = urlsplit(uri)
    found = []
    if "@" in parts.netloc:
        info = parts.netloc.rsplit("@", 1)[0]
        found.append(info.split(":", 1)[1] if ":" in info else info)
    found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if _secret_key(k)]
    return sorted({s for f in found for s in (f, unquote(f)) if s}, key=len, reverse=True)


def has_credentials(uri: str) -> bool:
    """True if ``uri`` carries a password, a token or another secret (see secret_parts)."""
    return bool(secret_parts(uri))


def redact_uri(uri: str) -> str:
    """``uri`` with its user-info replaced by ``***`` and secret query values masked.

    A URI without credentials comes back unchanged, byte for byte.
    """
    if not has_credentials(uri):
        return uri
    parts = urlsplit(uri)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(_redact_query_item(item) for item in parts.query.split("&") if item)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _redact_query_item(item: str) -> str:
    key = item.split("=", 1)[0]
    return f"{key}={MASK}" if _secret_key(key) else item


def redact_text(text: str, known: tuple[str, ...] = ()) -> str:
    """``text`` with every URI in it redacted, and the secrets of the ``known`` URIs masked
    wherever else they appear (libraries also quote a URI in pieces)."""
    text = _URI_IN_TEXT.sub(lambda m: redact_uri(m.group(0)), text)
    for uri in known:
        for secret in secret_parts(uri):
            text = text.replace(secret, MASK)
    return text
