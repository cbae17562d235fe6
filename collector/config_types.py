"""The value types of `ctxprec serve` settings: one parser per type, shared by every component's
config model, whatever the value came from (YAML, a `CTXPREC_*` variable or a flag).

Each parser takes the raw value (a YAML scalar or text) and returns the value, or raises
ValueError saying what is wrong in words a user can act on; the config loader adds which key and
where the value came from. `setting(...)` declares a field with its flag and help, read by
`ctxprec serve --help` and by the generated docs/CONFIG.md.
"""
from __future__ import annotations

import math
import os
from typing import Annotated, Any, Callable
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field

OFF_WORDS = ("", "off", "none", "disabled", "false", "0")
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


def parse_number(raw: Any, *, integer: bool = False) -> float | int:
    if isinstance(raw, bool):
        raise ValueError(f"must be a number, got {raw!r}")
    try:
        value = int(raw) if integer and not isinstance(raw, float) else float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"must be {'an integer' if integer else 'a number'}, got {raw!r}") from None
    if integer and isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"must be an integer, got {raw!r}")
        value = int(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {raw!r}")
    return value


def parse_rate(raw: Any) -> float:
    value = float(parse_number(raw))
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {raw!r}")
    return value


def parse_positive(raw: Any) -> float:
    value = float(parse_number(raw))
    if value <= 0:
        raise ValueError(f"must be a number > 0, got {raw!r}")
    return value


def parse_non_negative(raw: Any) -> float:
    value = float(parse_number(raw))
    if value < 0:
        raise ValueError(f"must be a number >= 0, got {raw!r}")
    return value


def parse_optional_positive(raw: Any) -> float | None:
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in OFF_WORDS):
        return None
    return parse_positive(raw)


def parse_count(raw: Any) -> int:
    value = int(parse_number(raw, integer=True))
    if value < 1:
        raise ValueError(f"must be an integer >= 1, got {raw!r}")
    return value


def parse_count0(raw: Any) -> int:
    value = int(parse_number(raw, integer=True))
    if value < 0:
        raise ValueError(f"must be an integer >= 0, got {raw!r}")
    return value


def parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    word = str(raw).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"must be true or false, got {raw!r}")


def parse_text(raw: Any) -> str:
    if isinstance(raw, (dict, list)):
        raise ValueError(f"must be text, got a {type(raw).__name__}")
    return str(raw)


def parse_optional_text(raw: Any) -> str | None:
    if raw is None:
        return None
    value = parse_text(raw).strip()
    return value or None


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


def choice(*choices: str, optional: bool = False) -> Callable[[Any], str | None]:
    """A parser for one of `choices` (case-insensitive); with `optional`, `auto` or nothing is None."""
    def parse(raw: Any) -> str | None:
        if optional and (raw is None or parse_text(raw).strip().lower() in ("", "auto")):
            return None
        value = parse_text(raw).strip().lower()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {raw!r}")
        return value
    parse.choices = choices  # type: ignore[attr-defined]  # read by --help and the docs
    return parse


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

METAVARS: dict[Any, str] = {
    Rate: "R", Positive: "NUM", NonNegative: "NUM", OptionalPositive: "NUM|off", Count: "N", Count0: "N",
    Switch: "true|false", Text: "TEXT", OptionalText: "TEXT", Listen: "HOST:PORT|off", OtlpUrl: "URL",
    ReadableFile: "FILE",
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
