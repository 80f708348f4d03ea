"""What carries a key in a request or a URL, and the same without it.

The contract: no key a client sent is ever forwarded to a judge's upstream, written to a
saved file or printed, and credentials inside a URL are stripped before it is stored or
printed. A key travels in a header (`Authorization`, Anthropic's `x-api-key`, Azure's
`api-key`, Google's `x-goog-api-key`, a cookie), in a query parameter (Google's `key=`,
`access_token=`), or in a URL's userinfo (`http://user:password@host`).

Which header or query parameter carries one is decided by its name, one rule for both
(`key_like`), and it errs on the side of the key: leaving out a harmless parameter costs
the upstream nothing, sending a key on is a leak. Nothing here ever decides what a key's
*value* looks like: a key the rule does not name by its carrier is not recognised in a
value.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

# The words of a name (split at anything but letters and digits) that say it carries a
# credential; a word that ends with one of the first group counts too (`apikey`,
# `accesstoken`, `x-amz-security-token`).
_ENDINGS = ("key", "token", "secret", "password", "passwd", "credential", "credentials",
            "signature", "authorization")
_WORDS = frozenset({"auth", "cookie", "sig", "pwd"})
_WORD = re.compile(r"[a-z0-9]+")


def key_like(name: str) -> bool:
    """Whether a header or query parameter of this name can carry a credential."""
    return any(w.endswith(_ENDINGS) or w in _WORDS for w in _WORD.findall(name.lower()))


def without_keys(headers: Mapping[str, str]) -> dict[str, str]:
    """`headers` less every one that can carry a credential."""
    return {k: v for k, v in headers.items() if not key_like(k)}


def query_without_keys(query: str) -> str:
    """A query string less its key-like parameters; the others as they were, byte for
    byte."""
    kept = [p for p in query.split("&") if p and not key_like(unquote(p.partition("=")[0]))]
    return "&".join(kept)


def shown(url: str) -> str:
    """`url` as it may be stored or printed: without userinfo (`user:password@`) and
    without key-like query parameters."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, query_without_keys(parts.query),
                       parts.fragment))


# A URL inside some text: a client's error message, a library's log line
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def scrubbed(text: str) -> str:
    """`text` with every URL in it `shown`: what a library says about a URL (an error, a
    debug line) may quote it whole, with the credentials it was given."""
    def one(url: re.Match[str]) -> str:
        try:
            return shown(url.group())
        except ValueError:  # not a URL urlsplit can take apart: none of it shown
            return url.group().partition("://")[0] + "://..."
    return _URL_IN_TEXT.sub(one, text)


class ScrubbedFormatter(logging.Formatter):
    """Log lines, tracebacks included, with every URL `scrubbed`: object stores' clients
    (fsspec's HTTP filesystem, aiohttp) log and raise with the URLs they fetch whole."""

    def format(self, record: logging.LogRecord) -> str:
        return scrubbed(super().format(record))


def basic_auth(url: str) -> str | None:
    """The `Authorization` value that `url`'s userinfo (`user:password@`) stands for, as
    HTTP clients send it (basic auth), or None: it has none."""
    parts = urlsplit(url)
    if parts.username is None:
        return None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(pair.encode()).decode("ascii")
