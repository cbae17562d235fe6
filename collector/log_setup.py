"""The sidecar's log lines: text for people, or one JSON object per line for log pipelines
(`--log-format json`)."""
from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

from ctxprec.collector.failure_log import RepeatedLines

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """{"time", "level", "logger", "message"} plus `exception` when there is one, and any
    structured fields a caller passed as `extra={"fields": {...}}`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update({key: value for key, value in fields.items() if key not in entry})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


_repeated: RepeatedLines | None = None


def repeated_lines() -> RepeatedLines | None:
    """The filter folding the libraries' repeated lines, when `setup_logging` installed one (the
    minute tick flushes it)."""
    return _repeated


def setup_logging(level: str, fmt: str = "text") -> None:
    """Root logging for `ctxprec serve`, unless the embedding program set it up already. The
    libraries' repeated lines are folded (failure_log.RepeatedLines)."""
    global _repeated
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    _repeated = RepeatedLines(handler)
    handler.addFilter(_repeated)
    root.addHandler(handler)
    wanted = logging.getLevelName(level.upper())
    # DEBUG is for ctxprec's own lines (one per score, per decision); the libraries' debug
    # chatter (asyncio, grpc, litellm, aiokafka) would bury them.
    root.setLevel(max(wanted, logging.INFO))
    logging.getLogger("ctxprec").setLevel(wanted)
