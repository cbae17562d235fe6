"""Value parsers shared by every setting of ctxprec: the judge's (scorer/config.py, read by the
library, `ctxprec score` and `ctxprec serve`) and the sidecar's (collector/config_types.py builds
its setting types from these).

Each parser takes the raw value (a Python value from the library, a YAML scalar, or the text of a
flag or an environment variable) and returns the value, or raises ValueError saying what is wrong
in words a user can act on; the caller adds which setting and where the value came from."""
from __future__ import annotations

import math
from typing import Any, Callable

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


def number_between(low: float, high: float) -> Callable[[Any], float]:
    """A parser for a finite number in [low, high]."""
    def parse(raw: Any) -> float:
        value = float(parse_number(raw))
        if not low <= value <= high:
            raise ValueError(f"must be a number between {low:g} and {high:g}, got {raw!r}")
        return value
    return parse


def parse_price_pair(raw: Any) -> tuple[float, float] | None:
    """`INPUT,OUTPUT`: USD per million prompt and completion tokens (two numbers >= 0, as text
    or a pair); off or nothing: no price given."""
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in OFF_WORDS):
        return None
    parts: Any = raw.split(",") if isinstance(raw, str) else raw
    if isinstance(parts, (list, tuple)) and len(parts) == 2:
        try:
            pair = (parse_non_negative(parts[0]), parse_non_negative(parts[1]))
        except ValueError:
            pass
        else:
            return pair
    raise ValueError(f"must be INPUT,OUTPUT: two numbers >= 0, USD per million prompt and completion tokens "
                     f"(e.g. 0.15,0.60), got {raw!r}")


# How --help names each parser's value.
METAVAR_OF_PARSER: dict[Callable[[Any], Any], str] = {
    parse_rate: "R", parse_positive: "NUM", parse_non_negative: "NUM", parse_optional_positive: "NUM|off",
    parse_count: "N", parse_count0: "N", parse_bool: "true|false", parse_text: "TEXT", parse_optional_text: "TEXT",
}
