"""One TLS context for every httpx client the test process makes with httpx's defaults.

`httpx.get(...)` and the other top-level functions make a new client per call, and every client builds a TLS
context with certifi's CA bundle loaded: 34 ms of CPU per request on this machine, for plain-http URLs too. The
tests make thousands of such calls to the servers they start (the end-to-end test alone reads 1,000 messages by
id), so this was the test process's largest cost, time taken from the servers under test on 2 cores. The server
side does the same with one context (api/http/peer_client.py).

Only clients made with httpx's defaults (verify=True, no client certificate, the environment trusted) share the
context, which is the one httpx builds for them (`api.http.peer_client.default_tls()`, the server's); a
client given its own `verify` or `cert` (the TLS tests) gets its own as before. Nothing about the requests
changes: each call still opens its own connection."""

from __future__ import annotations

import ssl
from typing import Any

from httpx._transports import default as _transports

from api.http.peer_client import default_tls

_create = _transports.create_ssl_context


def _create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
    if verify is not True or cert is not None or not trust_env:
        return _create(verify=verify, cert=cert, trust_env=trust_env)
    return default_tls()


def share_default_tls_context() -> None:
    """Make httpx's transports take the shared context (called once, when tests/conftest.py is imported)."""
    _transports.create_ssl_context = _create_ssl_context  # type: ignore[assignment]
