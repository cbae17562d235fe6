"""Bearer-token auth and TLS settings shared by the OTLP/HTTP and OTLP/gRPC receivers."""
from __future__ import annotations

import hmac
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxprec.collector.receivers.config import ReceiversConfig


@dataclass(frozen=True, slots=True)
class ReceiverSecurity:
    bearer_token: str | None = field(default=None, repr=False)  # clients send `authorization: Bearer <token>`
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None  # set: clients must present a certificate it signed (mTLS)

    def __post_init__(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("receiver TLS: tls_cert_file and tls_key_file must be given together")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError("receiver TLS: tls_client_ca_file needs tls_cert_file and tls_key_file")
        for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ValueError(f"receiver TLS: {name} {path!r} does not exist")
        if self.bearer_token is not None and not self.bearer_token.strip():
            raise ValueError("receiver auth: bearer_token must not be empty")

    @classmethod
    def of(cls, config: "ReceiversConfig") -> "ReceiverSecurity":
        return cls(bearer_token=config.auth_token, tls_cert_file=config.tls_cert, tls_key_file=config.tls_key,
                   tls_client_ca_file=config.tls_client_ca)

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)

    def authorized(self, header: str | None) -> bool:
        if self.bearer_token is None:
            return True
        if not header:
            return False
        scheme, _, token = header.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.bearer_token.encode())

    def server_ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.tls_cert_file, self.tls_key_file)  # type: ignore[arg-type]
        if self.tls_client_ca_file:
            context.load_verify_locations(self.tls_client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def grpc_server_credentials(self) -> object | None:
        if not self.tls:
            return None
        import grpc

        key = Path(self.tls_key_file).read_bytes()  # type: ignore[arg-type]
        cert = Path(self.tls_cert_file).read_bytes()  # type: ignore[arg-type]
        root = Path(self.tls_client_ca_file).read_bytes() if self.tls_client_ca_file else None
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=root,
                                           require_client_auth=root is not None)
