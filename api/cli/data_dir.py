"""The data directory default every command shares, in one wording: $MQINDEX_DATA_DIR, else ./data."""

from __future__ import annotations

import os

HELP = "the server's data directory (default: $MQINDEX_DATA_DIR, else ./data)"


def default() -> str:
    return os.environ.get("MQINDEX_DATA_DIR") or "./data"
