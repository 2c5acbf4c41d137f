"""The access control decision and its storage: hypothesis over rule sets against a plain reading of Kafka's
documented AclAuthorizer semantics (deny beats allow, literal/`*`/prefix patterns, `User:*`, hosts, implied
DESCRIBE, superusers, allow_everyone_if_no_acl_found), and the rules table on PostgreSQL shared by two
AccessControls as two nodes would (a change on one is enforced by the other within a second)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.security.access import AccessControl
from api.security.audit import AuditLog
from api.security.authorizer import Authorizer
from broker.metadata.acls import AclError, AclFilter, AclRule, AclTable

NAMES = ["team-a.orders", "team-a.pay", "team-b.orders", "team-", "t", "*"]
PREFIXES = ["team-a.", "team-", "t", "team-b.orders", "x"]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
OPS = ["all", "read", "write", "create", "delete", "alter", "describe", "describe_configs", "alter_configs"]


def reference(rules: list[AclRule], superusers: set[str], allow_everyone: bool, principal: str, host: str,
              op: str, rtype: str, name: str) -> bool:
    """Kafka's documentation read plainly (docs.confluent.io 'Authorization using ACLs'; AclAuthorizer)."""
    if principal in superusers:
        return True
    if not rules:  # no rule anywhere: access control off (only the scopes apply)
        return True

    def covers(r: AclRule) -> bool:
        if r.resource_type != rtype:
            return False
        if r.pattern_type == "prefixed":
            return name.startswith(r.resource_name)
        return r.resource_name in (name, "*")

    on_resource = [r for r in rules if covers(r)]
    mine = [r for r in on_resource if r.principal in (principal, "User:*") and r.host in (host, "*")]
    for r in mine:
        if r.permission == "deny" and r.operation in (op, "all"):
            return False
    if not on_resource and allow_everyone:
        return True
    implied = {"describe": {"read", "write", "delete", "alter"}, "describe_configs": {"alter_configs"}}
    for r in mine:
        if r.permission == "allow" and (r.operation in (op, "all") or r.operation in implied.get(op, set())):
            return True
    return False


rules_st = st.lists(st.builds(
    lambda p, h, t, pat, op, perm: AclRule.make(p, t, pat[1], op, perm, pat[0], h),
    st.sampled_from(PRINCIPALS), st.sampled_from(["*", "10.0.0.1"]), st.sampled_from(["topic", "group"]),
    st.one_of(st.tuples(st.just("literal"), st.sampled_from(NAMES)),
              st.tuples(st.just("prefixed"), st.sampled_from(PREFIXES))),
    st.sampled_from(OPS), st.sampled_from(["allow", "deny"])), max_size=8)


@settings(max_examples=400, deadline=None)
@given(rules_st, st.sets(st.sampled_from(["User:alice", "User:carol"])), st.booleans(),
       st.lists(st.tuples(st.sampled_from(["User:alice", "User:bob", "User:carol"]),
                          st.sampled_from(["10.0.0.1", "10.0.0.2"]), st.sampled_from(OPS[1:]),
                          st.sampled_from(["topic", "group"]), st.sampled_from(NAMES[:-1])), min_size=1, max_size=6))
def test_decision_matches_kafka_reading(rules: list[AclRule], superusers: set[str], allow_everyone: bool,
                                        asks: list[tuple[str, str, str, str, str]]) -> None:
    authorizer = Authorizer(rules, superusers, allow_everyone)
    for ask in asks:
        want = reference(rules, superusers, allow_everyone, *ask)
        assert authorizer.authorize(*ask) is want, ask
        assert authorizer.authorize(*ask) is want, ask  # remembered decision too


def test_named_cases() -> None:
    rules = [AclRule.make("User:alice", "topic", "team-a.", "read", pattern_type="prefixed"),
             AclRule.make("User:alice", "topic", "team-a.secret", "all", "deny"),
             AclRule.make("User:*", "group", "*", "read")]
    a = Authorizer(rules, ["root"])
    assert a.authorize("User:alice", "h", "read", "topic", "team-a.orders")
    assert a.authorize("User:alice", "h", "describe", "topic", "team-a.orders")  # implied by READ
    assert not a.authorize("User:alice", "h", "write", "topic", "team-a.orders")
    assert not a.authorize("User:alice", "h", "read", "topic", "team-b.orders")
    assert not a.authorize("User:alice", "h", "read", "topic", "team-a.secret")  # deny beats allow
    assert a.authorize("User:bob", "h", "read", "group", "anything")
    assert a.authorize("User:root", "h", "delete", "cluster", "kafka-cluster")  # superuser
    assert Authorizer([], []).authorize("User:x", "h", "write", "topic", "t")  # no rules: off


@pytest.mark.parametrize("bad", [dict(principal="alice"), dict(resource_type="broker"), dict(operation="eat"),
                                 dict(permission="maybe"), dict(pattern_type="regex"), dict(resource_name="")])
def test_bad_rule_is_refused_with_the_field(bad: dict[str, str]) -> None:
    fields = dict(principal="User:a", resource_type="topic", resource_name="t", operation="read") | bad
    with pytest.raises(AclError, match=next(iter(bad))):
        AclRule.make(**fields)


def _wait(cond: Callable[[], bool], timeout: float = 5) -> float:
    started = time.monotonic()
    while not cond():
        assert time.monotonic() - started < timeout, "condition not reached"
        time.sleep(0.02)
    return time.monotonic() - started


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_nodes_share_rules(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = (f"sqlite:///{tmp_path}/meta.sqlite" if backend == "sqlite"
           else request.getfixturevalue("pg_url")())
    audit = tmp_path / "audit.log"
    one = AccessControl(AclTable(url), audit=AuditLog(str(audit))).start()
    two = AccessControl(AclTable(url)).start()
    try:
        rule = AclRule.make("User:alice", "topic", "team-a.", "read", pattern_type="prefixed")
        assert one.add([rule, rule], by="root", interface="test") == 1
        assert one.allowed("alice", "h", "read", "topic", "team-a.orders")
        assert _wait(lambda: not two.allowed("bob", "h", "read", "topic", "team-a.orders")) < 1.5
        assert two.allowed("alice", "h", "read", "topic", "team-a.orders")
        assert not one.check("alice", "h", "read", "topic", "team-b.orders", interface="kafka")
        removed = two.remove([AclFilter(principal="User:alice")], by="root", interface="test")
        assert removed == [[rule]]
        _wait(lambda: one.allowed("bob", "h", "read", "topic", "team-a.orders"))  # no rules left: off
        lines = audit.read_text().splitlines()
        assert any('"event": "acl_create"' in x and '"principal": "User:root"' in x for x in lines)
        assert any('"event": "denied"' in x and '"resource_name": "team-b.orders"' in x for x in lines)
        assert one.audit.denials[("kafka", "topic")] == 1
    finally:
        one.stop()
        two.stop()


@settings(max_examples=300, deadline=None)
@given(rules_st, st.sets(st.sampled_from(["User:alice"])),
       st.tuples(st.sampled_from(["User:alice", "User:bob"]), st.sampled_from(["10.0.0.1", "10.0.0.2"]),
                 st.sampled_from(["read", "write", "describe"]), st.sampled_from(["topic", "group"])))
def test_some_resource_allowed_matches_trying_every_name(rules: list[AclRule], superusers: set[str],
                                                         ask: tuple[str, str, str, str]) -> None:
    """`authorize_any` (Kafka's authorizeByResourceType: an idempotent producer's WRITE on some topic) is true
    exactly when some name is allowed: the rules' names, names under each prefix, and a name no rule covers."""
    principal, host, op, rtype = ask
    names = {n for r in rules for n in (r.resource_name, r.resource_name + "~under") if n != "*"} | {"~none"}
    authorizer = Authorizer(rules, superusers)
    want = any(authorizer.authorize(principal, host, op, rtype, n) for n in names)
    assert authorizer.authorize_any(principal, host, op, rtype) is want
