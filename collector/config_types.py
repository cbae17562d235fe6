"""The value types of `ctxprec serve` settings: one parser per type, shared by every component's
config model, whatever the value came from (YAML, a `CTXPREC_*` variable or a flag).

Each parser takes the raw value (a YAML scalar or text) and returns the value, or raises
ValueError saying what is wrong in words a user can act on; the config loader adds which key and
where the value came from. The parsers the judge's settings use too live in the scorer library
(scorer/values.py); the sidecar-only ones (listen addresses, URLs, files) are here.
`setting(...)` declares a field with its flag and help, read by `ctxprec serve --help` and by the
generated docs/CONFIG.md.
"""
from __future__ import annotations

import os
from typing import Annotated, Any, Callable
from urllib.parse import urlsplit

from ctxprec.scorer.values import (  # noqa: F401 - re-exported for the components' config models
    FALSE_WORDS,
    METAVAR_OF_PARSER,
    OFF_WORDS,
    TRUE_WORDS,
    choice,
    parse_bool,
    parse_count,
    parse_count0,
    parse_non_negative,
    parse_number,
    parse_optional_positive,
    parse_optional_text,
    parse_positive,
    parse_rate,
    parse_text,
)
from pydantic import BeforeValidator, Field


def parse_listen(raw: Any) -> tuple[str, int] | None:
    """`host:port` (`[v6]:port` too); `off` disables the listener."""
    if raw is None or parse_text(raw).strip().lower() in OFF_WORDS:
        return None
    if isinstance(raw, tuple) and len(raw) == 2:
        return str(raw[0]), int(raw[1])
    value = parse_text(raw).strip()
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"must be HOST:PORT (or off), got {raw!r}")
    number = int(port)
    if number > 65535:
        raise ValueError(f"port must be 0..65535, got {raw!r}")
    return host.strip("[]") or "0.0.0.0", number


def parse_otlp_url(raw: Any) -> str | None:
    value = parse_optional_text(raw)
    if value is None or value.lower() in OFF_WORDS:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https", "grpc", "grpcs") or not parts.hostname:
        raise ValueError(f"must be a URL like http://host:4318, https://..., grpc://host:4317 or grpcs://..., "
                         f"got {raw!r}")
    return value


def parse_readable_file(raw: Any) -> str | None:
    value = parse_optional_text(raw)
    if value is not None and not os.path.isfile(value):
        raise ValueError(f"file not found: {value!r}")
    return value


Rate = Annotated[float, BeforeValidator(parse_rate)]
Positive = Annotated[float, BeforeValidator(parse_positive)]
NonNegative = Annotated[float, BeforeValidator(parse_non_negative)]
OptionalPositive = Annotated[float | None, BeforeValidator(parse_optional_positive)]
Count = Annotated[int, BeforeValidator(parse_count)]
Count0 = Annotated[int, BeforeValidator(parse_count0)]
Switch = Annotated[bool, BeforeValidator(parse_bool)]
Text = Annotated[str, BeforeValidator(parse_text)]
OptionalText = Annotated[str | None, BeforeValidator(parse_optional_text)]
Listen = Annotated[tuple[str, int] | None, BeforeValidator(parse_listen)]
OtlpUrl = Annotated[str | None, BeforeValidator(parse_otlp_url)]
ReadableFile = Annotated[str | None, BeforeValidator(parse_readable_file)]

# The type a setting declared in the scorer library (by its parser, scorer/config.py) has here.
TYPE_OF_PARSER: dict[Callable[[Any], Any], Any] = {
    parse_rate: Rate, parse_positive: Positive, parse_non_negative: NonNegative,
    parse_optional_positive: OptionalPositive, parse_count: Count, parse_count0: Count0, parse_bool: Switch,
    parse_text: Text, parse_optional_text: OptionalText,
}
METAVARS: dict[Any, str] = {
    **{TYPE_OF_PARSER[parse]: metavar for parse, metavar in METAVAR_OF_PARSER.items()},
    Listen: "HOST:PORT|off", OtlpUrl: "URL", ReadableFile: "FILE",
}


def setting(default: Any, help: str, *, flag: str | None = None, env: str | None = None, secret: bool = False,
            choices: tuple[str, ...] | None = None, repeatable: bool = False, metavar: str | None = None,
            **kwargs: Any) -> Any:
    """A config field: its default (written here once), what it means, and its command-line flag
    (whose environment variable is CTXPREC_<FLAG>). `env` names the variable of a setting with no
    flag (a secret that should not show in the process list). `secret` keeps the value out of repr.
    `repeatable`: a list, whose flag may be given several times (each adds an item); its parser
    also takes the environment variable's text and splits it. `metavar` names the flag's value
    in --help when the type's own name says too little."""
    extra: dict[str, Any] = {}
    if flag:
        extra["flag"] = flag
    if env:
        extra["env"] = env
    if choices:
        extra["choices"] = list(choices)
    if repeatable:
        extra["repeatable"] = True
    if metavar:
        extra["metavar"] = metavar
    return Field(default, description=help, json_schema_extra=extra or None, repr=not secret, **kwargs)
