"""Security costs, each next to its peer in the same run:

1. a bearer-token check with the tokens kept hashed (SHA-256, constant-time compare with every entry) vs the
   former check comparing the token in clear with every entry;
2. one log record through a handler with the redacting filter vs the same handler without it;
3. a SASL/PLAIN login (PBKDF2 with 4096 iterations) vs a SCRAM-SHA-256 exchange (same PBKDF2 on the client,
   server side only HMACs) vs a bearer-token check.

Run: `mqindex bench security [--n 20000] [--tokens 16]`.
"""

from __future__ import annotations

import argparse
import hmac
import io
import logging
import time
from collections.abc import Callable

from kafka.net.sasl.scram import ScramClient

from api.security.authenticator import Authenticator
from api.security.redact import RedactingFilter, Redactor
from api.security.scram import derive_credential


def per_op_us(fn: Callable[[], object], n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n * 1e6


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench security")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--tokens", type=int, default=16)
    a = ap.parse_args(argv)
    tokens = {f"token-{i:04d}-abcdefghijklmnop": ["read"] for i in range(a.tokens)}
    auth = Authenticator(tokens, {"alice": {"scopes": ["read"], "scram_sha_256": derive_credential("pw").encode()}})
    probe = f"token-{a.tokens - 1:04d}-abcdefghijklmnop"

    def clear() -> object:  # the former api/http/auth.py loop
        found = None
        for known, scopes in tokens.items():
            if hmac.compare_digest(known.encode(), probe.encode()):
                found = scopes
        return found

    hashed_us, clear_us = per_op_us(lambda: auth.bearer(probe), a.n), per_op_us(clear, a.n)
    print(f"token check, {a.tokens} tokens: hashed {hashed_us:.2f} us, in clear {clear_us:.2f} us, "
          f"ratio {hashed_us / clear_us:.2f}")

    def logger(filtered: bool) -> logging.Logger:
        lg = logging.Logger(f"bench{filtered}")
        h = logging.StreamHandler(io.StringIO())
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        if filtered:
            h.addFilter(RedactingFilter(Redactor(tokens)))
        lg.addHandler(h)
        return lg

    plain_log, red_log = logger(False), logger(True)
    msg = ("serving %s (store %s)", "https://0.0.0.0:8080", "s3://b/p?endpoint=http://h:8333&secret_key=abc")
    red_us = per_op_us(lambda: red_log.info(*msg), a.n)
    raw_us = per_op_us(lambda: plain_log.info(*msg), a.n)
    print(f"log record: redacted {red_us:.2f} us, not {raw_us:.2f} us, ratio {red_us / raw_us:.2f}")

    def scram() -> object:
        c, s = ScramClient("alice", "pw", "SCRAM-SHA-256"), auth.scram()
        c.process_server_first_message(s.first(c.first_message()))
        return c.process_server_final_message(s.final(c.final_message()))

    logins = max(20, a.n // 200)
    plain_us = per_op_us(lambda: auth.plain(b"\0alice\0pw"), logins)
    scram_us = per_op_us(scram, logins)
    print(f"login: PLAIN {plain_us / 1000:.2f} ms, SCRAM-SHA-256 exchange (client + server) {scram_us / 1000:.2f} ms, "
          f"bearer {hashed_us / 1000:.4f} ms; PLAIN/bearer {plain_us / hashed_us:.0f}x")
    return 0
