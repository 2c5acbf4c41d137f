"""The API documentation pages, /docs (Swagger UI) and /redoc (ReDoc), render in headless Chromium with every
request to anywhere but the server itself refused: their scripts and styles come from the server, which needs
no token for them even when tokens are configured."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from tests.api.server import ServerProcess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is needed for the web page tests: apt-get install chromium (make test does it)",
                    pytrace=False)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with tokens configured: the documentation must not need one."""
    data = tmp_path_factory.mktemp("docs-page") / "data"
    s = ServerProcess(data, env={"MQINDEX_TOKENS": "adminTOKENsecret0001=admin"}).start()
    try:
        yield s
    finally:
        s.stop()


def offline_page(browser: Browser) -> tuple[Page, list[str]]:
    """A page whose requests to any host but the loopback are aborted (and listed)."""
    page = browser.new_page()
    refused: list[str] = []

    def only_local(route: Route) -> None:
        host = urlsplit(route.request.url).hostname
        if host in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    return page, refused


def test_swagger_ui_renders_the_operations_offline(server: ServerProcess, browser: Browser,
                                                   artifacts_dir: Path) -> None:
    page, refused = offline_page(browser)
    try:
        failed: list[str] = []
        page.on("requestfailed", lambda r: failed.append(r.url))
        page.goto(server.url + "/docs")
        expect(page.locator(".opblock").first).to_be_visible(timeout=30_000)
        assert page.locator(".opblock").count() >= 10
        create = page.locator(".opblock-post", has=page.locator(".opblock-summary-path", has_text="/v1/topics"))
        expect(create.first).to_be_visible()
        expect(page.locator(".opblock-summary-path", has_text="/v1/topics/{topic}/messages").first).to_be_visible()
        page.screenshot(path=str(artifacts_dir / "api-docs-swagger-ui.png"), full_page=False)
        assert refused == [], refused
        assert failed == [], failed
    finally:
        page.close()


def test_redoc_renders_offline(server: ServerProcess, browser: Browser) -> None:
    page, refused = offline_page(browser)
    try:
        page.goto(server.url + "/redoc")
        expect(page.get_by_text("/v1/topics/{topic}/messages").first).to_be_attached(timeout=30_000)
        expect(page.locator("h1", has_text="mqindex").first).to_be_visible()
        # the one thing ReDoc's script asks another host for: its "API docs by Redocly" logo image
        assert all(url.endswith(".svg") for url in refused), refused
    finally:
        page.close()


def test_the_assets_need_no_token(server: ServerProcess) -> None:
    assert httpx.post(f"{server.url}/v1/topics", json={"name": "t"}).status_code == 401  # tokens are on
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/assets/swagger-ui-bundle.js",
                 "/docs/assets/swagger-ui.css", "/docs/assets/redoc.standalone.js"):
        r = httpx.get(server.url + path, timeout=60)
        assert r.status_code == 200, (path, r.status_code)
    page = httpx.get(server.url + "/docs", timeout=60).text
    assert "cdn" not in page.lower() and "/docs/assets/swagger-ui-bundle.js" in page
