"""Credentials in text that may be stored or printed: remembered, recognised and redacted.

Every place that writes a reason (the store, the CLI's error line, the log handlers) runs text
through :func:`redact_secrets`, so a provider error that quotes the key or the URL it was sent
never reaches the database, stderr, the viewer or an export.
"""

from __future__ import annotations

import os
import re
import urllib.parse

REDACTED = "[redacted]"

_KNOWN_SECRETS: set[str] = set()
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
# Query parameters that carry credentials under short names: Azure SAS signatures (`sig`),
# Azure Functions keys (`code`), and the usual `key`/`auth`/`pass` spellings.
_SECRET_PARAMS = frozenset(
    {"key", "sig", "signature", "code", "auth", "authorization", "pass", "pwd", "access"}
)
_SECRET_SHAPE = re.compile(
    r"\bBearer\s+[A-Za-z0-9._~+/=-]{8,}|\b(?:sk|rk|pk|sess)-[A-Za-z0-9_-]{8,}", re.IGNORECASE
)
_MIN_SECRET_LEN = 8


def is_secret_param(name: str) -> bool:
    """Whether a URL query parameter of this name carries a credential.

    Args:
        name: The parameter's name as written in the query string.
    """
    return bool(_SECRET_NAME.search(name)) or name.strip().lower() in _SECRET_PARAMS


def remember_secret(value: str | None) -> None:
    """Register a credential in use, so that no reason written afterwards can carry it.

    Args:
        value: The credential (values shorter than 8 characters are not registered: replacing
            them everywhere would mangle ordinary text).
    """
    if value and len(value) >= _MIN_SECRET_LEN:
        _KNOWN_SECRETS.add(value)
        # Providers often echo the URL percent-encoded; redact that spelling too.
        quoted = urllib.parse.quote(value, safe="")
        if quoted != value:
            _KNOWN_SECRETS.add(quoted)


def redact_secrets(text: str) -> str:
    """Remove credentials from text that may be stored or printed: keys in use, secrets carried
    in a base URL, secret-looking environment variables, and anything shaped like a bearer
    token or an ``sk-`` key.

    Args:
        text: Text to clean.
    """
    secrets = {s for s in _KNOWN_SECRETS if s in text}
    secrets.update(
        v
        for k, v in os.environ.items()
        if len(v) >= _MIN_SECRET_LEN and _SECRET_NAME.search(k) and v in text
    )
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return _SECRET_SHAPE.sub(REDACTED, text)


def _split(url: str) -> tuple[urllib.parse.SplitResult, list[tuple[str, str]]] | None:
    """The URL's parts and query pairs, or None when it does not parse."""
    try:
        parts = urllib.parse.urlsplit(url)
        return parts, urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return None


def redact_url(url: str) -> str:
    """The URL without credentials: userinfo (``http://user:sk-...@host``) and query values
    named like secrets (``?api-key=...``, ``?sig=...``) become ``[redacted]``.

    Args:
        url: An endpoint address as given.
    """
    split = _split(url)
    if split is None:
        return redact_secrets(url)
    parts, pairs = split
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        query = urllib.parse.urlencode(
            [(k, REDACTED if is_secret_param(k) else v) for k, v in pairs], safe="[]"
        )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def bare_endpoint(url: str) -> str:
    """One server's address however it is spelt: no userinfo, secret query values redacted,
    the scheme and host in lower case and no trailing slash (the response-cache key and the
    connection key of a provider compare endpoints in this form).

    Args:
        url: An endpoint address as given.
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return redact_url(url)
    host = parts.netloc.rsplit("@", 1)[-1].lower()
    path = parts.path.rstrip("/")
    bare = urllib.parse.urlunsplit((parts.scheme.lower(), host, path, parts.query, parts.fragment))
    return redact_url(bare)


def url_secrets(url: str) -> list[str]:
    """Credentials carried in a URL: the userinfo password and user, and the values of query
    parameters named like secrets.

    Args:
        url: An endpoint address as given.
    """
    split = _split(url)
    if split is None:
        return []
    parts, pairs = split
    found = [v for v in (parts.password, parts.username) if v]
    found += [v for k, v in pairs if v and is_secret_param(k)]
    return found


def remember_url_secrets(url: str | None) -> None:
    """Register every credential carried in a URL (see :func:`url_secrets`).

    Args:
        url: An endpoint address as given, or None.
    """
    for secret in url_secrets(url or ""):
        remember_secret(secret)
