"""The Kafka headers a score record travels with on the results topic, beside its JSON value: who
made it and what the other replicas need to learn from it that the record itself does not carry.
Written by the results exporter (exporters/kafka_results.py), read by the cluster feed
(cluster/feed.py); the record's format (docs/FORMATS.md) stays as it is.

- `ctxprec.record_id`: the record's idempotency key (its `id`);
- `ctxprec.replica`: the replica that made it, so that it skips its own records (its own scores
  reached its detector directly);
- `ctxprec.context_chars`: each context's size in characters, comma-separated, in rank order (the
  recommended top-k's token savings);
- `ctxprec.slices`: the drift-slice attributes' values the retrieval carried, a JSON object (only
  with `--diagnostics-slice-attributes`).
"""
from __future__ import annotations

import json
import os
import secrets
import socket
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

RECORD_ID = "ctxprec.record_id"
REPLICA = "ctxprec.replica"
CONTEXT_CHARS = "ctxprec.context_chars"
SLICES = "ctxprec.slices"
# Past these a header is not read: a record from a foreign or broken producer costs little.
MAX_CHARS_HEADER = 4096
MAX_SLICES_HEADER = 8192

Headers = list[tuple[str, bytes]]


def new_replica_id() -> str:
    """This process's name in the header: the host (a pod's name in Kubernetes), the process id and
    a random suffix, so that a restarted replica is never taken for the one before it."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def score_headers(record_id: str, replica: str | None, context_chars: Sequence[int],
                  slices: Mapping[str, Any] | None) -> Headers:
    headers = [(RECORD_ID, record_id.encode())]
    if replica:
        headers.append((REPLICA, replica.encode()))
        headers.append((CONTEXT_CHARS, ",".join(str(n) for n in context_chars).encode()))
        if slices:
            headers.append((SLICES, json.dumps(slices, ensure_ascii=False, separators=(",", ":"),
                                               default=str).encode("utf-8")))
    return headers


@dataclass(slots=True)
class ReadHeaders:
    """What a record's headers say (absent ones empty)."""

    replica: str = ""
    context_chars: list[int] = field(default_factory=list)
    slices: dict[str, Any] = field(default_factory=dict)


def read_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> ReadHeaders:
    """Raises ValueError on a header this module wrote that cannot be read back."""
    out = ReadHeaders()
    for name, value in headers or ():
        if value is None:
            continue
        if name == REPLICA:
            out.replica = value.decode("utf-8", "replace")
        elif name == CONTEXT_CHARS and len(value) <= MAX_CHARS_HEADER:
            out.context_chars = [int(n) for n in value.split(b",")] if value else []
        elif name == SLICES and len(value) <= MAX_SLICES_HEADER:
            slices = json.loads(value)
            if not isinstance(slices, dict):
                raise ValueError("slices header is not a JSON object")
            out.slices = slices
    return out
