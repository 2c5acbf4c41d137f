"""The FastAPI application: routes, metrics, JSON errors, the web lookup page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Depends, FastAPI, Response
from fastapi.responses import HTMLResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.backend import Backend
from api.config import Settings
from api.http import docs_pages, errors, health
from api.http.acl_routes import router as acl_router
from api.http.auth import AuthenticateFirst, require
from api.http.body_limit import BodyLimit
from api.http.compaction_metrics import CompactionCollector
from api.http.console_routes import page_with_scripts
from api.http.console_routes import router as console_router
from api.http.group_routes import router as group_router
from api.http.health import Readiness
from api.http.index_admin_routes import router as index_admin_router
from api.http.metrics import (
    ClusterMergeCollector,
    FilterMemoryCollector,
    MergeCollector,
    Metrics,
    published_merger,
)
from api.http.metrics_route import PiecesResponse
from api.http.models import MAX_REQUEST_BYTES
from api.http.produce_lane import ProduceLane
from api.http.request_metrics import RequestMetrics
from api.http.routes import router
from api.http.search_routes import router as search_router
from api.http.topic_routes import router as topic_router
from api.http.txn_routes import router as txn_router
from broker.node import BrokerNode
from index_service.lookup_stats import LookupCollector
from storage_tier import BlobStore


def create_app(settings: Settings, backend: Backend, stores: Mapping[str, BlobStore] | None = None,
               metrics: Metrics | None = None, readiness: Readiness | None = None) -> FastAPI:
    # redirect_slashes off: a path with a slash too many (or too few) is a 404 saying the path to use
    # (api/http/errors.py), not a 307 with an empty body that a client not following redirects for POST stops at
    app = FastAPI(title="mqindex", version="0.1.0", docs_url=None, redoc_url=None,  # api/http/docs_pages.py
                  redirect_slashes=False,
                  description="Produce, fetch and find messages by key or id on object storage. Every error "
                              "answers JSON {\"error\", \"field\"}; bad input is a 4xx naming the field "
                              "(validation errors are 400, never 422); damage in the store is a 502 that also "
                              "names the \"object\" and the failed \"check\".")
    metrics = metrics or Metrics()
    metrics.watch_stores(stores or {})
    app.state.settings = settings
    app.state.backend = backend
    app.state.metrics = metrics
    app.state.readiness = readiness
    errors.install(app)
    app.add_middleware(ProduceLane)  # innermost: inside the authentication, the body limit and the metrics
    app.add_middleware(AuthenticateFirst)  # an anonymous request's body is never read
    app.add_middleware(BodyLimit, limit=MAX_REQUEST_BYTES)
    app.add_middleware(RequestMetrics, metrics=metrics)  # outside BodyLimit: its 413 answers are counted too
    app.include_router(router)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.include_router(topic_router)
    app.include_router(health.router)
    app.include_router(console_router)
    app.include_router(index_admin_router)
    app.include_router(group_router)
    app.include_router(txn_router)
    app.include_router(acl_router)  # /v1/admin/acls
    app.include_router(search_router)  # /v1/searches: value searches as Spark jobs
    docs_pages.install(app)

    # --metrics-auth: /metrics asks for a token with the read scope, like the data it describes
    metrics_guard = [Depends(require("read"))] if getattr(settings, "metrics_auth", False) else []

    @app.get("/metrics", include_in_schema=False, dependencies=metrics_guard)
    def metrics_text() -> Response:
        # + families rendered as text by their owners (api/http/group_metrics.py: too many series for the registry),
        # as bytes or a list of pieces: sent as they are, never joined whole (it can be megabytes; metrics_route.py)
        parts = [generate_latest(metrics.registry)]
        for render in getattr(app.state, "metrics_text", ()):
            got = render()
            parts += [got] if isinstance(got, bytes) else got
        return PiecesResponse(parts, media_type=CONTENT_TYPE_LATEST)

    page_html = page_with_scripts()

    @app.get("/", include_in_schema=False, response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse(page_html)

    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI documents a 422 for every route with parameters; this server answers validation errors with a
    400 in the {"error", "field"} shape (api/http/errors.py), so the document says that instead."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        for item in schema.get("paths", {}).values():
            for op in item.values():
                if isinstance(op, dict):
                    op.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(name, None)
        app.openapi_schema = schema
    return app.openapi_schema


def app_for_node(settings: Settings, node: BrokerNode) -> FastAPI:
    """The app over a broker node, with its object stores, index files and WAL in the metrics."""
    stores: dict[str, BlobStore] = {"broker": node.store}
    index_store = getattr(node.index, "store", None)
    if isinstance(index_store, BlobStore) and index_store is not node.store:
        stores["index"] = index_store
    metrics = Metrics()
    metrics.watch_node(node.index_files, lambda: int(node.wal.fsyncs))
    metrics.watch_disk(node.storage.disk)
    node.wal.fsync_observer = metrics.wal_fsync.observe
    metrics.registry.register(CompactionCollector(node.compactor))  # broker/compaction figures
    stats = getattr(node.index, "lookup_stats", None)
    if stats is not None:  # key filter answers, files and GETs per lookup (index_service/lookup_stats.py)
        metrics.registry.register(LookupCollector(stats))
    holders = {"local": getattr(node.index, "filters", None),
               "published": getattr(getattr(getattr(node, "cluster", None), "index", None), "filters", None)}
    merger = getattr(getattr(node.index, "background", None), "merger", None)
    if merger is not None:
        metrics.registry.register(MergeCollector(merger.stats))
    metrics.registry.register(FilterMemoryCollector({k: v for k, v in holders.items() if v is not None}))
    metrics.registry.register(ClusterMergeCollector(lambda: getattr(published_merger(node), "stats", None)))

    def readiness() -> str | None:
        metadata = node.metadata_unavailable()
        if metadata is not None:
            return metadata
        if node.storage.failed is not None:
            return f"not accepting writes: the node failed: {node.storage.failed}"
        episode = node.storage.disk.episode
        return None if episode is None else f"not accepting writes: out of disk on {episode.path}"

    def liveness() -> str | None:
        failed = node.storage.failed
        return None if failed is None else f"the node failed and acknowledges nothing until it is restarted: {failed}"

    app = create_app(settings, node, stores, metrics, readiness)
    app.state.liveness = liveness
    return app
