"""The log line format of every command: time, level, logger, message, then the record's structured fields
(`extra=`: the file, stream, object, partition or node a line is about) as key=value pairs."""

from __future__ import annotations

import json
import logging

_STANDARD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {"message", "asctime", "taskName"}


class FieldsFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        if not fields:
            return line
        return line + " " + " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in fields.items())


def configure(level: int) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(FieldsFormatter())
    logging.basicConfig(level=level, handlers=[handler])
