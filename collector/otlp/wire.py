"""Cutting spans out of a serialized ExportTraceServiceRequest without re-encoding it.

Span mode holds a sampled trace's retrieval span back and forwards the rest of the request at
once. Re-serializing the whole request for that costs about three times its parse; instead the
held spans are found in the original bytes (by their canonical encoding, which starts with the
trace id and span id) and only the length prefixes of the enclosing ScopeSpans and
ResourceSpans are rewritten. Everything else is copied as it came. When a span cannot be found
verbatim (a non-canonical encoder), the caller falls back to re-serializing.
"""
from __future__ import annotations

from typing import Iterable

# Field numbers: ExportTraceServiceRequest.resource_spans = 1, ResourceSpans.scope_spans = 2,
# ScopeSpans.spans = 2; all length-delimited (wire type 2).
_RS_TAG = b"\x0a"
_SS_TAG = b"\x12"
_SPAN_TAG = b"\x12"


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(buf: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(field number, frame start, body start, body end) of each field in buf[start:end]; only
    length-delimited and varint fields are expected at the levels walked here."""
    out = []
    pos = start
    while pos < end:
        frame = pos
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 2:
            length, pos = _varint(buf, pos)
            out.append((key >> 3, frame, pos, pos + length))
            pos += length
        elif wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unexpected wire type {wire}")
    if pos != end:
        raise ValueError("frame overruns its parent")
    return out


def remove_spans(raw: bytes, spans: Iterable[bytes]) -> bytes | None:
    """`raw` without the given serialized spans (each `Span.SerializeToString()`), or None when
    one of them does not occur verbatim where a span belongs."""
    try:
        return _remove(raw, list(spans))
    except (ValueError, IndexError):
        return None


def _remove(raw: bytes, spans: list[bytes]) -> bytes | None:
    # Ranges of the ScopeSpans bodies, per ResourceSpans.
    layout = []
    for field, frame, body, end in _fields(raw, 0, len(raw)):
        scopes = [f for f in _fields(raw, body, end) if f[0] == 2] if field == 1 else []
        layout.append((field, frame, body, end, scopes))
    cuts: dict[int, list[tuple[int, int]]] = {}  # ScopeSpans body start -> cut ranges
    for span in spans:
        header = _SPAN_TAG + encode_varint(len(span))
        pos = raw.find(span[:40])
        while pos != -1 and raw[pos:pos + len(span)] != span:
            pos = raw.find(span[:40], pos + 1)
        if pos == -1 or raw[pos - len(header):pos] != header:
            return None
        start = pos - len(header)
        owner = next((ss for _, _, _, _, scopes in layout for ss in scopes if ss[2] <= start and pos + len(span) <= ss[3]),
                     None)
        if owner is None:
            return None
        cuts.setdefault(owner[2], []).append((start, pos + len(span)))
    # One join at the end: every unchanged range is a memoryview slice, not a copy.
    view = memoryview(raw)
    out: list[bytes | memoryview] = []
    for field, frame, body, end, scopes in layout:
        if not any(ss[2] in cuts for ss in scopes):
            out.append(view[frame:end])
            continue
        parts: list[bytes | memoryview] = []
        rs_length = 0
        cursor = body
        for _, ss_frame, ss_body, ss_end in scopes:
            ranges = cuts.get(ss_body)
            if not ranges:
                continue
            parts.append(view[cursor:ss_frame])
            rs_length += ss_frame - cursor
            pieces: list[memoryview] = []
            at = ss_body
            for cut_start, cut_end in sorted(ranges):
                if cut_start < at:
                    return None  # the same span listed twice
                pieces.append(view[at:cut_start])
                at = cut_end
            pieces.append(view[at:ss_end])
            ss_length = sum(len(p) for p in pieces)
            header = _SS_TAG + encode_varint(ss_length)
            parts.append(header)
            parts.extend(pieces)
            rs_length += len(header) + ss_length
            cursor = ss_end
        parts.append(view[cursor:end])
        rs_length += end - cursor
        out.append(_RS_TAG + encode_varint(rs_length))
        out.extend(parts)
    return b"".join(out)


def resource_ranges(raw: bytes) -> list[tuple[int, int]] | None:
    """(start, end) of each ResourceSpans body in a serialized request, in order; None when the
    bytes do not parse at that level. Lets a per-resource byte search run on slices of the
    original bytes instead of re-encoding each resource."""
    try:
        return [(body, end) for field, _, body, end in _fields(raw, 0, len(raw)) if field == 1]
    except (ValueError, IndexError):
        return None
