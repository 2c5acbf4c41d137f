"""Security settings: users from the config file, booleans from the environment, half a TLS configuration
refused, hashed tokens and --metrics-auth on a real app."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.config import ConfigError, Settings, load_settings
from api.http.app import app_for_node
from api.security.scram import derive_credential
from api.security.tls import TlsConfig, TlsError
from api.security.tokens import hash_token
from broker.node import BrokerNode


def test_security_settings_parse(tmp_path: Path) -> None:
    cred = derive_credential("pw").encode()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'tls_cert = "/c.pem"\n[users.alice]\nscopes = ["read"]\nscram_sha_256 = "{cred}"\n')
    s = load_settings(str(cfg), env={"MQINDEX_METRICS_AUTH": "true", "MQINDEX_ALLOW_ANONYMOUS": "0"})
    assert s.users == {"alice": {"scopes": ["read"], "scram_sha_256": cred}} and s.metrics_auth
    assert not s.allow_anonymous and s.tls_cert == "/c.pem"
    assert s.resolved().advertised_url.startswith("https://")
    for env, msg in (({"MQINDEX_METRICS_AUTH": "maybe"}, "metrics_auth must be true or false"),
                     ({"MQINDEX_TOKENS": "abc=write"}, "unknown scopes")):
        with pytest.raises(ConfigError, match=msg) as err:
            load_settings(None, env=env)
        assert "abc=" not in str(err.value)
    cfg.write_text('[users.bob]\nscopes = ["read"]\nscram_sha_256 = "hunter2"\n')
    with pytest.raises(ConfigError, match="user 'bob'") as err:
        load_settings(str(cfg), env={})
    assert "hunter2" not in str(err.value)
    with pytest.raises(TlsError, match="both tls_cert and tls_key"):
        TlsConfig.from_settings("/c.pem", "", "")
    with pytest.raises(TlsError, match="tls_client_ca needs"):
        TlsConfig.from_settings("", "", "/ca.pem")
    with pytest.raises(TlsError, match="tls_cert: no such file /nope.pem"):
        TlsConfig.from_settings("/nope.pem", "/nope.key", "")


@pytest.fixture
def secured(tmp_path: Path) -> Callable[..., TestClient]:
    made: list[tuple[TestClient, BrokerNode]] = []

    def make(**kw: object) -> TestClient:
        settings = Settings(data_dir=str(tmp_path / f"d{len(made)}"), **kw).resolved()  # type: ignore[arg-type]
        node = BrokerNode.open(settings.data_dir, settings.store, settings.metadata)
        made.append((TestClient(app_for_node(settings, node)), node))
        return made[-1][0]

    yield make  # type: ignore[misc]
    for client, node in made:
        client.close()
        node.close()


def test_hashed_tokens_and_metrics_auth(secured: Callable[..., TestClient]) -> None:
    c = secured(tokens={hash_token("reader-token-00001"): ["read"], "producer-token-0002": ["produce"]},
                metrics_auth=True)
    read = {"Authorization": "Bearer reader-token-00001"}
    assert c.get("/metrics").status_code == 401
    assert c.get("/metrics", headers={"Authorization": "Bearer producer-token-0002"}).status_code == 403
    assert c.get("/metrics", headers=read).status_code == 200
    assert c.get("/v1/topics", headers=read).status_code == 200
    assert c.get("/v1/topics", headers={"Authorization": f"Bearer {hash_token('reader-token-00001')}"}
                 ).status_code == 401  # the hash is not a token
    open_metrics = secured(tokens={"reader-token-00001": ["read"]})  # without --metrics-auth: open as before
    assert open_metrics.get("/metrics").status_code == 200
