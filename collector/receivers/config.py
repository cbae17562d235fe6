"""Settings of the OTLP receivers: the YAML section `receivers` (`ReceiversConfig`), and what each
receiver is built with (`OtlpReceiverSettings`: its own address, with the limits, auth and TLS
the two receivers share)."""
from __future__ import annotations

from dataclasses import dataclass

from ctxprec.collector.config_types import (
    Count,
    Listen,
    OptionalText,
    Positive,
    ReadableFile,
    setting,
)
from ctxprec.collector.listener_limits import ListenersConfig
from ctxprec.collector.listener_security import ListenerSecurity, read_token_file
from pydantic import BaseModel, ConfigDict, model_validator


@dataclass(frozen=True, slots=True)
class OtlpReceiverSettings:
    """One OTLP receiver: where it listens, what a request may hold, who may send, and the limits
    it keeps on its connections."""

    host: str
    port: int
    max_bytes: int  # per request, compressed and decompressed
    max_spans: int
    security: ListenerSecurity
    limits: ListenersConfig


class ReceiversConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    # Loopback by default, as the OpenTelemetry Collector's receivers: an app in the same pod or
    # on the same host reaches it; anything else is an explicit choice of address.
    otlp_grpc: Listen = setting("127.0.0.1:4317", "OTLP/gRPC listen address (traces, logs, metrics), or off; "
                                                  "0.0.0.0:4317 to accept other hosts", flag="--otlp-grpc")
    otlp_http: Listen = setting("127.0.0.1:4318", "OTLP/HTTP listen address (/v1/traces, /v1/logs, /v1/metrics, "
                                                  "protobuf and JSON), or off; 0.0.0.0:4318 to accept other hosts",
                                flag="--otlp-http")
    auth_token: OptionalText = setting(None, "require 'Authorization: Bearer TOKEN' on OTLP requests",
                                       flag="--receiver-auth-token", secret=True)
    auth_token_file: ReadableFile = setting(None, "as --receiver-auth-token, read from this file (a mounted secret)",
                                            flag="--receiver-auth-token-file")
    tls_cert: ReadableFile = setting(None, "TLS certificate (PEM) for the OTLP receivers", flag="--receiver-tls-cert")
    tls_key: ReadableFile = setting(None, "TLS private key (PEM) for the OTLP receivers", flag="--receiver-tls-key")
    tls_client_ca: ReadableFile = setting(
        None, "CA (PEM) that OTLP clients' certificates must be signed by (mTLS); needs --receiver-tls-cert",
        flag="--receiver-tls-client-ca")
    max_request_mb: Positive = setting(16.0, "largest OTLP request accepted (compressed and decompressed; traces, "
                                             "logs and metrics), MB", flag="--max-request-mb")
    max_spans_per_request: Count = setting(
        100_000, "spans in one OTLP request at most (the SDKs send 512); a larger request is refused (HTTP 413, "
                 "gRPC RESOURCE_EXHAUSTED) and counted", flag="--max-spans-per-request")

    @property
    def max_request_bytes(self) -> int:
        return int(self.max_request_mb * 1024 * 1024)

    def grpc(self, limits: ListenersConfig | None = None) -> OtlpReceiverSettings | None:
        """The OTLP/gRPC receiver's settings; None when it is off."""
        return self._receiver(self.otlp_grpc, limits)

    def http(self, limits: ListenersConfig | None = None) -> OtlpReceiverSettings | None:
        """The OTLP/HTTP receiver's settings; None when it is off."""
        return self._receiver(self.otlp_http, limits)

    def _receiver(self, listen: tuple[str, int] | None, limits: ListenersConfig | None) -> OtlpReceiverSettings | None:
        if listen is None:
            return None
        return OtlpReceiverSettings(host=listen[0], port=listen[1], max_bytes=self.max_request_bytes,
                                    max_spans=self.max_spans_per_request, security=self.security(),
                                    limits=limits or ListenersConfig())

    def security(self) -> ListenerSecurity:
        token = self.auth_token
        if self.auth_token_file is not None:
            token = read_token_file(self.auth_token_file, "receivers.auth_token_file")
        return ListenerSecurity(bearer_token=token, tls_cert_file=self.tls_cert, tls_key_file=self.tls_key,
                                tls_client_ca_file=self.tls_client_ca, name="receiver")

    @model_validator(mode="after")
    def _check(self) -> "ReceiversConfig":
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("[tls_cert / tls_key] give both or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("[tls_client_ca] needs tls_cert and tls_key (client certificates are checked during "
                             "the TLS handshake)")
        if self.auth_token is not None and self.auth_token_file is not None:
            raise ValueError("[auth_token / auth_token_file] give one or the other")
        if self.auth_token_file is not None:
            read_token_file(self.auth_token_file, "[auth_token_file]")  # an empty file fails at start
        return self
