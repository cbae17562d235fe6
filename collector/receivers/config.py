"""Settings of the OTLP receivers (YAML section `receivers`)."""
from __future__ import annotations

from ctxprec.collector.config_types import (
    Listen,
    OptionalText,
    Positive,
    ReadableFile,
    setting,
)
from pydantic import BaseModel, ConfigDict, model_validator


class ReceiversConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    otlp_grpc: Listen = setting("0.0.0.0:4317", "OTLP/gRPC listen address, or off", flag="--otlp-grpc")
    otlp_http: Listen = setting("0.0.0.0:4318", "OTLP/HTTP listen address (/v1/traces, protobuf and JSON), or off",
                                flag="--otlp-http")
    auth_token: OptionalText = setting(None, "require 'Authorization: Bearer TOKEN' on OTLP requests",
                                       flag="--receiver-auth-token", secret=True)
    tls_cert: ReadableFile = setting(None, "TLS certificate (PEM) for the OTLP receivers", flag="--receiver-tls-cert")
    tls_key: ReadableFile = setting(None, "TLS private key (PEM) for the OTLP receivers", flag="--receiver-tls-key")
    tls_client_ca: ReadableFile = setting(
        None, "CA (PEM) that OTLP clients' certificates must be signed by (mTLS); needs --receiver-tls-cert",
        flag="--receiver-tls-client-ca")
    max_request_mb: Positive = setting(16.0, "largest OTLP request accepted (compressed and decompressed), MB",
                                       flag="--max-request-mb")

    @property
    def max_request_bytes(self) -> int:
        return int(self.max_request_mb * 1024 * 1024)

    @model_validator(mode="after")
    def _tls_files_go_together(self) -> "ReceiversConfig":
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("[tls_cert / tls_key] give both or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("[tls_client_ca] needs tls_cert and tls_key (client certificates are checked during "
                             "the TLS handshake)")
        return self
