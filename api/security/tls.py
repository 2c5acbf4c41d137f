"""TLS for the listeners: the certificate and key a listener serves, and optionally a CA whose certificates
clients must present (mutual TLS). `uvicorn_options` feeds uvicorn (HTTP); `server_context` is the same
configuration as an ssl.SSLContext for a listener on asyncio/socket (Kafka)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class TlsError(ValueError):
    pass


@dataclass(frozen=True)
class TlsConfig:
    cert: str
    key: str
    client_ca: str = ""  # when set, clients must present a certificate signed by this CA
    prefix: str = ""  # of the setting names in errors: "" (HTTP) or "kafka_"

    @classmethod
    def from_settings(cls, cert: str, key: str, client_ca: str, prefix: str = "") -> TlsConfig | None:
        """None when TLS is off; a clear error when only half of it is given or a file cannot be used."""
        if not cert and not key:
            if client_ca:
                raise TlsError(f"{prefix}tls_client_ca needs {prefix}tls_cert and {prefix}tls_key (client "
                               "certificates are checked over TLS)")
            return None
        if not cert or not key:
            raise TlsError(f"TLS needs both {prefix}tls_cert and {prefix}tls_key")
        config = cls(cert, key, client_ca, prefix)
        config.server_context()  # fail at start, naming the file, rather than on the first connection
        return config

    def server_context(self) -> ssl.SSLContext:
        p = self.prefix
        for what, path in (("tls_cert", self.cert), ("tls_key", self.key), ("tls_client_ca", self.client_ca)):
            if path and not Path(path).is_file():
                raise TlsError(f"{p}{what}: no such file {path}")
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as exc:
            raise TlsError(f"{p}tls_cert {self.cert} / {p}tls_key {self.key}: cannot be loaded ({exc})") from None
        if self.client_ca:
            try:
                ctx.load_verify_locations(self.client_ca)
            except (ssl.SSLError, OSError) as exc:
                raise TlsError(f"{p}tls_client_ca {self.client_ca}: cannot be loaded ({exc})") from None
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def uvicorn_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"ssl_certfile": self.cert, "ssl_keyfile": self.key}
        if self.client_ca:
            options |= {"ssl_ca_certs": self.client_ca, "ssl_cert_reqs": ssl.CERT_REQUIRED}
        return options
