"""One rule for secrets: a database password is never printed, logged, raised or written into a file.

``mask_secrets`` is the one function that applies it: every URL's password inside any text becomes ``***``
(``postgresql://u:pw@host/db`` -> ``postgresql://u:***@host/db``), and so does the ``password=`` keyword of a
libpq connection string or URL query (``host=x password=pw`` -> ``host=x password=***``). Messages, log
records, artefacts' command lines and reports go through it; it over-masks rather than leaks.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

MASK = "***"

# scheme://user:password@ -- the password runs to the token's last "@" (an unencoded "@" or ":" in it is masked too)
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][\w+.-]*://[^\s:/@]*:)(?P<password>\S*)@")
# password=secret, password = 'sec ret' (libpq keyword/value form, a URL's ?password=...)
_KEYWORD_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<password>'(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def mask_secrets(text: str) -> str:
    """``text`` with every database password in it replaced by ``***``."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}@", text)
    return _KEYWORD_PASSWORD.sub(lambda m: m["head"] + MASK, text)


def mask_argv(argv: Iterable[str]) -> list[str]:
    """A command line as it may be stored (an artefact's provenance): each token masked (``--db=URL`` too)."""
    return [mask_secrets(str(token)) for token in argv]


def mask_data(data: Any) -> Any:
    """JSON-like ``data`` (what an artefact's metadata stores) with every string in it masked."""
    if isinstance(data, str):
        return mask_secrets(data)
    if isinstance(data, dict):
        return {key: mask_data(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [mask_data(value) for value in data]
    return data


class MaskingFormatter(logging.Formatter):
    """A log formatter whose lines (message, traceback and all) carry no password."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_secrets(super().format(record))


__all__ = ["MASK", "MaskingFormatter", "mask_argv", "mask_data", "mask_secrets"]
