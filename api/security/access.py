"""AccessControl: the one authorizer of a server process, shared by the HTTP and Kafka listeners.

It holds the rules of the metadata database (broker/metadata/acls.py) as an Authorizer (authorizer.py) and
keeps it current: a thread polls the rules' change counter every `poll_s` (default 0.5 s) and reloads on a
change, so a rule added on any node is enforced by every node within a second; a change made through this
process is enforced at once. Every denial and every rule change goes to the audit log (audit.py).

`check(principal, host, operation, resource_type, name, interface)` is the call every API makes per resource.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from api.security.audit import AuditLog
from api.security.authorizer import Authorizer, kafka_principal
from api.security.tokens import fingerprint
from broker.metadata.acls import AclFilter, AclRule, AclTable

log = logging.getLogger("mqindex.security.acl")
POLL_S = 0.5


class AccessControl:
    def __init__(self, table: AclTable | None, superusers: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False, audit: AuditLog | None = None,
                 poll_s: float = POLL_S) -> None:
        """`table` None: no rules can be stored (every check allows; only scopes apply)."""
        self.table = table
        self.superusers = tuple(superusers)
        self.allow_everyone = allow_everyone_if_no_acl_found
        self.audit = audit or AuditLog()
        self.poll_s = poll_s
        self._version = -1
        self.authorizer = Authorizer((), self.superusers, self.allow_everyone)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reload_lock = threading.Lock()
        if table is not None:
            self.reload()

    @classmethod
    def from_settings(cls, settings: Any) -> AccessControl:
        """The configured superusers, plus the principal of the cluster token (nodes asking each other on a
        caller's behalf, after the caller was checked where it asked)."""
        superusers = list(getattr(settings, "superusers", ()))
        if getattr(settings, "cluster_token", ""):
            superusers.append(f"token-{fingerprint(settings.cluster_token)}")
        return cls(AclTable(settings.metadata), superusers,
                   bool(getattr(settings, "allow_everyone_if_no_acl_found", False)),
                   AuditLog(getattr(settings, "audit_log", "")))

    # -- keeping current --------------------------------------------------------------------------------
    def reload(self, force: bool = False) -> bool:
        """Reload the rules when their version moved (or `force`); returns whether it did."""
        if self.table is None:
            return False
        with self._reload_lock:
            if not force and self.table.version() == self._version:
                return False
            version, rules = self.table.rules()
            self.authorizer = Authorizer(rules, self.superusers, self.allow_everyone)
            self._version = version
        log.info("access control rules loaded", extra={"acl_version": version, "rules": len(rules)})
        return True

    def start(self) -> AccessControl:
        if self.table is not None and self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="acl-poll", daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.reload()
            except Exception as exc:  # noqa: BLE001 - the database may be away for a while; keep the last rules
                log.warning("cannot read the access control rules; keeping the ones loaded",
                            extra={"metadata": self.table.url if self.table else None, "error": str(exc)})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.table is not None:
            self.table.close()
        self.audit.close()

    # -- deciding ---------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.authorizer.active

    def allowed(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        """The decision without an audit line (for filtering lists: Metadata, lookups over every topic)."""
        return self.authorizer.authorize(kafka_principal(principal), host, operation, resource_type, name)

    def allowed_any(self, principal: str, host: str, operation: str, resource_type: str) -> bool:
        """Whether `operation` is allowed on some resource of the type (Kafka's authorizeByResourceType)."""
        return self.authorizer.authorize_any(kafka_principal(principal), host, operation, resource_type)

    def check(self, principal: str, host: str, operation: str, resource_type: str, name: str,
              interface: str) -> bool:
        """The decision; a denial is written to the audit log and counted."""
        if self.authorizer.authorize(kafka_principal(principal), host, operation, resource_type, name):
            return True
        self.audit.record("denied", kafka_principal(principal), resource_type, name, operation, "denied",
                          interface=interface, host=host)
        return False

    # -- changing (audited) -----------------------------------------------------------------------------
    def add(self, rules: list[AclRule], by: str, interface: str) -> int:
        assert self.table is not None
        added = self.table.add(rules)
        for r in rules:
            self.audit.record("acl_create", kafka_principal(by), r.resource_type, r.resource_name, r.operation,
                              "ok", interface=interface, rule=r.as_dict())
        self.reload(force=True)
        return added

    def remove(self, filters: list[AclFilter], by: str, interface: str) -> list[list[AclRule]]:
        assert self.table is not None
        removed = self.table.remove(filters)
        for r in {r for hit in removed for r in hit}:
            self.audit.record("acl_delete", kafka_principal(by), r.resource_type, r.resource_name, r.operation,
                              "ok", interface=interface, rule=r.as_dict())
        self.reload(force=True)
        return removed

    def rules(self, f: AclFilter | None = None) -> list[AclRule]:
        self.reload()
        return [r for r in self.authorizer.rules if f is None or f.matches(r)]

    def admin_change(self, event: str, by: str, resource_type: str, name: str, operation: str,
                     interface: str, **extra: Any) -> None:
        """An admin change other than ACLs (a topic created or deleted, a config changed): one audit line, its
        result "ok", or "failed" with the `error_code` given in `extra`."""
        self.audit.record(event, kafka_principal(by), resource_type, name, operation,
                          "failed" if extra.get("error_code") else "ok", interface=interface, **extra)


#: the access control of a process with no rules table (tests and tools that build an app without a node)
OPEN = AccessControl(None)


class DenialCollector(Collector):
    """`mqindex_authorization_denials_total{interface, resource_type}`."""

    def __init__(self, access: AccessControl) -> None:
        self.access = access

    def collect(self) -> Iterator[CounterMetricFamily]:
        m = CounterMetricFamily("mqindex_authorization_denials", "Requests refused by the access control rules",
                                labels=["interface", "resource_type"])
        for (interface, rtype), n in sorted(self.access.audit.denials.items()):
            m.add_metric([interface, rtype], n)
        yield m
