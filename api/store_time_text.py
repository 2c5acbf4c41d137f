"""A store time as a client writes it (milliseconds since the epoch, or an ISO 8601 time), parsed: the one
parser of the HTTP queries (api/http/store_time.py) and the CLI's time flags (api/cli/client.py). Without the
server's libraries, so that the CLI starts without them.

    1775524346370                       milliseconds since 1970-01-01T00:00:00Z (digits; 60.0 is 60)
    2026-04-07T01:12:26.370+00:00       ISO 8601 with a zone (Z, +02:00, -0500 ...)
    2026-04-07T01:12:26                 without a zone: UTC (as `mqindex query --begin` takes it)
    2026-04-07                          a date alone: its midnight, UTC

An ISO 8601 time before 1970 is taken as 0 (nothing is stored before then); milliseconds past the largest store
time (2**63-1) and anything else are refused with one sentence saying what is accepted. Milliseconds are exact
(no floating point): fractions of a millisecond are dropped.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

#: milliseconds: digits, with a fraction of zeros as JSON Schema's integers allow (60.0)
_MILLISECONDS = re.compile(r"[0-9]+(\.0*)?")
MAX_STORE_TIME = (1 << 63) - 1  # what the store's 64-bit time fields hold
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ACCEPTED = ("milliseconds since 1970-01-01 UTC, or an ISO 8601 time such as 2026-04-07T01:12:26Z "
            "(UTC when it has no zone) or a date such as 2026-04-07")


def parse_store_time(text: str) -> int:
    """Milliseconds since the epoch for `text` (module doc); ValueError saying what is accepted."""
    value = text.strip()
    if _MILLISECONDS.fullmatch(value):
        ms = int(value.partition(".")[0])
        if ms > MAX_STORE_TIME:
            raise ValueError(f"must be at most {MAX_STORE_TIME} milliseconds (got {value[:60]})")
        return ms
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f'is not a time (got "{text[:60]}"): give {ACCEPTED}') from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ms = (moment - EPOCH) // timedelta(milliseconds=1)
    return max(0, min(ms, MAX_STORE_TIME))
