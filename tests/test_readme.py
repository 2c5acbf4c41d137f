"""README.md's shell blocks run as written.

The first ```sh block is the two commands: `make run` is started as the Makefile has it (its recipe, read with
`make -n run`, in a scratch folder holding a link to this checkout's .venv: the README's commands run "in the
checkout", and the scratch folder keeps the checkout's ./data untouched); `make test` is this run. Every other
```sh block then runs in one bash, in order, in that folder, as a user pasting them into a shell would
(`set -e -o pipefail`: any failing command fails the test, naming the block). Where the README tells the user to
stop `make run`, the test stops it the way Ctrl-C does (SIGINT to its process) and checks it exits 0.

The README's commands use fixed ports (8080, 9092 and the others it names): the test fails at once, naming the
port, if one is taken. It uses the machine's PostgreSQL as the README says and drops the README's schemas
before and after. Code blocks must be fenced with a language; an indented code block is refused, since it
would not be run.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SHELL_LANGS = {"sh", "bash", "shell", "console"}
STOP_MAKE_RUN = "stop `make run`"
MSG_ID = re.compile(r"\b[0-9A-Fa-f]{32}\b")


@dataclass
class Block:
    lang: str
    code: str
    line: int  # 1-based line of the opening fence
    after_stop: bool  # comes after the README tells the user to stop `make run`


def parse(text: str) -> tuple[list[Block], list[int]]:
    """The fenced blocks, and the lines of any indented (unfenced) code block."""
    blocks: list[Block] = []
    indented: list[int] = []
    lines = text.splitlines()
    in_fence: tuple[str, int, list[str]] | None = None
    stop_seen = False
    prev_blank, prev_text = True, ""
    for i, line in enumerate(lines, 1):
        if in_fence is not None:
            if line.startswith("```"):
                lang, start, body = in_fence
                blocks.append(Block(lang, "\n".join(body) + "\n", start, stop_seen))
                in_fence = None
            else:
                in_fence[2].append(line)
            continue
        if line.startswith("```"):
            in_fence = (line[3:].strip().lower(), i, [])
            continue
        if STOP_MAKE_RUN in line:
            stop_seen = True
        if (line.startswith("    ") or line.startswith("\t")) and line.strip() and prev_blank \
                and not re.match(r"\s*([-*+]|\d+\.)\s", prev_text):
            indented.append(i)
        prev_blank = not line.strip()
        if line.strip():
            prev_text = line
    assert in_fence is None, f"README.md: the fence opened at line {in_fence[1]} is never closed"
    return blocks, indented


def test_every_code_block_is_fenced_with_a_language() -> None:
    blocks, indented = parse(README.read_text())
    assert not indented, f"README.md: indented code blocks at lines {indented}: fence them (```sh) so they are run"
    unlabeled = [b.line for b in blocks if not b.lang]
    assert not unlabeled, f"README.md: code fences without a language at lines {unlabeled} (```sh, ```text, ...)"


def readme_ports(blocks: list[Block]) -> set[int]:
    code = "\n".join(b.code for b in blocks)
    ports = {int(p) for p in re.findall(r"(?<!@)(?:localhost|127\.0\.0\.1|0\.0\.0\.0):(\d+)", code)}
    ports |= {int(p) for p in re.findall(r"--port (\d+)", code)}
    return ports | {8080, 9092}  # `mqindex serve`'s defaults, which `make run` uses


def port_taken(port: int) -> bool:
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return True
    return False


def drop_schemas(code: str) -> list[str]:
    """Drop the PostgreSQL schemas the README's blocks use (named `schema=NAME` on the README's `PG=` URL)."""
    import psycopg

    m = re.search(r"^PG='([^']+)'", code, re.M)
    if m is None:
        return []
    schemas = re.findall(r"schema=(\w+)", code)
    with psycopg.connect(m.group(1), autocommit=True, connect_timeout=5) as conn:
        for name in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    return schemas


def schema_exists(code: str, name: str) -> bool:
    import psycopg

    m = re.search(r"^PG='([^']+)'", code, re.M)
    assert m is not None
    with psycopg.connect(m.group(1), connect_timeout=5) as conn:
        return conn.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
                            (name,)).fetchone() is not None


def make_run_recipe() -> list[str]:
    # as a user's shell runs it: not as a sub-make of `make test` (whose flags would add "make[1]: ..." lines)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    out = subprocess.run(["make", "--no-print-directory", "-n", "run"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return shlex.split(out.stdout.strip().splitlines()[-1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"`make run` exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"`make run` not ready after {timeout:.0f}s:\n{log.read_text()[-3000:]}")


def stop_group(proc: subprocess.Popen[bytes], grace: float = 30) -> None:
    """Stop a process and everything it started in its process group (the README's background servers)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                proc.poll()
                return
            proc.poll()
            time.sleep(0.1)


@pytest.mark.slow(seconds=35)
def test_shell_blocks_run_as_written(tmp_path: Path) -> None:
    blocks, _ = parse(README.read_text())
    shell = [b for b in blocks if b.lang in SHELL_LANGS]
    first, rest = shell[0], shell[1:]
    commands = [ln.split("#")[0].strip() for ln in first.code.splitlines() if ln.split("#")[0].strip()]
    assert commands == ["make run", "make test"], f"README.md line {first.line}: the two commands: {commands}"
    recipe = make_run_recipe()
    assert recipe == [".venv/bin/mqindex", "serve"], recipe
    assert any(b.after_stop for b in rest), f"README.md never says to {STOP_MAKE_RUN}"

    taken = sorted(p for p in readme_ports(shell) if port_taken(p))
    if taken:
        pytest.fail(f"ports {taken} are in use (a `make run` or another server?): README.md's examples use them; "
                    "stop what listens there and run again", pytrace=False)

    all_code = "\n".join(b.code for b in rest)
    schemas = drop_schemas(all_code)
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQINDEX_")} | {"PYTHONUNBUFFERED": "1"}

    server_log = tmp_path / "make-run.log"
    with open(server_log, "wb") as log:
        server = subprocess.Popen(recipe, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    driver: subprocess.Popen[bytes] | None = None
    try:
        wait_ready("http://127.0.0.1:8080/healthz/ready", server, server_log)
        script = ["set -e -o pipefail",
                  """trap 'echo "README block failed at: $BASH_COMMAND (exit $?)" >&2' ERR"""]
        stopped = False
        for n, b in enumerate(rest):
            (tmp_path / f"block{n}.sh").write_text(b.code)
            if b.after_stop and not stopped:  # Ctrl-C in the shell running `make run`
                script.append("touch stop-make-run; timeout 90 sh -c 'until [ -e make-run.rc ]; do sleep 0.1; done'")
                stopped = True
            script.append(f"echo {n} > current-block; {{ source block{n}.sh; }} > out{n}.txt 2> err{n}.txt")
        script.append("echo done > current-block")
        (tmp_path / "readme.sh").write_text("\n".join(script) + "\n")
        with open(tmp_path / "driver.log", "wb") as dlog:
            driver = subprocess.Popen(["bash", "readme.sh"], cwd=tmp_path, env=env, stdout=dlog,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        rc, deadline = None, time.monotonic() + 900
        while rc is None and time.monotonic() < deadline:
            rc = driver.poll()
            if (tmp_path / "stop-make-run").exists() and not (tmp_path / "make-run.rc").exists():
                server.send_signal(signal.SIGINT)  # Ctrl-C in the shell running `make run`
                try:
                    (tmp_path / "make-run.rc").write_text(str(server.wait(60)))
                except subprocess.TimeoutExpired:
                    (tmp_path / "make-run.rc").write_text("still running 60 s after Ctrl-C")
            time.sleep(0.1)
        at = (tmp_path / "current-block").read_text().strip() if (tmp_path / "current-block").exists() else "0"
        if rc != 0:
            b = rest[int(at)] if at.isdigit() else rest[-1]
            out = (tmp_path / f"out{at}.txt").read_text()[-3000:] if at.isdigit() else ""
            err = (tmp_path / f"err{at}.txt").read_text()[-4000:] if at.isdigit() else ""
            pytest.fail(f"README.md's shell block at line {b.line} failed (exit {rc}):\n{b.code}\n"
                        f"--- stdout:\n{out}\n--- stderr:\n{err}\n--- driver:\n"
                        f"{(tmp_path / 'driver.log').read_text()[-2000:]}", pytrace=False)
        assert at == "done"
        assert (tmp_path / "make-run.rc").read_text() == "0", \
            "`make run` did not exit 0 on Ctrl-C:\n" + server_log.read_text()[-3000:]

        outputs = {b.line: (tmp_path / f"out{n}.txt").read_text() for n, b in enumerate(rest)}
        check_outputs(rest, outputs)
        for name in schemas:  # the PostgreSQL examples stored their metadata and objects where they say
            assert schema_exists(all_code, name), name
        left = sorted(p for p in readme_ports(shell) if port_taken(p))
        assert not left, f"ports {left} still listened on after README.md's blocks stopped their servers"
    finally:
        if driver is not None:
            stop_group(driver)
        stop_group(server)
        drop_schemas(all_code)


def block_with(blocks: list[Block], outputs: dict[int, str], text: str) -> str:
    found = [outputs[b.line] for b in blocks if text in b.code]
    assert found, f"no README.md shell block contains {text!r}"
    return found[0]


def check_outputs(blocks: list[Block], outputs: dict[int, str]) -> None:
    """What a user sees from the main examples: the message produced is found by key, by id, in its partition."""
    using = block_with(blocks, outputs, "mqindex get")
    ids = set(MSG_ID.findall(using))
    assert len(ids) == 1, using  # the one message produced, shown by produce, query, get and consume
    msg_id = ids.pop()
    assert using.count(msg_id) >= 4, using
    assert '{"status":"paid"}' in using and "invoice-77" in using, using

    admin = block_with(blocks, outputs, "mqindex topics alter")
    assert "payments" in admin, admin

    kafka = block_with(blocks, outputs, "kcat -b 127.0.0.1:9092 -P")
    assert 'topic "orders" with 4 partitions' in kafka, kafka
    assert '"key":"k1"' in kafka.replace(" ", "") and kafka.count("hello") >= 2, kafka  # curl and query

    secured = block_with(blocks, outputs, "SASL_SSL")
    assert "1 brokers" in secured, secured

    cluster = block_with(blocks, outputs, "mqindex rebalance")
    assert cluster.count("alive") >= 2, cluster
