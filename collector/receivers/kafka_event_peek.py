"""Head sampling of `rag_event` messages from their raw bytes, without parsing them.

At a sample rate of 1% almost every message is only counted (`not_sampled`) and its offset
marked done, and `json.loads` of a ~500-byte event costs about as much as a bare consumer spends
per message. `EventPeek.unsampled_service` finds the two fields the head decision needs, the
top-level `trace_id` and `service`, with byte searches, and answers with the service of a message
that the head sampling drops. It answers None, and the message goes the full way (parsed,
validated, dead-lettered when bad, decided by the gate), whenever it cannot be sure:

- the value does not look like one JSON object (first byte not `{` or last byte not `}`, e.g.
  garbage, protobuf, a truncated message, a tombstone) -- such messages are still dead-lettered;
- `trace_id` is missing, not 32 plain hex digits, or may be nested (more `{` than `}` before it);
- `service` is not a plain string (escapes, null, a number) or may be nested; a missing
  `service` is "" (what the full parse gives) unless the value holds `\\u` escapes that could
  spell the key;
- the service's head rate is 0 (the gate decides and names `filtered`) or the trace is kept.

Thresholds are cached per service, and dropped whenever the sampler's `generation` changes (an
adaptive boost starting or ending): a message dropped at a stale lower rate while the gate records
the raised one for the messages it keeps would bias the weights 1 / rate (docs/STATISTICS.md).

The trade-off: an unsampled message is not validated beyond that. Invalid JSON inside the braces,
bad UTF-8, a missing `query`/`contexts` in a message the sampling drops is counted `not_sampled`
and its offset committed, not dead-lettered (the full path only ever validated the `query` and
`contexts` of kept events, too). Braces inside strings before a field can hide its nesting; the
producers we know write `trace_id` and `service` first.

The message key is not used for the decision: a producer that keys by a session id that happens
to be 32 hex digits would otherwise have its events dropped by the key and then again by the
trace id, sampling far below the configured rate.
"""
from __future__ import annotations

import re
from typing import Sequence

from ctxprec.collector.sampling.sampler import TraceSampler, rate_threshold

_MAX_CACHED_SERVICES = 10_000
_TRACE_KEY = b'"trace_id"'
_SERVICE_KEY = b'"service"'
# What follows the key: the colon and a 32-hex string, or a string without escapes.
_HEX_ID = re.compile(rb'\s*:\s*"([0-9A-Fa-f]{32})"')
_PLAIN_TEXT = re.compile(rb'\s*:\s*"([^"\\]*)"')
_OPEN, _CLOSE = ord("{"), ord("}")
# The layout our producers and json.dumps write: `trace_id` first (lower-case hex, as W3C ids
# are), then `service`, maybe with `span_id` between. Both keys are then surely top-level, and
# the low 16 hex digits compare as text against the threshold written the same way.
# Separators as json.dumps writes them, default or compact; other spacing takes the general way.
_FIRST_KEYS = re.compile(
    rb'\{"trace_id": ?"[0-9a-f]{16}([0-9a-f]{16})", ?(?:"span_id": ?"[^"\\]*", ?)?"service": ?"([^"\\]*)"')


class EventPeek:
    def __init__(self, sampler: TraceSampler) -> None:
        self.sampler = sampler
        self._generation = sampler.generation  # the sampler's rates the caches below were filled at
        # The raw bytes of a service name -> (the name, the low-64-bit threshold below which a
        # trace is kept, or None when such messages always take the full path).
        self._services: dict[bytes, tuple[str, int | None]] = {}
        # The same, with the threshold as 16 lower-case hex digits, for the `_FIRST_KEYS` layout.
        self._services_hex: dict[bytes, tuple[str, bytes | None]] = {}
        self._first_keys = _FIRST_KEYS.match

    def unsampled_services(self, values: Sequence[bytes | None]) -> list[str | None]:
        """`unsampled_service` of each value: the `_FIRST_KEYS` layout is read in one tight loop
        (the regex runs over the whole batch from C), anything else goes the general way."""
        if self.sampler.generation != self._generation:
            # Checked once a batch: the batch is read without an await, and rates only change
            # when a score reaches the drift monitor, which runs on the same event loop.
            self._forget()
        out: list[str | None] = []
        append = out.append
        known = self._services_hex.get
        general = self._general
        for value, m in zip(values, map(self._first_keys, [v or b"" for v in values])):
            if m is not None and value[-1] == _CLOSE:  # type: ignore[index]
                low_hex, raw = m.groups()
                service = known(raw)
                if service is not None:
                    threshold_hex = service[1]
                    append(service[0] if threshold_hex is not None and low_hex >= threshold_hex else None)
                    continue
            append(general(value))
        return out

    def unsampled_service(self, value: bytes | None) -> str | None:
        """The service of a message that head sampling drops, or None: take the full path."""
        return self.unsampled_services([value])[0]

    def _general(self, value: bytes | None) -> str | None:
        """Any layout: the two fields found by byte searches (and a service seen for the first time)."""
        if not value or value[0] != _OPEN or value[-1] != _CLOSE:
            return None
        at = value.find(_TRACE_KEY)
        if at < 0:
            return None
        m = _HEX_ID.match(value, at + 10)
        if m is None or (value.find(_OPEN, 1, at) >= 0 and not _balanced(value, at)):
            return None
        end = m.end(1)
        low = int(value[end - 16:end], 16)
        at = value.find(_SERVICE_KEY)
        if at < 0:
            if b"\\u" in value:  # the key could be spelled with escapes
                return None
            raw = b""
        else:
            m = _PLAIN_TEXT.match(value, at + 9)
            if m is None or (value.find(_OPEN, 1, at) >= 0 and not _balanced(value, at)):
                return None
            raw = m.group(1)
        known = self._services.get(raw)
        if known is None:
            known = self._learn(raw)
            if known is None:
                return None
        service, threshold = known
        if threshold is None or low < threshold:
            return None
        return service

    def _forget(self) -> None:
        self._services.clear()
        self._services_hex.clear()
        self._generation = self.sampler.generation

    def _learn(self, raw: bytes) -> tuple[str, int | None] | None:
        try:
            service = raw.decode()
        except UnicodeDecodeError:
            return None
        rate = self.sampler.head_rate(service)
        # Rate 0 is a rule's `filtered` (the gate names it); rate 1 keeps everything.
        known = (service, rate_threshold(rate) if 0.0 < rate < 1.0 else None)
        if len(self._services) < _MAX_CACHED_SERVICES:
            self._services[raw] = known
            self._services_hex[raw] = (service, None if known[1] is None else b"%016x" % known[1])
        return known


def _balanced(value: bytes, at: int) -> bool:
    """A key at `at` is in the outermost object when the braces before it balance."""
    return value.count(_OPEN, 1, at) == value.count(_CLOSE, 1, at)
