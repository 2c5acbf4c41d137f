"""Secrets out of logs, `GET /v1/config` and error messages.

Two rules: (1) in any URL, the password of `user:password@` and the values of the query parameters in
SECRET_PARAMS become `***`; (2) the secrets the server knows (tokens, the cluster token, the passwords and keys
of its store and metadata URLs) are replaced wherever they appear, when they are at least MIN_SECRET_CHARS long
(shorter ones would blank out ordinary words; the server warns about short tokens at start)."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

MASK = "***"
SECRET_PARAMS = ("access_key", "secret_key", "password", "passwd", "sslpassword", "token", "secret",
                 "session_token", "sas_token")
MIN_SECRET_CHARS = 8
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s'\"]*):(?P<pw>[^@\s'\"]*)@")
_PARAM = re.compile(r"(?P<lead>[?&;\s,(]|^)(?P<name>" + "|".join(SECRET_PARAMS) + r")=(?P<value>[^&\s'\",;)]+)",
                    re.IGNORECASE)


def secrets_of_url(url: str) -> list[str]:
    """The password and the secret query values of a URL (to register with a Redactor)."""
    try:
        parts = urlsplit(url)
        found = [parts.password] if parts.password else []
        found += [v for k, v in parse_qsl(parts.query) if k.lower() in SECRET_PARAMS and v]
    except ValueError:
        return []
    return found


def redact_url(url: str) -> str:
    return _PARAM.sub(lambda m: f"{m['lead']}{m['name']}={MASK}",
                      _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", url))


class Redactor:
    """Masks secrets in text: URL passwords and secret parameters always, and the secrets registered."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        with self._lock:
            known = set(self._secrets) | {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}
            self._secrets = tuple(sorted(known, key=len, reverse=True))  # longest first: no partial leftovers

    def text(self, text: str) -> str:
        out = redact_url(text)
        for secret in self._secrets:
            if secret in out:
                out = out.replace(secret, MASK)
        return out

    def value(self, value: Any) -> Any:
        """`value` with every string in it (dict values, list items) redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.value(v) for v in value)
        return value


#: the process's redactor: the server registers its secrets here at start; logs and errors go through it
REDACTOR = Redactor()


class _Masked:
    """Stands for a log argument whose text held a secret: prints the redacted text."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __str__(self) -> str:
        return self._text

    __repr__ = __str__


_PLAIN = (int, float, bool, type(None))
_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class RedactingFilter(logging.Filter):
    """A handler filter: masks secrets in the message, its arguments, the string extras and the traceback of
    every record before any formatter sees it. Arguments keep their place, so formatters that read
    `record.args` (uvicorn's access log) still work."""

    def __init__(self, redactor: Redactor = REDACTOR) -> None:
        super().__init__()
        self.redactor = redactor

    def _arg(self, a: Any) -> Any:
        if isinstance(a, str):
            return self.redactor.text(a)
        if isinstance(a, (*_PLAIN, _Masked)):
            return a
        shown = repr(a)
        masked = self.redactor.text(shown)
        if masked == shown:
            shown = str(a)
            masked = self.redactor.text(shown)
        return a if masked == shown else _Masked(masked)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.redactor.text(record.msg)
        elif not isinstance(record.msg, _PLAIN):
            record.msg = self._arg(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(self._arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: self._arg(v) for k, v in record.args.items()}
        for key, val in list(vars(record).items()):
            if key not in _RECORD_FIELDS and isinstance(val, str):
                setattr(record, key, self.redactor.text(val))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.redactor.text(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = self.redactor.text(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.text(record.stack_info)
        return True


def install_log_redaction(redactor: Redactor = REDACTOR) -> None:
    """Put a RedactingFilter on every handler configured now (the root's and every named logger's)."""
    loggers = [logging.getLogger()] + [lg for lg in logging.root.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    for lg in loggers:
        for handler in lg.handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(RedactingFilter(redactor))
