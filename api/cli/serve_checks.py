"""What `mqindex serve` checks before it opens the node, so that a server that cannot work stops at once with one
line naming the flag to change: the listening ports are free, the data dir is writable, and the object store, the
WAL store and the metadata database answer (within `startup_wait_s` for a fault that may heal: a refused
connection, a timeout; at once for one that cannot: no such database, role or bucket, a wrong password)."""

from __future__ import annotations

import getpass
import ipaddress
import socket
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from api.security.redact import REDACTOR


class StartupError(RuntimeError):
    """The server must not start; the message is one line naming the flag and what to do."""


def bind_port(flag: str, host: str, port: int, host_flag: str | None = None) -> list[socket.socket]:
    """Bind `host:port` (every address `host` names) and return the bound sockets; StartupError naming `flag`
    (`host_flag` when the host does not resolve) when the port is taken or cannot be bound. Port 0: a free one."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise StartupError(f"{host_flag or flag}: cannot resolve the host {host!r} to listen on: "
                           f"{exc.strerror or exc}") from None
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listeners bind: TIME_WAIT is no bar
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
                if exc.errno == 98:  # EADDRINUSE
                    raise StartupError(f"{flag}: {where} is already in use by another process: stop it, or choose "
                                       f"another port with {flag}") from None
                raise StartupError(f"{flag}: cannot listen on {where}: {exc.strerror or exc} (choose another "
                                   f"address or port with {flag})") from None
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


def check_port_free(flag: str, host: str, port: int) -> None:
    """StartupError naming `flag` unless `host:port` can be listened on now."""
    for sock in bind_port(flag, host, port):
        sock.close()


def check_data_dir(data_dir: str) -> None:
    """StartupError naming --data-dir unless the folder exists (made if missing) and this user can write in it."""
    d = Path(data_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=d, prefix=".mqindex-write-check-"):
            pass
    except OSError as exc:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "this user"
        raise StartupError(f"--data-dir {d}: cannot write there ({exc.strerror or exc}): the data dir must be a "
                           f"folder the user running mqindex ({user}) can write; make it writable (its owner and "
                           f"mode, or a read-only file system mounted read-write), or give another with --data-dir "
                           f"(data_dir in the config)") from None


def check_reachable(stores: dict[str, str], databases: dict[str, str], wait_s: float) -> None:
    """Check every store (flag -> URL) and database (flag -> URL) at once, each waiting at most `wait_s` seconds;
    StartupError naming the first flag (in the order given) whose URL did not answer."""
    from storage_tier.reachability import Unreachable, check_database, check_store

    checks = [(flag, url, check_store) for flag, url in stores.items()]
    checks += [(flag, url, check_database) for flag, url in databases.items()]
    with ThreadPoolExecutor(max(1, len(checks)), thread_name_prefix="startup-check") as pool:
        futures = [(flag, url, pool.submit(check, url, wait_s)) for flag, url, check in checks]
        for flag, url, future in futures:
            try:
                future.result()
            except Unreachable as exc:
                raise StartupError(f"{flag} {REDACTOR.text(url)} cannot be used: {REDACTOR.text(str(exc))}") \
                    from None


def _wildcard(host: str) -> bool:
    """Whether `host` (an IPv6 one in brackets) names every interface: 0.0.0.0, ::, [::0], 0, * and the like."""
    bare = host.strip().strip("[]")
    if bare in ("", "*"):
        return True
    try:
        return ipaddress.ip_address(bare).is_unspecified
    except ValueError:
        return bare.isdigit() and int(bare) == 0  # "0", which resolves to 0.0.0.0


def check_kafka_advertised(listener: str, advertised: str) -> None:
    """StartupError naming the flag when the address Kafka clients would be told to connect to binds every interface
    (0.0.0.0, ::): the Kafka listener's own with no --kafka-advertised, or --kafka-advertised itself. It is handed
    out in every Metadata and FindCoordinator answer, and a client on another host would connect to 0.0.0.0, which
    is itself. Kafka refuses the same (advertised.listeners cannot use the nonroutable meta-address). Both values
    are HOST:PORT already (api/config.py)."""
    if not listener:
        return
    flag, told = ("--kafka-advertised", advertised) if advertised else ("--kafka-listener", listener)
    host, _, port = told.rpartition(":")
    if not _wildcard(host):
        return
    what = "binds every interface, and clients" if flag == "--kafka-listener" else "is a wildcard: clients"
    raise StartupError(f"{flag} {told} {what} cannot be told to connect to {host}: give the address they reach this "
                       f"node by with --kafka-advertised HOST:PORT (e.g. --kafka-advertised "
                       f"{socket.gethostname()}:{port}; with TLS, a name the certificate holds)")


def check_wal_url(wal: str, store: str) -> None:
    """StartupError naming --wal unless the WAL URL parses and keeps its objects apart from the object store's
    (equal to the store, or inside its bucket and prefix, the WAL's objects would mix with the store's)."""
    from storage_tier import UnsupportedStoreURL
    from storage_tier.store_location import location

    if not wal:
        return
    shown = REDACTOR.text(wal)
    try:
        wal_at = location(wal)
    except UnsupportedStoreURL as exc:
        raise StartupError(f"--wal {shown}: {REDACTOR.text(str(exc).removeprefix(wal + ': '))}") from None
    try:
        store_at = location(store)
    except UnsupportedStoreURL as exc:
        raise StartupError(f"--store {REDACTOR.text(store)}: "
                           f"{REDACTOR.text(str(exc).removeprefix(store + ': '))}") from None
    if store_at.contains(wal_at):
        where = "is the object store itself" if wal_at == store_at else "lies inside the object store's location"
        raise StartupError(f"--wal {shown} {where} (--store {REDACTOR.text(store)}): the WAL's objects would mix "
                           "with the store's. Give the WAL a location of its own, for example a prefix beside the "
                           "store's: s3://BUCKET/PREFIX-wal?endpoint=... for --store s3://BUCKET/PREFIX?endpoint=...")
