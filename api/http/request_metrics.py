"""Request count and latency per route template, as a plain ASGI middleware.

Plain ASGI rather than Starlette's `@app.middleware("http")`: that wraps every response in a task group and a
memory stream that re-sends the body in chunks, which cost about a third of a small request's CPU here.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.http.metrics import Metrics


class RequestMetrics:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # no response started: the error middleware outside answers 500

        async def noted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noted)
        finally:
            # the router sets the matched route in the scope it was handed (this one)
            path = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.http_requests.labels(path, str(status)).inc()
            self.metrics.http_latency.labels(path).observe(time.perf_counter() - started)
