"""Settings of the metrics endpoint and of the metrics' label caps (YAML section `metrics`)."""
from __future__ import annotations

from ctxprec.collector.config_types import Count, Listen, OptionalText, ReadableFile, Switch, setting
from ctxprec.collector.listener_security import ListenerSecurity, read_token_file
from pydantic import BaseModel, ConfigDict, model_validator


class MetricsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    listen: Listen = setting("127.0.0.1:9464", "Prometheus /metrics, /healthz, /readyz and /diagnostics address, "
                                               "or off; 0.0.0.0:9464 to be scraped from other hosts",
                             flag="--metrics")
    token: OptionalText = setting(None, "bearer token that /metrics and /diagnostics/ require ('Authorization: "
                                        "Bearer TOKEN'); /healthz and /readyz stay open for probes",
                                  env="CTXPREC_METRICS_TOKEN", secret=True)
    token_file: ReadableFile = setting(None, "as CTXPREC_METRICS_TOKEN, read from this file (a mounted secret)",
                                       flag="--metrics-token-file")
    open: Switch = setting(False, "serve /metrics without the token, for scrapers that cannot send one "
                                  "(/diagnostics/ still needs it)", flag="--metrics-open")
    tls_cert: ReadableFile = setting(None, "TLS certificate (PEM) for the metrics endpoint", flag="--metrics-tls-cert")
    tls_key: ReadableFile = setting(None, "TLS private key (PEM) for the metrics endpoint", flag="--metrics-tls-key")
    tls_client_ca: ReadableFile = setting(
        None, "CA (PEM) that scrapers' certificates must be signed by (mTLS); needs --metrics-tls-cert",
        flag="--metrics-tls-client-ca")
    max_services: Count = setting(50, "distinct `service` label values kept before the rest become `other`",
                                  flag="--max-services")
    max_retrievers: Count = setting(50, "distinct `retriever` label values kept before the rest become `other`",
                                    flag="--max-retrievers")
    max_series_per_metric: Count = setting(
        2000, "series one metric family may have (label values multiplied, a histogram's buckets counted); "
              "past it new service and retriever values are counted under `other` "
              "(ctxprec_metric_series_folded_total); the diagnostics' (service, retriever) pairs are bounded alike",
        flag="--max-series-per-metric")

    def security(self) -> ListenerSecurity:
        token = self.token
        if self.token_file is not None:
            token = read_token_file(self.token_file, "metrics.token_file")
        return ListenerSecurity(bearer_token=token, tls_cert_file=self.tls_cert, tls_key_file=self.tls_key,
                                tls_client_ca_file=self.tls_client_ca, name="metrics")

    @model_validator(mode="after")
    def _check(self) -> "MetricsConfig":
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("[tls_cert / tls_key] give both or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("[tls_client_ca] needs tls_cert and tls_key")
        if self.token is not None and self.token_file is not None:
            raise ValueError("[token / token_file] give one or the other")
        if self.token_file is not None:
            read_token_file(self.token_file, "[token_file]")
        return self
