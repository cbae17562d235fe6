"""The diagnostics' settings, with their defaults, in one place."""
from __future__ import annotations

from dataclasses import dataclass

from ctxprec.collector.diagnostics.noisy_documents import DEFAULT_PREVIEW_CHARS, DEFAULT_SLOTS
from ctxprec.collector.diagnostics.slices import (
    DEFAULT_BASELINE_HALF_LIFE,
    DEFAULT_MAX_VALUES,
    DEFAULT_RECENT_HALF_LIFE,
)
from ctxprec.collector.diagnostics.top_k import DEFAULT_HALVE_EVERY, DEFAULT_MAX_RANK
from ctxprec.scorer.top_k import DEFAULT_KEEP, DEFAULT_MIN_RELEVANT


@dataclass(frozen=True, slots=True)
class DiagnosticsSettings:
    slots: int = DEFAULT_SLOTS  # Space-Saving slots per (service, retriever)
    previews: bool = False  # text previews in /diagnostics/documents (needs a redaction callable)
    preview_chars: int = DEFAULT_PREVIEW_CHARS
    slice_attributes: tuple[str, ...] = ()  # span attributes drift is explained by, e.g. index.version
    max_slice_values: int = DEFAULT_MAX_VALUES  # per attribute and service; more go to `other`
    recent_half_life: float = DEFAULT_RECENT_HALF_LIFE  # in scores of the service
    baseline_half_life: float = DEFAULT_BASELINE_HALF_LIFE
    top_k_keep: float = DEFAULT_KEEP
    top_k_min_relevant: int = DEFAULT_MIN_RELEVANT
    top_k_max_rank: int = DEFAULT_MAX_RANK
    top_k_halve_every: int = DEFAULT_HALVE_EVERY
    # Label caps used only when the sink is built without the sidecar's Metrics (whose caps it
    # shares otherwise, so that diagnostics and metrics fold the same values into `other`).
    max_services: int = 50
    max_retrievers: int = 50
