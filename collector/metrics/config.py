"""Settings of the metrics endpoint and of the metrics' label caps (YAML section `metrics`)."""
from __future__ import annotations

from ctxprec.collector.config_types import Count, Listen, setting
from pydantic import BaseModel, ConfigDict


class MetricsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    listen: Listen = setting("0.0.0.0:9464", "Prometheus /metrics, /healthz and /readyz address, or off",
                             flag="--metrics")
    max_services: Count = setting(50, "distinct `service` label values kept before the rest become `other`",
                                  flag="--max-services")
    max_retrievers: Count = setting(50, "distinct `retriever` label values kept before the rest become `other`",
                                    flag="--max-retrievers")
