"""Settings of the limits every listener keeps on its connections (YAML section `listeners`): how
long a client may take to send a request's headers and body, how long a connection may sit idle,
and how many may be open at once. One set for every listener (OTLP/HTTP, OTLP/gRPC, metrics),
each listener counting its own connections; collector/listeners.py applies them."""
from __future__ import annotations

from ctxprec.collector.config_types import Count, Positive, setting
from pydantic import BaseModel, ConfigDict


class ListenersConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    header_timeout_s: Positive = setting(
        10.0, "a client must send a request's headers within this long, seconds (counted from the connection or "
              "the request's first byte); slower connections are closed (also gRPC's connection handshake)",
        flag="--listener-header-timeout")
    body_timeout_s: Positive = setting(
        30.0, "a client must send a request's body within this long once its headers are in, seconds; then it "
              "gets 408 and the connection is closed", flag="--listener-body-timeout")
    idle_timeout_s: Positive = setting(
        60.0, "a kept-alive connection with no request for this long is closed, seconds (gRPC: no call for this "
              "long)", flag="--listener-idle-timeout")
    max_connections: Count = setting(
        256, "open connections per listener at most; one more closes the oldest that never completed a request, "
             "or is closed itself when there is none (file descriptors stay free for the rest, /healthz included)",
        flag="--listener-max-connections")
