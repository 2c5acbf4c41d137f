"""`mqindex serve` secured: protected mode, HTTPS and client certificates (a CA the test makes, through httpx),
--metrics-auth, and a run configured with secrets whose logs and responses never show them."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess, wait_for

MQINDEX = str(Path(sys.executable).parent / "mqindex")


def _cert(path: Path, name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
          server: bool = False) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    b = (x509.CertificateBuilder().subject_name(subject)
         .issuer_name(issuer[0].subject if issuer else subject).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                         x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                            critical=False)
    cert = b.sign(issuer[1] if issuer else key, hashes.SHA256())
    (path / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (path / f"{name}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    return cert, key


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, all signed by the CA."""
    d = tmp_path / "pki"
    d.mkdir()
    ca = _cert(d, "ca", None)
    _cert(d, "server", ca, server=True)
    _cert(d, "client", ca)
    return d


class TlsServer(ServerProcess):
    """ServerProcess over HTTPS: `client` is an httpx client trusting the test CA (with a client certificate)."""

    def __init__(self, data_dir: Path, pki: Path, *extra: str, env: dict[str, str] | None = None,
                 client_cert: bool = False, verbose: bool = False) -> None:
        super().__init__(data_dir, "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                         *extra, env=env)
        ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        if client_cert:
            ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
        self.client = httpx.Client(verify=ctx, timeout=10)
        self.verbose = verbose

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> TlsServer:
        cmd = [MQINDEX, *(["-v"] if self.verbose else []), "serve", "--data-dir", str(self.data_dir),
               "--port", str(self.port), *self.extra]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        wait_for("server healthy over TLS", self._healthy, timeout)
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            return self.client.get(self.url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False


def test_protected_mode_refuses_anonymous_on_a_reachable_address(tmp_path: Path) -> None:
    data = tmp_path / "data"
    r = subprocess.run([MQINDEX, "serve", "--data-dir", str(data), "--host", "0.0.0.0", "--port", "0"],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "MQINDEX_TOKENS": ""})
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to serve HTTP on 0.0.0.0 with no authentication" in lines[0], r.stderr
    assert "MQINDEX_TOKENS" in lines[0] and "--allow-anonymous" in lines[0]
    assert not data.exists()  # refused before anything is opened or written
    # a store URL the server cannot use: the error names it, without its keys
    bad = "s3://b/p?endpoint=http://127.0.0.1:1&access_key=AKIDSECRET77&secret_key=SKSECRET88&bogus=1"
    r = subprocess.run([MQINDEX, "serve", "--data-dir", str(data), "--store", bad, "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "bogus" in r.stderr and "secret_key=***" in r.stderr, r.stderr
    assert "AKIDSECRET77" not in r.stderr + r.stdout and "SKSECRET88" not in r.stderr + r.stdout


def test_client_certificates_and_allow_anonymous(tmp_path: Path, pki: Path) -> None:
    server = TlsServer(tmp_path / "data", pki, "--host", "0.0.0.0", "--allow-anonymous",
                       "--tls-client-ca", str(pki / "ca.pem"), client_cert=True)
    server.start()
    try:
        r = server.client.post(server.url + "/v1/topics", json={"name": "t", "partitions": 1})
        assert r.status_code in (200, 201), r.text
        r = server.client.post(server.url + "/v1/topics/t/messages", json={"messages": [{"value": "v", "key": "k"}]})
        assert r.status_code == 200, r.text
        # the server's certificate is trusted, but no client certificate: the handshake is refused
        with httpx.Client(verify=ssl.create_default_context(cafile=str(pki / "ca.pem")), timeout=5) as no_cert, \
                pytest.raises(httpx.HTTPError):
            no_cert.get(server.url + "/healthz").raise_for_status()
        with pytest.raises(httpx.HTTPError):  # nor in clear
            httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5).raise_for_status()
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the test CA refuses the server
            httpx.get(server.url + "/healthz", timeout=5)
        assert server.client.get(server.url + "/metrics").status_code == 200  # anonymous: no --metrics-auth
    finally:
        server.client.close()  # first: uvicorn waits for open keep-alive connections before it stops
        assert server.stop() == 0
    log = server.log.read_text()
    assert "runs with no authentication" in log and "serving https://0.0.0.0:" in log


def test_secrets_never_shown(tmp_path: Path, pki: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> None:
    secrets = {"tokens": ["adminTOKENsecret0001", "readTOKENsecret00002"], "cluster": "clusterTOKENsecret03",
               "s3": ["AKIDsecret000004", "SKsecret/0000+005"], "pg": "pgPASSWORDsecret06"}
    prefix = "sec-" + os.urandom(4).hex()
    store = seaweedfs.store_url("mqindex", prefix, access_key=secrets["s3"][0],
                                secret_key=secrets["s3"][1].replace("+", "%2B").replace("/", "%2F"))
    metadata = pg_url().replace("postgresql://postgres@", f"postgresql://postgres:{secrets['pg']}@")
    assert secrets["pg"] in metadata
    env = {"MQINDEX_TOKENS": f"{secrets['tokens'][0]}=admin;{secrets['tokens'][1]}=read",
           "MQINDEX_CLUSTER_TOKEN": secrets["cluster"]}
    server = TlsServer(tmp_path / "data", pki, "--store", store, "--metadata", metadata, "--metrics-auth",
                       "--upload-interval-s", "0.2", env=env, verbose=True)
    admin = {"Authorization": f"Bearer {secrets['tokens'][0]}"}
    reader = {"Authorization": f"Bearer {secrets['tokens'][1]}"}
    shown: list[str] = []
    server.start()
    try:
        c, url = server.client, server.url

        def call(method: str, path: str, status: int, **kw: object) -> httpx.Response:
            r = c.request(method, url + path, **kw)  # type: ignore[arg-type]
            assert r.status_code == status, (path, r.status_code, r.text)
            shown.append(f"{r.headers}\n{r.text}")
            return r

        call("POST", "/v1/topics", 201, json={"name": "s", "partitions": 1}, headers=admin)
        call("POST", "/v1/topics/s/messages", 200, json={"messages": [{"value": "v", "key": "k"}]}, headers=admin)
        import boto3  # the store with the keys is the one written: objects appear under its prefix

        s3 = boto3.client("s3", endpoint_url=seaweedfs.endpoint, region_name="us-east-1",
                          aws_access_key_id="mqindex", aws_secret_access_key="mqindex")
        wait_for("objects uploaded to S3", lambda: s3.list_objects_v2(
            Bucket="mqindex", Prefix=prefix).get("KeyCount", 0) > 0, timeout=60)
        call("GET", "/v1/messages", 200, params={"topic": "s", "key": "k"}, headers=reader)
        cfg = call("GET", "/v1/config", 200, headers=admin).json()["server"]
        assert cfg["store"].endswith("access_key=***&secret_key=***") and cfg["store"].startswith("s3://mqindex/")
        assert cfg["metadata"].startswith("postgresql://postgres:***@127.0.0.1") and cfg["tokens"] == 2
        assert cfg["tls"] is True and cfg["metrics_auth"] is True and cfg["cluster_token"] is True
        # errors: unknown token, wrong scope, bad input, unknown topic, a store URL in a request body
        call("GET", "/v1/config", 401, headers={"Authorization": f"Bearer {secrets['tokens'][0]}x"})
        call("GET", "/v1/config", 403, headers=reader)
        call("POST", "/v1/topics", 400, json={"name": f"{metadata}", "partitions": 1}, headers=admin)
        call("GET", "/v1/topics/nope/partitions/0/messages", 404, headers=reader)
        call("GET", "/metrics", 401)
        assert "mqindex" in call("GET", "/metrics", 200, headers=reader).text
    finally:
        server.client.close()  # first: uvicorn waits for open keep-alive connections before it stops
        assert server.stop() == 0
    log = server.log.read_text()
    assert "secret_key=***" in log and "postgresql://postgres:***@" in log  # the URLs are logged, masked
    everything = log + "\n".join(shown)
    for secret in [*secrets["tokens"], secrets["cluster"], *secrets["s3"], secrets["pg"],
                   secrets["s3"][1].replace("+", "%2B").replace("/", "%2F")]:
        assert secret not in everything, f"{secret} shown"
