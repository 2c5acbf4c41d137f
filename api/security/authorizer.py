"""The decision over a set of ACL rules (broker/metadata/acls.py), as Kafka's AclAuthorizer documents it:

1. a superuser (from the config) is allowed everything;
2. with no rule at all in the cluster, access control is off: every authenticated caller is allowed what its
   scopes allow (the coarse check of api/security/principals.py, done before this one);
3. a rule applies to a request when its principal is the caller's or `User:*`, its host the caller's or `*`,
   its resource type the request's, and its pattern covers the name (literal: equal, or the literal `*`;
   prefixed: the name starts with it);
4. a DENY rule for the operation (or ALL) refuses: deny beats allow;
5. with no rule applying to the resource at all, `allow_everyone_if_no_acl_found` decides (default: refuse);
6. an ALLOW rule for the operation (or ALL) allows; DESCRIBE is also allowed by READ, WRITE, DELETE or ALTER,
   DESCRIBE_CONFIGS by ALTER_CONFIGS (implied only by ALLOW rules; a DENY of READ does not deny DESCRIBE);
7. anything else is refused.

A fresh decision must stay cheap with thousands of rules (it is paid by the first request of each connection for
each resource, and after every rule change): the rules are indexed once per version by (resource type,
principal), then by literal name and by prefix, each entry folded into (host, denied operations, allowed
operations); a decision looks at the caller's and `User:*`'s entries only, with one dictionary lookup per
literal and per prefix length that principal has. Decisions are also remembered per (principal, host,
operation, resource) until the rules change, so a check costs a dictionary lookup once warm.

`authorize_any` is Kafka's authorizeByResourceType (InitProducerId of an idempotent producer: WRITE on some
topic): an ALLOW rule for the operation whose pattern no DENY rule of the caller covers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from broker.metadata.acls import OPERATIONS, WILDCARD, AclRule

#: an allowed operation that implies others (Kafka: "DESCRIBE is implied by READ, WRITE, DELETE, ALTER")
IMPLIED_BY: dict[str, frozenset[str]] = {
    "describe": frozenset({"describe", "read", "write", "delete", "alter"}),
    "describe_configs": frozenset({"describe_configs", "alter_configs"}),
}
USER_PREFIX = "User:"
ANYONE = "User:*"
_CACHE_MAX = 100_000
#: the operations whose ALLOW rules allow an operation (itself, and what implies it)
_ALLOWING: dict[str, frozenset[str]] = {op: IMPLIED_BY.get(op, frozenset({op})) for op in OPERATIONS}


def kafka_principal(name: str) -> str:
    """`User:<name>` for a principal name (a configured user, `token-<fingerprint>`, `anonymous`)."""
    return name if name.startswith(USER_PREFIX) else USER_PREFIX + name


Grant = tuple[str, frozenset[str], frozenset[str]]  # host, operations denied, operations allowed (implied too)
_EVERY = frozenset(OPERATIONS)


def _allowed_ops(ops: set[str]) -> frozenset[str]:
    """The operations ALLOW rules for `ops` allow: ALL every one, DESCRIBE by READ/WRITE/DELETE/ALTER, ..."""
    if "all" in ops:
        return _EVERY
    return frozenset(ops | {op for op, by in IMPLIED_BY.items() if by & ops})


def _grants(rules: list[AclRule]) -> tuple[Grant, ...]:
    """The rules of one pattern folded per host into the operations they deny and allow (implications expanded,
    so a decision is two set lookups per host)."""
    by_host: dict[str, tuple[set[str], set[str]]] = {}
    for r in rules:
        denied, allowed = by_host.setdefault(r.host, (set(), set()))
        (denied if r.permission == "deny" else allowed).add(r.operation)
    return tuple((h, _EVERY if "all" in d else frozenset(d), _allowed_ops(a))
                 for h, (d, a) in sorted(by_host.items()))


class _Patterns:
    """The rules of one principal on one resource type: grants by literal name and by prefix."""

    __slots__ = ("literal", "prefixed", "lengths", "rules", "wildcard")

    def __init__(self, rules: list[AclRule]) -> None:
        literal: dict[str, list[AclRule]] = defaultdict(list)
        prefixed: dict[str, list[AclRule]] = defaultdict(list)
        for r in rules:
            (prefixed if r.pattern_type == "prefixed" else literal)[r.resource_name].append(r)
        self.rules = tuple(rules)
        self.literal = {n: _grants(rs) for n, rs in literal.items()}
        self.prefixed = {n: _grants(rs) for n, rs in prefixed.items()}
        self.lengths = tuple(sorted({len(n) for n in prefixed}))
        self.wildcard = WILDCARD in self.literal


class Authorizer:
    """An immutable view of one version of the rules with its superusers and default; `authorize` decides."""

    def __init__(self, rules: Iterable[AclRule], superusers: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.rules = tuple(rules)
        self.superusers = frozenset(kafka_principal(s) for s in superusers)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._literal: dict[tuple[str, str], list[AclRule]] = defaultdict(list)
        self._prefixed: dict[tuple[str, str], list[AclRule]] = defaultdict(list)
        self._prefix_lengths: dict[str, set[int]] = defaultdict(set)
        by_principal: dict[tuple[str, str], list[AclRule]] = defaultdict(list)
        for r in self.rules:
            if r.pattern_type == "prefixed":
                self._prefixed[(r.resource_type, r.resource_name)].append(r)
                self._prefix_lengths[r.resource_type].add(len(r.resource_name))
            else:
                self._literal[(r.resource_type, r.resource_name)].append(r)
            by_principal[(r.resource_type, r.principal)].append(r)
        self._lengths = {t: sorted(ls) for t, ls in self._prefix_lengths.items()}
        self._types = frozenset(r.resource_type for r in self.rules)
        self._by = {k: _Patterns(rs) for k, rs in by_principal.items()}
        self._by_type: dict[str, dict[str, _Patterns]] = defaultdict(dict)
        for (rtype, who), patterns in self._by.items():
            self._by_type[rtype][who] = patterns
        self._by_type = dict(self._by_type)
        self._cache: dict[tuple[str, str, str, str, str], bool] = {}
        self._any_cache: dict[tuple[str, str, str, str], bool] = {}

    @property
    def active(self) -> bool:
        """Whether rules exist (without any, access control is off)."""
        return bool(self.rules)

    def applying(self, resource_type: str, name: str) -> list[AclRule]:
        """The rules whose resource pattern covers `name` (any principal, host, operation)."""
        out = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            out += self._literal.get((resource_type, WILDCARD), ())
        for n in self._lengths.get(resource_type, ()):
            if n > len(name):
                break
            out += self._prefixed.get((resource_type, name[:n]), ())
        return out

    def authorize(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        """Whether `principal` (`User:name`) from `host` may do `operation` on the resource (module doc)."""
        key = (principal, host, operation, resource_type, name)
        found = self._cache.get(key)
        if found is None:
            found = self._decide(principal, host, operation, resource_type, name)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[key] = found
        return found

    def _decide(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        if principal in self.superusers or not self.rules:
            return True
        allowed = False
        by_principal = self._by_type.get(resource_type)
        if by_principal is None:
            return self.allow_everyone_if_no_acl_found
        for who in (principal, ANYONE) if principal != ANYONE else (ANYONE,):
            patterns = by_principal.get(who)
            if patterns is None:
                continue
            literal = patterns.literal
            grants = literal.get(name)
            if grants is not None:
                for h, denied, allows in grants:
                    if h in (WILDCARD, host):
                        if operation in denied:
                            return False
                        if operation in allows:
                            allowed = True
            if patterns.wildcard and name != WILDCARD:
                for h, denied, allows in literal[WILDCARD]:
                    if h in (WILDCARD, host):
                        if operation in denied:
                            return False
                        if operation in allows:
                            allowed = True
            if patterns.lengths:
                prefixed = patterns.prefixed
                for n in patterns.lengths:
                    if n > len(name):
                        break
                    grants = prefixed.get(name[:n])
                    if grants is not None:
                        for h, denied, allows in grants:
                            if h in (WILDCARD, host):
                                if operation in denied:
                                    return False
                                if operation in allows:
                                    allowed = True
        if allowed:
            return True
        return self.allow_everyone_if_no_acl_found and not self.applying(resource_type, name)

    def authorize_any(self, principal: str, host: str, operation: str, resource_type: str) -> bool:
        """Whether `principal` may do `operation` on some resource of the type (module doc)."""
        key = (principal, host, operation, resource_type)
        found = self._any_cache.get(key)
        if found is None:
            found = self._any_cache[key] = self._decide_any(principal, host, operation, resource_type)
        return found

    def _decide_any(self, principal: str, host: str, operation: str, resource_type: str) -> bool:
        if principal in self.superusers or not self.rules:
            return True
        if self.allow_everyone_if_no_acl_found and resource_type not in self._types:
            return True
        allowing = _ALLOWING.get(operation) or frozenset((operation,))
        denied_literal: set[str] = set()
        denied_prefixes: list[str] = []
        allows: list[AclRule] = []
        for who in {principal, ANYONE}:
            patterns = self._by.get((resource_type, who))
            for r in patterns.rules if patterns is not None else ():
                if r.host not in (WILDCARD, host):
                    continue
                if r.permission == "deny" and r.operation in (operation, "all"):
                    if r.pattern_type == "literal" and r.resource_name == WILDCARD:
                        return False
                    (denied_prefixes.append(r.resource_name) if r.pattern_type == "prefixed"
                     else denied_literal.add(r.resource_name))
                elif r.permission == "allow" and (r.operation == "all" or r.operation in allowing):
                    allows.append(r)
        return any(not any(r.resource_name.startswith(p) for p in denied_prefixes)
                   and not (r.pattern_type == "literal" and r.resource_name in denied_literal) for r in allows)
