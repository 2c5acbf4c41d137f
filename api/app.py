"""The FastAPI application: routes, bearer-token scopes and JSON errors for bad input."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.config import Settings
from api.metrics import Metrics
from storage_tier import BlobStore


def create_app(settings: Settings, store: BlobStore) -> FastAPI:
    app = FastAPI(title="mqindex", version="0.1.0",
                  description="Produce, fetch and find messages by key or id on object storage.")
    metrics = Metrics()
    metrics.watch_store(store)
    app.state.settings = settings
    app.state.store = store
    app.state.metrics = metrics

    @app.middleware("http")
    async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        metrics.http_requests.labels(path, str(response.status_code)).inc()
        metrics.http_latency.labels(path).observe(time.perf_counter() - started)
        return response

    @app.exception_handler(RequestValidationError)
    async def bad_input(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        field = ".".join(str(p) for p in errors[0]["loc"] if p not in ("body", "query", "path")) if errors else ""
        return JSONResponse(status_code=400, content={"error": errors[0]["msg"] if errors else "bad request",
                                                      "field": field})

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics_text() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
