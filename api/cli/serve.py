"""`mqindex serve`: one process serving HTTP on the embedded defaults (or flags, config file, MQINDEX_*)."""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from api.cli.serve_checks import (
    bind_port,
    check_data_dir,
    check_kafka_advertised,
    check_port_free,
    check_reachable,
    check_wal_url,
)
from api.config import Settings, load_settings
from api.node_settings import NODE_SETTINGS, open_kwargs
from api.security.redact import REDACTOR, secrets_of_url
from api.security.startup import kafka_start, secure_start

if TYPE_CHECKING:
    from api.http.health import Readiness
    from broker.node import BrokerNode

log = logging.getLogger("mqindex.serve")

#: container objects allocated (net of those freed) before a young collection; Python's default is 700
YOUNG_COLLECTION_AFTER = 20_000


def settle_collector() -> None:
    """The garbage collector set for serving, once startup is done.

    What exists now (the libraries, the node's state) lives as long as the process: frozen out of the
    collector's generations, full collections no longer walk it. A whole-record read allocates a tuple per
    record, and those collections walking the startup objects cost as much CPU as decoding the records.

    Requests allocate many containers that live only as long as the request (a dict per message of a produce
    body, a tuple per record of a read). At Python's default of 700, a few requests in flight cross it again
    and again: 480 young collections in 128 MiB of 256-message produce requests, 5% of the server's CPU, each
    walking live request objects to find nothing. The count is of containers allocated net of those freed, so
    a higher bound only delays collections while memory grows: cyclic garbage is still collected after
    YOUNG_COLLECTION_AFTER objects of it.
    """
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_AFTER, *gc.get_threshold()[1:])


#: a collection pausing every thread at least this long is logged (it delays lease renewals, see below)
SLOW_COLLECTION_S = 0.25


def report_slow_collections(slow_s: float = SLOW_COLLECTION_S) -> Callable[[str, dict[str, int]], None]:
    """Log each garbage collection that held every thread of the server for `slow_s` or more, with its
    generation and what it found. Such a pause also holds this node's lease renewal and its answers (a renewal
    later than the lease gets a live node failed over), so the log says when one happened. Returns the
    callback registered in gc.callbacks (a test removes it)."""
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.monotonic()
            return
        took = time.monotonic() - started[0]
        if took >= slow_s:
            log.warning("garbage collection paused every thread", extra={
                "generation": info["generation"], "seconds": round(took, 3), "collected": info["collected"],
                "uncollectable": info["uncollectable"], "tracked_objects": sum(gc.get_count())})

    gc.callbacks.append(timed)
    return timed


#: seconds between two probes of the object store (and the shared WAL's store) while serving
READINESS_PROBE_S = 5.0
#: at a stop while the store does not answer: the retry bound of its requests (the WAL keeps what is not uploaded)
STOP_RETRY_S = 2.0
#: how the watched stores are named in /healthz/ready and in the log
WATCHED = {"--store": "object store (--store)", "--wal": "WAL store (--wal)"}


def shared_stores(settings: Settings) -> dict[str, str]:
    """Flag -> URL of the stores this node needs other machines for: the object store, and the WAL's when shared."""
    stores = {"--store": settings.store}
    if settings.wal and not settings.wal.startswith("file://"):
        stores["--wal"] = settings.wal
    return stores


def either(*reasons: Readiness | None) -> Readiness:
    """A readiness that is the first of `reasons` that has a reason not to be ready."""
    def reason() -> str | None:
        for r in reasons:
            found = r() if r is not None else None
            if found is not None:
                return found
        return None

    return reason


def give_up_fast(node: BrokerNode) -> None:
    """Cut the retry bound of the node's stores to STOP_RETRY_S: a stop does not wait out a store that does not
    answer (the final upload fails, the stop is unclean, the WAL keeps the records for the next start)."""
    from storage_tier import BlobStore, RetryPolicy

    for store in (node.store, getattr(node.index, "store", None)):
        if isinstance(store, BlobStore):
            store.retry = RetryPolicy(deadline_s=min(store.retry.deadline_s, STOP_RETRY_S))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file with data_dir, host, port, store, metadata, tokens")
    p.add_argument("--data-dir", dest="data_dir",
                   help="the server's data directory (default: $MQINDEX_DATA_DIR, else ./data)")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8080)")
    p.add_argument("--store", help="object store URL (default file://DATA_DIR/objects)")
    p.add_argument("--metadata", help="metadata database URL (default sqlite:///DATA_DIR/metadata.sqlite)")
    p.add_argument("--node-id", dest="node_id", type=int,
                   help="this broker's id (default 0); brokers sharing one metadata database need distinct ids")
    p.add_argument("--advertised-url", dest="advertised_url",
                   help="URL the other nodes use to reach this one (default http://HOST:PORT)")
    p.add_argument("--wal", help="WAL location: file://DIR (default DATA_DIR/wal) or a store URL (s3://..., "
                                 "postgresql://...) for a shared WAL that another node replays after a crash")
    p.add_argument("--lease-ms", dest="lease_ms", type=int,
                   help="node lease: dead to the others this long after its last heartbeat (default 10000)")
    for s in NODE_SETTINGS:  # every node and index setting (api/node_settings.py, docs/OPERATIONS.md)
        p.add_argument("--" + s.name.replace("_", "-"), dest=s.name, metavar="N",
                       help=f"{s.help} (default {s.default if s.default is not None else 'unset'})")
    # -- Kafka listener (api/kafka) --
    p.add_argument("--kafka-listener", dest="kafka_listener",
                   help="HOST:PORT of the Kafka wire protocol listener (default 127.0.0.1:9092; empty: off); "
                        "also the address this node advertises to Kafka clients")
    p.add_argument("--kafka-advertised", dest="kafka_advertised",
                   help="HOST:PORT Kafka clients are told to connect to, when it is not the listener's own address "
                        "(behind NAT or a TCP proxy); the address the cluster membership names")
    p.add_argument("--kafka-tls-cert", dest="kafka_tls_cert",
                   help="PEM certificate (chain) of the Kafka listener: clients connect with SSL or SASL_SSL")
    p.add_argument("--kafka-tls-key", dest="kafka_tls_key", help="PEM private key of --kafka-tls-cert")
    p.add_argument("--kafka-tls-client-ca", dest="kafka_tls_client_ca",
                   help="PEM CA bundle: Kafka clients must present a certificate signed by it (mutual TLS)")
    # -- security (api/security/, docs/OPERATIONS.md "Security") --
    p.add_argument("--allow-anonymous", dest="allow_anonymous", action="store_const", const=True,
                   help="serve with no tokens on a non-loopback address (refused otherwise: protected mode)")
    p.add_argument("--tls-cert", dest="tls_cert", help="PEM certificate (chain): serve HTTPS (with --tls-key)")
    p.add_argument("--tls-key", dest="tls_key", help="PEM private key of --tls-cert")
    p.add_argument("--tls-client-ca", dest="tls_client_ca",
                   help="PEM CA bundle: clients must present a certificate signed by it (mutual TLS)")
    p.add_argument("--metrics-auth", dest="metrics_auth", action="store_const", const=True,
                   help="/metrics requires a token with the read scope")
    p.add_argument("--access-log", dest="access_log", action="store_const", const=True,
                   help="log a line per HTTP request (off by default: it costs a sixth of a small request's CPU; "
                        "/metrics counts requests per route)")
    p.add_argument("--startup-wait-s", dest="startup_wait_s", type=float, metavar="S",
                   help="seconds to wait at start for the object store, the WAL store and the metadata database "
                        "to answer before giving up (default 10)")
    p.add_argument("--search-master", dest="search_master",
                   help="Spark master of value searches (POST /v1/searches): local[N] in this process (default "
                        "local[2]) or a cluster's spark://HOST:PORT")
    p.add_argument("--min-free-bytes", dest="min_free_bytes", type=int,
                   help="free-space floor of the data paths: writes are refused below it "
                        "(default 1%% of the filesystem or 256 MiB, whichever is smaller)")


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from api.http.app import app_for_node
    from api.security.redact import install_log_redaction
    from broker.node import BrokerNode
    from storage_tier.reachability import StoreWatch

    settings = load_settings(args.config, data_dir=args.data_dir, host=args.host, port=args.port,
                             store=args.store, metadata=args.metadata, node_id=args.node_id,
                             advertised_url=args.advertised_url, lease_ms=args.lease_ms, wal=args.wal,
                             min_free_bytes=args.min_free_bytes, allow_anonymous=args.allow_anonymous,
                             startup_wait_s=args.startup_wait_s, search_master=args.search_master,
                             tls_cert=args.tls_cert, tls_key=args.tls_key, tls_client_ca=args.tls_client_ca,
                             metrics_auth=args.metrics_auth, access_log=args.access_log,
                             kafka_listener=args.kafka_listener, kafka_advertised=args.kafka_advertised,
                             kafka_tls_cert=args.kafka_tls_cert, kafka_tls_key=args.kafka_tls_key,
                             kafka_tls_client_ca=args.kafka_tls_client_ca,
                             **{s.name: getattr(args, s.name) for s in NODE_SETTINGS}).resolved()
    check_kafka_advertised(settings.kafka_listener, settings.kafka_advertised)
    tls = secure_start(settings)  # secrets registered for redaction, TLS files checked, protected mode
    REDACTOR.add(secrets_of_url(settings.wal))
    check_wal_url(settings.wal, settings.store)
    kafka_tls, kafka_auth = kafka_start(settings) if settings.kafka_listener else (None, None)
    # before anything opens (api/cli/serve_checks.py): the ports are free, the stores and the metadata answer.
    # The HTTP port stays bound from here on: uvicorn serves these sockets
    http_sockets = bind_port("--port", settings.host, settings.port, host_flag="--host")
    try:
        if settings.kafka_listener:
            from api.kafka.context import split_address

            check_port_free("--kafka-listener", *split_address(settings.kafka_listener))
        check_data_dir(settings.data_dir)
        check_reachable(shared_stores(settings), {"--metadata": settings.metadata}, settings.startup_wait_s)
        log.info("opening the node (recovering from the WAL and the index state folders if needed)",
                 extra={"data_dir": settings.data_dir})
        node = BrokerNode.open(settings.data_dir, settings.store, settings.metadata, node_id=settings.node_id,
                               http_address=settings.advertised_url,
                               kafka_address=(settings.kafka_advertised or settings.kafka_listener) or None,
                               lease_ms=settings.lease_ms,
                               cluster_token=settings.cluster_token or None, min_free_bytes=settings.min_free_bytes,
                               wal_url=settings.wal or None,
                               **open_kwargs(settings.node))
    except BaseException:
        for sock in http_sockets:
            sock.close()
        raise
    from api.security.access import AccessControl, DenialCollector

    access = AccessControl.from_settings(settings).start()  # ACL rules of the metadata database, kept current
    kafka = None
    if settings.kafka_listener:  # -- Kafka listener (api/kafka) --
        from api.kafka import KafkaServer
        from api.kafka.context import split_address
        from api.node_settings import value

        kafka = KafkaServer(node, *split_address(settings.kafka_listener), tls=kafka_tls,
                            authenticator=kafka_auth, advertised=settings.kafka_advertised or None, access=access,
                            auto_create_topics=bool(value(settings.node, "auto_create_topics")),
                            default_partitions=int(value(settings.node, "default_partitions")))
        kafka.start()
    app = app_for_node(settings, node)
    app.state.access = access  # the same rules for HTTP (api/http/auth.py)
    app.state.metrics.registry.register(DenialCollector(access))  # mqindex_authorization_denials_total
    if kafka is not None:  # mqindex_kafka_request_seconds{api}
        from api.kafka.schemas import APIS

        kafka.observe = app.state.metrics.kafka_observer({key: api.name for key, api in APIS.items()})
    app.state.kafka_context = kafka.ctx if kafka is not None else None  # consumer groups (api/http/group_routes.py)
    from broker.partitions.throughput import ThroughputHistory

    app.state.throughput = ThroughputHistory(node.partitions).start()  # the console's sparklines (console_routes.py)
    if kafka is not None:
        from api.http.group_metrics import GroupLagExposition

        app.state.metrics_text = [GroupLagExposition(kafka.ctx).render]  # mqindex_group_lag, mqindex_group_lag_seconds
    # readiness (/healthz/ready) is also false while the object store or the shared WAL's store does not answer
    watch = StoreWatch({WATCHED[flag]: url for flag, url in shared_stores(settings).items()},
                       READINESS_PROBE_S).start()
    app.state.readiness = either(app.state.readiness, watch.reason)
    settle_collector()
    report_slow_collections()
    scheme = "https" if tls else "http"
    log.info("serving %s://%s:%s (store %s, metadata %s, data %s)", scheme, settings.host, settings.port,
             settings.store, settings.metadata, settings.data_dir,
             extra={"host": settings.host, "port": settings.port, "store": settings.store,
                    "metadata": settings.metadata, "data_dir": settings.data_dir})
    # uvicorn handles SIGTERM/SIGINT: it stops accepting and finishes in-flight requests, then re-raises
    # the signal to the handler that was there before it. Ours records it, so the process goes on to
    # close what it holds and exits 0 instead of dying by the signal.
    stopped_by: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopped_by.append(signum))
    # uvloop's loop and httptools' parser (both C) rather than asyncio's loop and h11 (pure Python): named
    # here, so the server does not depend on what else happens to be installed
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="info",
                            access_log=settings.access_log, loop="uvloop", http="httptools",
                            **(tls.uvicorn_options() if tls else {}))
    install_log_redaction()  # again: uvicorn's own handlers exist now
    uvicorn.Server(config).run(sockets=http_sockets)
    unreachable = watch.check_now(timeout=STOP_RETRY_S + 1)
    watch.stop()
    if unreachable is not None:
        give_up_fast(node)
        log.warning("stopping while %s: the final upload is tried for %ss only; the WAL keeps every acknowledged "
                    "record and the next start uploads them", unreachable, STOP_RETRY_S)
    app.state.throughput.stop()
    # uploads what is cached, marks a clean shutdown, closes streams and the index. The Kafka listener answers
    # meanwhile, as Kafka's controlled shutdown moves leadership before the broker stops listening: each request
    # NOT_LEADER_OR_FOLLOWER (NOT_COORDINATOR for a group's or transaction's), so clients go to the node that takes
    # each partition over (api/kafka/server.py) instead of meeting a closed port for the whole close
    try:
        node.close()
    finally:
        if kafka is not None:
            kafka.stop()
        access.stop()  # after the listener: its requests are checked against the rules until it stops
    log.info("stopped", extra={"signal": stopped_by[0] if stopped_by else None})
    return 0
