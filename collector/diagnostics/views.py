"""The JSON bodies of `/diagnostics/documents`, `/diagnostics/drift` and `/diagnostics/top_k`,
from the request's query parameters. The HTTP route only has to pass `request.query` and send
`status` and `body` back; nothing here knows about the server."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ctxprec.collector.diagnostics.drift_explain import DriftExplainer
from ctxprec.collector.diagnostics.noisy_documents import NoisyDocuments
from ctxprec.collector.diagnostics.top_k import TopKTracker

DEFAULT_LIMIT = 20


@dataclass(frozen=True, slots=True)
class JsonResponse:
    status: int
    body: dict[str, Any]


def _bad(message: str) -> JsonResponse:
    return JsonResponse(400, {"error": message})


def _limit(params: Mapping[str, str], most: int) -> int | str:
    raw = params.get("limit")
    if raw is None or raw == "":
        return min(DEFAULT_LIMIT, most)
    try:
        value = int(raw)
    except ValueError:
        return f"limit must be a whole number, got {raw[:40]!r}"
    if not 1 <= value <= most:
        return f"limit must be between 1 and {most}, got {value}"
    return value


def _matches(params: Mapping[str, str], service: str, retriever: str | None = None) -> bool:
    wanted_service = params.get("service") or None
    wanted_retriever = params.get("retriever") or None
    if wanted_service is not None and service != wanted_service:
        return False
    return retriever is None or wanted_retriever is None or retriever == wanted_retriever


def documents_view(noisy: NoisyDocuments, params: Mapping[str, str]) -> JsonResponse:
    """`?service=&retriever=&limit=`: the top documents by irrelevant verdicts of each matching
    (service, retriever). Service and retriever are the metrics' label values (a value folded into
    `other` is found under `other`); either may be left out to list them all."""
    limit = _limit(params, noisy.slots)
    if isinstance(limit, str):
        return _bad(limit)
    summaries = []
    for service, retriever in noisy.pairs():
        if not _matches(params, service, retriever):
            continue
        summary = noisy.summary(service, retriever)
        if summary is None:
            continue
        summaries.append({
            "service": service,
            "retriever": retriever,
            "irrelevant_verdicts": summary.total,
            "tracked": len(summary),
            "floor": summary.floor,
            "evictions": summary.evictions,
            "exact_top": summary.exact_top(limit),
            "documents": [row.to_dict() for row in noisy.top(service, retriever, limit)],
        })
    return JsonResponse(200, {"slots": noisy.slots, "previews": noisy.previews, "limit": limit,
                              "summaries": summaries})


def drift_view(explainer: DriftExplainer, params: Mapping[str, str],
               alarmed: Callable[[str], bool | None] | None = None) -> JsonResponse:
    """`?service=`: per service, the explanation made when its drift alarm last rose and the same
    decomposition as of now. `alarmed(service)` says whether the detector is alarmed right now."""
    services = []
    for service in explainer.slices.services():
        if not _matches(params, service):
            continue
        at_alarm = explainer.at_alarm(service)
        now = explainer.current(service)
        is_alarmed = alarmed(service) if alarmed is not None else None
        services.append({
            "service": service,
            "alarmed": is_alarmed,
            "at_alarm": None if at_alarm is None else _with_judge_note(at_alarm.to_dict(), explainer, at_alarm.at),
            "now": None if now is None else _with_judge_note(
                now.to_dict(), explainer, (at_alarm.at if at_alarm is not None else now.at) if is_alarmed else None),
        })
    return JsonResponse(200, {"attributes": list(explainer.slices.attributes), "services": services})


def _with_judge_note(entry: dict[str, Any], explainer: DriftExplainer, at: float | None) -> dict[str, Any]:
    """An alarm raised within the window of a judge change says so (`judge_changed`, and its
    message); an entry without an alarm has nothing to excuse."""
    note = explainer.judge_note(at) if at is not None and explainer.judge_note is not None else None
    entry["judge_changed"] = note
    if note:
        entry["message"] = f"{entry['message']}; {note}"
    return entry


def top_k_view(tracker: TopKTracker, params: Mapping[str, str]) -> JsonResponse:
    """`?service=&retriever=`: the recommended k, the saving and the kept-share curve per pair."""
    pairs = []
    for service, retriever in tracker.pairs():
        if not _matches(params, service, retriever):
            continue
        advice = tracker.advice(service, retriever)
        if advice is not None:
            pairs.append({"service": service, "retriever": retriever, **advice.to_dict()})
    return JsonResponse(200, {"keep": tracker.keep, "min_relevant": tracker.min_relevant, "pairs": pairs})
