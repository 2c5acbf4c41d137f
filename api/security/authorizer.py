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

Rules are indexed by resource type, literal name and prefix, and decisions are remembered per (principal,
host, operation, resource) until the rules change, so a check costs a dictionary lookup once warm.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from broker.metadata.acls import WILDCARD, AclRule

#: an allowed operation that implies others (Kafka: "DESCRIBE is implied by READ, WRITE, DELETE, ALTER")
IMPLIED_BY: dict[str, frozenset[str]] = {
    "describe": frozenset({"describe", "read", "write", "delete", "alter"}),
    "describe_configs": frozenset({"describe_configs", "alter_configs"}),
}
USER_PREFIX = "User:"
ANYONE = "User:*"
_CACHE_MAX = 100_000


def kafka_principal(name: str) -> str:
    """`User:<name>` for a principal name (a configured user, `token-<fingerprint>`, `anonymous`)."""
    return name if name.startswith(USER_PREFIX) else USER_PREFIX + name


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
        for r in self.rules:
            if r.pattern_type == "prefixed":
                self._prefixed[(r.resource_type, r.resource_name)].append(r)
                self._prefix_lengths[r.resource_type].add(len(r.resource_name))
            else:
                self._literal[(r.resource_type, r.resource_name)].append(r)
        self._lengths = {t: sorted(ls) for t, ls in self._prefix_lengths.items()}
        self._cache: dict[tuple[str, str, str, str, str], bool] = {}

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
        rules = self.applying(resource_type, name)
        mine = [r for r in rules if r.principal in (principal, ANYONE) and r.host in (host, WILDCARD)]
        if any(r.permission == "deny" and r.operation in (operation, "all") for r in mine):
            return False
        if not rules and self.allow_everyone_if_no_acl_found:
            return True
        allowing = IMPLIED_BY.get(operation, frozenset({operation}))
        return any(r.permission == "allow" and (r.operation == "all" or r.operation in allowing) for r in mine)
