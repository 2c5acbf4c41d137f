"""Exceptions raised by the broker package, one type per failure kind callers handle."""

from __future__ import annotations

from storage_tier.errors import StorageUnavailable


class BrokerError(Exception):
    """Base of every broker error."""


class ObjectFormatError(BrokerError):
    """An object in the store is not a valid S3Stream object: names the object key and the failed check.

    It is damage in the store, never the client's doing: the HTTP layer answers it with a 5xx (OPERATIONS.md)."""

    def __init__(self, key: str, check: str, detail: str = "") -> None:
        self.key = key
        self.check = check
        msg = f"object {key!r}: {check}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class RecordFormatError(BrokerError, ValueError):
    """Bytes that should hold a Kafka RecordBatch v2 do not."""


class MessageIdError(BrokerError, ValueError):
    """A message id that is not 32 hex characters, or a field out of range when encoding one."""


class WalError(BrokerError):
    """The write-ahead log cannot accept or return records (closed, full, I/O failure). `failure`: the WAL's own
    failure when this error is what one append of a failed write was told (its records may be kept, or were not
    written): every later request is told the failure alone."""

    def __init__(self, message: str, failure: WalError | None = None) -> None:
        super().__init__(message)
        self.failure = failure


class OutOfDisk(WalError):
    """A data path of the node is out of disk (ENOSPC, EDQUOT, EIO, or below the free-space floor): the node
    accepts no writes until space returns; reads go on. Nothing of the refused request was stored."""

    #: Kafka's KAFKA_STORAGE_ERROR, the code a Kafka listener answers a refused produce with
    kafka_error_code = 56

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"not accepting writes: out of disk on {path} ({detail})")


class MetadataError(BrokerError):
    """The controller metadata refused a request."""


class MetadataUnavailable(BrokerError, StorageUnavailable):
    """The metadata database does not answer (the connection was lost, or a new one cannot be opened): the request
    was not served; retry it later (HTTP 503, Kafka's retriable KAFKA_STORAGE_ERROR, as for a store that does not
    answer). Not a MetadataError, which means refused and nothing applied: a write whose commit was under way when
    the connection was lost may have been applied, and the next catch-up of the metadata log shows whether it was."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.backend = "metadata"
        self.key = None


class MetadataDiverged(MetadataUnavailable):
    """The metadata database no longer holds a log record this node applied: its log ends before that record, or
    holds another record at its offset. A database that went back (a failover to a standby that had not received
    the last commits, a restore from a backup) lost those changes. The node stops reading and writing the
    metadata (answered as a database that does not answer: 503, retriable Kafka codes, not ready) rather than
    build on a log that contradicts what it served; a restart loads the database's log as it is now."""


class Fenced(MetadataError):
    """A stale epoch (stream epoch or node epoch) tried to change the metadata; nothing was applied."""


class StreamNotFound(MetadataError, KeyError):
    """No stream with that id exists (or it was deleted)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "stream not found"


class InvalidRequest(MetadataError, ValueError):
    """A request the metadata cannot apply: a stream still opened elsewhere, a gap in a commit, an
    offset below the stream start, an object not in the expected state."""


class OffsetOutOfRange(InvalidRequest):
    """A read below the stream's start offset (trimmed data) or of a stream that has no such offset."""


class InvalidField(BrokerError, ValueError):
    """Bad input in one named request field (negative offset, malformed cursor, wrong type)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field} {message}")
        self.field = field


class NotOwner(Fenced):
    """This node does not own the partition's streams (another node opened them at a newer epoch)."""

    WRITTEN = ("the messages were written before it and are not acknowledged: they may or may not be kept (kept with "
               "a shared WAL, which the node taking the partition over replays; lost with a local one), so a retry "
               "may store them twice")

    def written(self) -> NotOwner:
        """The same refusal for records already written when it came (checked again before the answer)."""
        return NotOwner(f"{self}; {self.WRITTEN}")


class LeaseLapsed(NotOwner):
    """This node could not renew its lease in time (the metadata database did not answer): it acknowledges nothing
    until it renews it, and another node may take its partitions over meanwhile."""

    def written(self) -> LeaseLapsed:
        """The same refusal for records already written when it lapsed (checked again before the answer)."""
        return LeaseLapsed(f"{self}; the messages were written before it lapsed and are not acknowledged: they may "
                           "or may not be kept (kept if this node renews its lease), so a retry may store them twice")


class NotLeader(NotOwner):
    """Another node leads the partition: retry there (HTTP 421 with the leader's id and address)."""

    def __init__(self, message: str, leader: int, leader_url: str | None) -> None:
        super().__init__(message)
        self.leader = leader
        self.leader_url = leader_url

    def written(self) -> NotLeader:
        return NotLeader(f"{self}; {self.WRITTEN}", self.leader, self.leader_url)


class NodeClosed(BrokerError):
    """This node is closing (a clean stop: SIGTERM, a rolling restart) or closed: it takes no request that changes
    anything; its partitions are being handed over to the others. Retriable on the node that takes over (Kafka:
    NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR for a coordinator's request; HTTP 503)."""

    def __init__(self) -> None:
        super().__init__("the broker node is closing (a clean stop); its partitions go to the other nodes")


class NodeNotLive(BrokerError):
    """A request names a node that is not alive in the cluster (HTTP 409: the cluster's state, not the syntax)."""

    def __init__(self, node: object, why: str = "") -> None:
        super().__init__(f"to: node {node!r} is not a live node" + (f" ({why})" if why else ""))
        self.field = "to"
