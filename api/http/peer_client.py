"""The HTTP client a request handler opens to ask other nodes (the console's throughput, a group's coordinator,
the leaders' partition rows), with one TLS context for the whole process.

httpx builds a new TLS context for every client it makes, loading certifi's CA bundle each time: 34 ms of CPU on
this machine, for a plain-http peer too, and so on every console page or group request that asked another node.
The context built once here is the one httpx would build (its own `create_ssl_context()`: certifi's bundle, or
SSL_CERT_FILE / SSL_CERT_DIR); a client made with it costs 0.13 ms."""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def default_tls() -> ssl.SSLContext:
    """The process's one TLS context of httpx's defaults (built at the first call)."""
    return httpx.create_ssl_context()


def peer_client(timeout_s: float, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """An AsyncClient for calls to other nodes (close it, or use it in `async with`)."""
    return httpx.AsyncClient(timeout=timeout_s, headers=headers, verify=default_tls())
