"""Settings of the diagnostics (YAML section `diagnostics`): noisy documents, the right top-k and
the drift slices, served on the metrics port under /diagnostics/ (docs/DIAGNOSTICS.md)."""
from __future__ import annotations

from typing import Annotated, Any

from ctxprec.collector.config_types import Count, Switch, parse_text, setting
from ctxprec.collector.diagnostics.noisy_documents import DEFAULT_SLOTS
from ctxprec.collector.diagnostics.settings import DiagnosticsSettings
from ctxprec.collector.diagnostics.slices import MAX_ATTRIBUTES
from pydantic import BaseModel, BeforeValidator, ConfigDict


def _attribute_list(raw: Any) -> tuple[str, ...]:
    """A YAML list, or comma-separated text (a flag or an environment variable)."""
    if raw is None:
        return ()
    items = raw if isinstance(raw, (list, tuple)) else parse_text(raw).split(",")
    names = tuple(dict.fromkeys(parse_text(item).strip() for item in items if parse_text(item).strip()))
    if len(names) > MAX_ATTRIBUTES:
        raise ValueError(f"at most {MAX_ATTRIBUTES} attributes, got {len(names)}")
    return names


AttributeList = Annotated[tuple[str, ...], BeforeValidator(_attribute_list)]


class DiagnosticsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    enabled: Switch = setting(True, "keep the diagnostics: noisy documents, recommended top-k, drift slices "
                                    "(/diagnostics/ on the metrics port)", flag="--diagnostics")
    slots: Count = setting(DEFAULT_SLOTS, "noisy documents tracked per service and retriever (Space-Saving slots)",
                           flag="--diagnostics-slots")
    slice_attributes: AttributeList = setting(
        (), f"span attributes a drift is explained by, e.g. index.version,tenant.tier (at most {MAX_ATTRIBUTES}; "
            "comma-separated on the command line)", flag="--diagnostics-slice-attributes")
    previews: Switch = setting(False, "show the start of each noisy document's text in /diagnostics/documents "
                                      "(redacted when --redact-pii is on); off: ids and hashes only",
                               flag="--diagnostics-previews")

    def settings(self, *, max_services: int, max_retrievers: int) -> DiagnosticsSettings:
        """The sink's settings, with the metrics' label caps (so both fold the same values)."""
        return DiagnosticsSettings(slots=self.slots, previews=self.previews, slice_attributes=self.slice_attributes,
                                   max_services=max_services, max_retrievers=max_retrievers)
