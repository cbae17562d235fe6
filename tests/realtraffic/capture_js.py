"""Captures what the JavaScript apps emit: runs each matrix cell against a real OTLP receiver
(tests/helpers/otlp_capture.py) and writes one OTLP/JSON file per cell, with what the app itself
retrieved and answered beside the spans, so unit tests can replay real Mastra, AI SDK and
LangChain.js traffic without Node.js.

    .venv/bin/python -m tests.realtraffic.capture_js                 # every cell -> js/captures/
    .venv/bin/python -m tests.realtraffic.capture_js --only mastra-vector --out /tmp/caps
    .venv/bin/python -m tests.realtraffic.capture_js --show js/captures/mastra-tool-mastra1.71-http.json

Each file: {"cell", "versions", "runs": [{query, contexts, context_ids, answer}], "requests":
[ExportTraceServiceRequest as OTLP/JSON (hex ids), in arrival order]}. Spans always travel as
protobuf here (the receiver decodes protobuf); the JSON exporters are exercised by the tests.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.helpers.js_apps import JS_DIR, JsCell, run_js_app
from tests.helpers.otlp_capture import OtlpCapture
from tests.realtraffic.js_matrix import CELLS, NO_CONTENT_CELLS

CAPTURES = JS_DIR / "captures"


def otlp_json(body: bytes) -> dict[str, Any]:
    """An ExportTraceServiceRequest as OTLP/JSON: camelCase keys, ids in hex (not base64)."""
    request = ExportTraceServiceRequest.FromString(body)
    document = json_format.MessageToDict(request)
    for rs, resource_spans in zip(document.get("resourceSpans", []), request.resource_spans):
        for ss, scope_spans in zip(rs.get("scopeSpans", []), resource_spans.scope_spans):
            for span, message in zip(ss.get("spans", []), scope_spans.spans):
                span["traceId"] = message.trace_id.hex()
                span["spanId"] = message.span_id.hex()
                if message.parent_span_id:
                    span["parentSpanId"] = message.parent_span_id.hex()
                for link, link_message in zip(span.get("links", []), message.links):
                    link["traceId"], link["spanId"] = link_message.trace_id.hex(), link_message.span_id.hex()
    return document


async def capture(cell: JsCell, out_dir: Path) -> Path:
    receiver = await OtlpCapture().start()
    try:
        endpoint = f"{receiver.http_url}/v1/traces"
        # Protobuf on the wire whatever the cell says: the receiver reads protobuf only.
        wire = dataclasses.replace(cell, protocol="protobuf")
        runs = await run_js_app(wire, endpoints=[endpoint], service=f"capture-{cell.app}")
        await asyncio.sleep(0.3)  # a late batch from a second exporter
        document = {
            "cell": {"app": cell.app, "shape": cell.shape, "mastra": cell.mastra, "retrieval": cell.retrieval},
            "runs": [r.__dict__ for r in runs],
            "requests": [otlp_json(body) for body in receiver.bodies],
        }
    finally:
        await receiver.stop()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{cell.slug}.json"
    path.write_text(json.dumps(document, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _value(value: dict[str, Any]) -> Any:
    if not value:
        return None
    kind, inner = next(iter(value.items()))
    if kind == "arrayValue":
        return [_value(v) for v in inner.get("values", [])]
    if kind == "kvlistValue":
        return {kv["key"]: _value(kv.get("value", {})) for kv in inner.get("values", [])}
    return inner


def show(path: Path, width: int = 160) -> None:
    """Prints a capture as span trees, each attribute on its own line (values cut to `width`)."""
    show_requests(json.loads(path.read_text(encoding="utf-8"))["requests"], width)


def show_requests(requests: list[dict[str, Any]], width: int = 160) -> None:
    """Prints trace requests (OTLP/JSON, as `otlp_json` gives them) as span trees."""
    spans = [span for request in requests for rs in request.get("resourceSpans", [])
             for ss in rs.get("scopeSpans", []) for span in ss.get("spans", [])]
    ids = {span["spanId"] for span in spans}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        parent = span.get("parentSpanId")
        children.setdefault(parent if parent in ids else None, []).append(span)

    def walk(span: dict[str, Any], depth: int) -> None:
        pad = "  " * depth
        print(f"{pad}[{span['name']}] trace {span['traceId'][:8]} span {span['spanId'][:8]}")
        for attribute in span.get("attributes", []):
            print(f"{pad}    {attribute['key']} = {str(_value(attribute.get('value', {})))[:width]}")
        for child in sorted(children.get(span["spanId"], []), key=lambda s: int(s["startTimeUnixNano"])):
            walk(child, depth + 1)

    for root in sorted(children.get(None, []), key=lambda s: int(s["startTimeUnixNano"])):
        walk(root, 0)


async def main(only: str | None, out_dir: Path) -> None:
    seen: set[str] = set()
    for cell in (*CELLS, *NO_CONTENT_CELLS):
        if cell.slug in seen or (only and not cell.app.startswith(only)):
            continue
        seen.add(cell.slug)
        path = await capture(cell, out_dir)
        print(f"{cell.name}: {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", help="cells whose app name starts with this")
    parser.add_argument("--out", type=Path, default=CAPTURES)
    parser.add_argument("--show", type=Path, help="print a capture file as span trees instead")
    args = parser.parse_args()
    if args.show:
        show(args.show)
    else:
        asyncio.run(main(args.only, args.out))
