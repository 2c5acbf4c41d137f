"""`mqindex security`: make the stored forms of credentials, so the configuration never holds them in clear.

    mqindex security hash-token            reads a token on stdin, prints sha256:<hex> (a key of `tokens`)
    mqindex security scram-credential      reads a password on stdin, prints scram-sha-256:... (`users`);
                                           --mechanism SCRAM-SHA-512 prints scram-sha-512:...
"""

from __future__ import annotations

import argparse
import sys

from api.security.scram import DEFAULT_ITERATIONS, HASHES, MAX_ITERATIONS, MECHANISM, derive_credential
from api.security.tokens import hash_token


def _iterations(text: str) -> int:
    """--iterations as argparse reads it: a usage error outside what the server and clients accept (found before
    the password is read, not after)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not DEFAULT_ITERATIONS <= n <= MAX_ITERATIONS:
        raise argparse.ArgumentTypeError(f"must be {DEFAULT_ITERATIONS} to {MAX_ITERATIONS} (got {n})")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    sub.add_parser("hash-token", help="print sha256:<hex> of the token read on stdin")
    scram = sub.add_parser("scram-credential", help="print the SCRAM-SHA-256 credential of the password on stdin")
    scram.add_argument("--iterations", type=_iterations, default=DEFAULT_ITERATIONS,
                       help=f"PBKDF2 iterations (default {DEFAULT_ITERATIONS})")
    scram.add_argument("--mechanism", choices=sorted(HASHES), default=MECHANISM,
                       help=f"SCRAM mechanism (default {MECHANISM}); its credential goes in scram_sha_256 or "
                            "scram_sha_512 of the user")


def run(args: argparse.Namespace) -> int:
    secret = sys.stdin.readline().rstrip("\r\n")  # stdin, not an argument: arguments show in `ps` and history
    if not secret:
        raise ValueError("nothing on stdin: give the token or password on the first line")
    if args.what == "hash-token":
        print(hash_token(secret))
    else:
        print(derive_credential(secret, iterations=args.iterations, mechanism=args.mechanism).encode())
    return 0
