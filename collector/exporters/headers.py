"""Extra request headers for the OTLP exports (`--forward-header`, `OTEL_EXPORTER_OTLP_HEADERS`),
so that spans can go through ctxprec to a backend that wants credentials (Langfuse's OTLP
endpoint, a Phoenix with auth on).

A header is `NAME=VALUE`. Credentials should not sit on a command line or in a config file, so a
value can point elsewhere instead: `$VAR` or `${VAR}` anywhere in it is replaced by the
environment variable (`Authorization=Bearer ${PHOENIX_API_KEY}`), and `NAME=@/path/file` is the
file's content (trailing newlines removed: a mounted Kubernetes secret); a backslash keeps a `$`
(anywhere) or a leading `@` as it is (`NAME=\\$5`). References are read once, when
the configuration is loaded, so that a missing variable or file stops the start with the key
named. Values never appear in a message: errors name the header and where its value was to come
from, nothing else.
"""
from __future__ import annotations

import os
import re
from typing import Any, Mapping
from urllib.parse import unquote

# RFC 9110 field-name: a token.
_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_ENV_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")

OTEL_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
OTEL_SIGNAL_HEADERS = {"traces": "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "logs": "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
                       "metrics": "OTEL_EXPORTER_OTLP_METRICS_HEADERS"}

Headers = tuple[tuple[str, str], ...]


def parse_forward_headers(raw: Any, *, environ: Mapping[str, str] | None = None) -> Headers:
    """`NAME=VALUE` items (a list, a mapping, or text with items separated by commas, as a
    `CTXPREC_FORWARD_HEADER` variable holds them) -> ((name, resolved value), ...)."""
    env = os.environ if environ is None else environ
    if raw is None:
        return ()
    if isinstance(raw, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in raw):
        return raw  # already parsed (a default, or a config built in code)
    items: list[tuple[str, str]] = []
    if isinstance(raw, Mapping):
        for name, value in raw.items():
            items.append((str(name).strip(), _as_text(value, str(name))))
    else:
        entries = raw.split(",") if isinstance(raw, str) else list(raw)
        for entry in entries:
            if not isinstance(entry, str):
                raise ValueError(f"each header must be NAME=VALUE text, got a {type(entry).__name__}")
            if not entry.strip():
                continue
            name, sep, value = entry.partition("=")
            if not sep:
                raise ValueError(f"header {name.strip()[:40]!r}: must be NAME=VALUE (the value may be $VAR or @FILE)")
            items.append((name.strip(), value))
    out: dict[str, tuple[str, str]] = {}
    for name, value in items:
        if not _NAME.match(name):
            raise ValueError(f"header name {name[:40]!r} is not a valid HTTP header name")
        resolved = _resolve(name, value.strip(), env)
        if any(c in resolved for c in "\r\n\0"):
            raise ValueError(f"header {name}: the value holds a line break or NUL")
        out[name.lower()] = (name, resolved)  # a later value for the same name wins
    return tuple(out.values())


def _as_text(value: Any, name: str) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError(f"header {name}: the value must be text")
    return str(value)


def _resolve(name: str, value: str, environ: Mapping[str, str]) -> str:
    if value.startswith("\\@"):
        return value[1:]
    if value.startswith("@"):
        path = value[1:]
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().rstrip("\r\n")
        except OSError as exc:
            raise ValueError(f"header {name}: cannot read {path} ({exc.strerror or type(exc).__name__})") from None
    return _substitute(name, value, environ)


def _substitute(name: str, value: str, environ: Mapping[str, str]) -> str:
    """`$VAR` and `${VAR}` anywhere in the value (`Bearer ${PHOENIX_API_KEY}`); `\\$` is a `$`."""
    out: list[str] = []
    i = 0
    while i < len(value):
        if value.startswith("\\$", i):
            out.append("$")
            i += 2
            continue
        if value[i] != "$":
            out.append(value[i])
            i += 1
            continue
        match = _ENV_REF.match(value, i)
        if not match:
            raise ValueError(f"header {name}: $ must be followed by an environment variable name ($VAR or ${{VAR}}); "
                             f"write \\$ for a literal $")
        var = match.group(1) or match.group(2)
        if var not in environ:
            raise ValueError(f"header {name}: environment variable {var} is not set")
        out.append(environ[var])
        i = match.end()
    return "".join(out)


def otel_env_headers(signal: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers OpenTelemetry's exporters take from the environment: the signal's own variable
    (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`) when set, else `OTEL_EXPORTER_OTLP_HEADERS`; a
    comma-separated list of `key=value`, values percent-decoded (the OTel specification's format).
    Entries that do not parse are skipped, as the OTel SDK skips them."""
    env = os.environ if environ is None else environ
    raw = env.get(OTEL_SIGNAL_HEADERS.get(signal, ""), "") or env.get(OTEL_HEADERS, "")
    out: dict[str, str] = {}
    for entry in raw.split(","):
        name, sep, value = entry.partition("=")
        name = unquote(name.strip())
        if not sep or not _NAME.match(name):
            continue
        decoded = unquote(value.strip())
        if any(c in decoded for c in "\r\n\0"):
            continue
        out[name.lower()] = decoded
    return out


def export_headers(configured: Headers, signal: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What an OTLP export sends: the OTel environment's headers, then `--forward-header`, which
    wins for a name given in both (names compared without case)."""
    headers = otel_env_headers(signal, environ)
    for name, value in configured:
        headers[name.lower()] = value
    return headers
