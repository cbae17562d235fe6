"""Bearer-token auth and TLS for the sidecar's listeners (the OTLP receivers and the metrics
endpoint), and what counts as a listener exposed beyond the machine."""
from __future__ import annotations

import hmac
import ipaddress
import ssl
from dataclasses import dataclass, field
from pathlib import Path


def read_token_file(path: str, what: str) -> str:
    """A token kept in a file (a mounted Secret): its text without surrounding whitespace."""
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{what}: {path!r} is not UTF-8 text") from None
    if not token:
        raise ValueError(f"{what}: {path!r} is empty")
    return token


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost`; 0.0.0.0, :: and any other name or address are not."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, as gRPC binds 127.0.0.1
    return (mapped or address).is_loopback


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    bearer_token: str | None = field(default=None, repr=False)  # clients send `authorization: Bearer <token>`
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None  # set: clients must present a certificate it signed (mTLS)
    name: str = "listener"  # in error messages: "receiver", "metrics"

    def __post_init__(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError(f"{self.name} TLS: tls_cert_file and tls_key_file must be given together")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError(f"{self.name} TLS: tls_client_ca_file needs tls_cert_file and tls_key_file")
        for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ValueError(f"{self.name} TLS: {name} {path!r} does not exist")
        if self.bearer_token is not None and not self.bearer_token.strip():
            raise ValueError(f"{self.name} auth: bearer_token must not be empty")

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)

    @property
    def protected(self) -> bool:
        """A token or TLS: something more than the network stands between a client and the data."""
        return self.bearer_token is not None or self.tls

    def authorized(self, header: str | None) -> bool:
        if self.bearer_token is None:
            return True
        return self.token_matches(header)

    def token_matches(self, header: str | None) -> bool:
        """Whether `header` carries the configured token (False when none is configured)."""
        if self.bearer_token is None or not header:
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
