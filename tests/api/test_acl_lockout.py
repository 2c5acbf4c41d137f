"""The first access rule turns access control on (Kafka's semantics): an admin-scope token that is not a superuser
loses ACL management with it. A new user following OPERATIONS.md's example got, at the second `acls add`, only
`403: not authorized (give a token allowed to do this ...)`. Now the first add warns that the token locks itself
out, and the refusal names the token's principal and both fixes (superusers, or a rule on the cluster); with the
principal in `superusers` the same commands work. A real `mqindex serve` with tokens in its config file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from api.security.tokens import fingerprint
from tests.api.server import ServerProcess

ADMIN = "admin-token-lockout-0123456789abcdef"
WHO = f"token-{fingerprint(ADMIN)}"
MQINDEX = str(Path(sys.executable).parent / "mqindex")


def acls(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MQINDEX_TOKEN", "MQINDEX_URL")}
    return subprocess.run([MQINDEX, "acls", *args, "--url", server.url, "--token", ADMIN], capture_output=True,
                          text=True, timeout=60, env=env)


def test_the_first_rule_warns_and_the_refusal_names_the_principal_and_the_fix(tmp_path: Path) -> None:
    config = tmp_path / "mqindex.toml"
    config.write_text(f'audit_log = "{tmp_path / "audit.log"}"\n[tokens]\n"{ADMIN}" = ["admin"]\n')
    server = ServerProcess(tmp_path / "node", "--config", str(config), "--kafka-listener", "").start()
    try:
        first = acls(server, "add", "--principal", "User:alice", "--topic", "team-a.", "--prefixed",
                     "--operation", "read")
        assert first.returncode == 0, first.stderr
        assert "team-a." in first.stdout
        assert first.stderr == (f"mqindex acls: warning: access control is on from this rule: {WHO} is not a "
                                f"superuser and no rule allows it ALTER on the cluster, so it cannot add, list or "
                                f"remove rules any more; add \"{WHO}\" to superusers in the server's config "
                                f"(docs/OPERATIONS.md, Security)\n")

        second = acls(server, "add", "--principal", "User:alice", "--group", "team-a-app", "--operation", "read")
        assert second.returncode == 1
        assert second.stderr == (
            f"mqindex acls: error: 403: not authorized: {WHO} is not a superuser and no rule allows it ALTER on the "
            f"cluster (access rules exist, so a token's admin scope is not enough): add \"{WHO}\" to superusers in "
            f"the server's config, or have a superuser run `mqindex acls add --principal User:{WHO} --cluster "
            f"--operation alter` (or give a token allowed to do this with --token or MQINDEX_TOKEN)\n")
        listed = acls(server, "list")
        assert listed.returncode == 1
        assert f"{WHO} is not a superuser and no rule allows it DESCRIBE on the cluster" in listed.stderr
        assert "--operation describe`" in listed.stderr
    finally:
        assert server.stop() == 0
    assert '"result": "denied"' in (tmp_path / "audit.log").read_text()

    config.write_text(f'superusers = ["{WHO}"]\n[tokens]\n"{ADMIN}" = ["admin"]\n')
    server = ServerProcess(tmp_path / "node", "--config", str(config), "--kafka-listener", "").start()
    try:
        second = acls(server, "add", "--principal", "User:alice", "--group", "team-a-app", "--operation", "read")
        assert (second.returncode, second.stderr) == (0, ""), second.stderr
        listed = acls(server, "list")
        assert listed.returncode == 0, listed.stderr
        assert "team-a." in listed.stdout and "team-a-app" in listed.stdout
    finally:
        assert server.stop() == 0
