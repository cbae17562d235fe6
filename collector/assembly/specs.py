"""Value specs: where in a span a value sits, as the conventions table and user mappings write it.

- `key`: a span attribute;
- `key$.a.b[0]`, `key$[*].text`: a JSON path into the attribute's value (JSON text is opened on
  the way; `[*]` maps the rest of the path over a list);
- `prefix.{i}.suffix`: one attribute per item, `i` its rank (OpenInference's numbered documents);
- `span.name` in a condition: the span's name.

Parsed once when the table or the config is loaded; reading a spec is a dict lookup and a walk.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ctxprec.collector.assembly.values import loads

SPAN_NAME = "span.name"
_PATH_TOKEN = re.compile(r"\.([^.\[\]]+)|\[(\d+|\*)\]")
_MAX_INDEX_DIGITS = 9

PathToken = tuple[str | None, str | None]  # (field name, None) or (None, index or "*")


@dataclass(frozen=True, slots=True)
class Spec:
    text: str  # as written
    key: str  # the attribute key (for a pattern: the whole pattern)
    path: tuple[PathToken, ...] = ()
    has_path: bool = False
    prefix: str | None = None  # a `{i}` pattern: key = prefix + rank + suffix
    suffix: str = ""

    @property
    def pattern(self) -> bool:
        return self.prefix is not None

    def first_key(self) -> str:
        """The attribute key of the first item (rank 0) of a pattern, else the key."""
        return f"{self.prefix}0{self.suffix}" if self.prefix is not None else self.key

    def key_prefix(self) -> str:
        """What every key this spec reads starts with."""
        return self.prefix if self.prefix is not None else self.key

    def resolve(self, attributes: Mapping[str, Any]) -> Any:
        """The value (None when absent); a path is walked into the attribute's JSON."""
        value = attributes.get(self.key)
        if not self.has_path or value is None:
            return value
        return walk(loads(value), self.path)

    def ranks(self, attributes: Mapping[str, Any]) -> dict[int, Any]:
        """A pattern's values by rank (keys that do not fit the pattern are ignored)."""
        assert self.prefix is not None
        prefix, suffix = self.prefix, self.suffix
        out: dict[int, Any] = {}
        for key, value in attributes.items():
            if key.startswith(prefix) and key.endswith(suffix):
                middle = key[len(prefix):len(key) - len(suffix)] if suffix else key[len(prefix):]
                if middle.isdigit() and len(middle) <= _MAX_INDEX_DIGITS:
                    out[int(middle)] = value
        return out


def parse_spec(text: str) -> Spec:
    """`key`, `key$json.path` or `prefix.{i}.suffix`; ValueError naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("must be an attribute key, `key$json.path` or a key pattern with {i}")
    key, sep, path = text.partition("$")
    if not key:
        raise ValueError(f"{text!r}: the attribute key before `$` is missing")
    if "{i}" in key:
        if sep:
            raise ValueError(f"{text!r}: a key pattern with {{i}} takes no JSON path")
        prefix, _, suffix = key.partition("{i}")
        if "{i}" in suffix:
            raise ValueError(f"{text!r}: {{i}} may appear once")
        return Spec(text, key, prefix=prefix, suffix=suffix)
    if not sep:
        return Spec(text, key)
    tokens = tuple((m.group(1), m.group(2)) for m in _PATH_TOKEN.finditer(path))
    if "".join(m.group(0) for m in _PATH_TOKEN.finditer(path)) != path:
        raise ValueError(f"{text!r}: the JSON path must be made of .name, [N] and [*] steps")
    return Spec(text, key, tokens, has_path=True)


def parse_specs(texts: str | Iterable[str]) -> tuple[Spec, ...]:
    return tuple(parse_spec(t) for t in ([texts] if isinstance(texts, str) else texts))


def walk(value: Any, tokens: tuple[PathToken, ...]) -> Any:
    for position, (name, index) in enumerate(tokens):
        value = loads(value)
        if name is not None:
            value = value.get(name) if isinstance(value, dict) else None
        elif index == "*":
            if not isinstance(value, list):
                return None
            rest = tokens[position + 1:]
            return [walk(item, rest) for item in value] if rest else value
        else:
            assert index is not None
            i = int(index)
            value = value[i] if isinstance(value, list) and i < len(value) else None
        if value is None:
            return None
    return value


@dataclass(frozen=True, slots=True)
class Condition:
    """An attribute (or `span.name`) and the values it may take; `values` None: any value."""

    key: str
    values: frozenset[str] | None

    def holds(self, name: str, attributes: Mapping[str, Any]) -> bool:
        if self.key == SPAN_NAME:
            value: Any = name
        else:
            value = attributes.get(self.key)
            if value is None:
                return False
        return self.values is None or _text(value) in self.values

    def present_in(self, attributes: Mapping[str, Any]) -> bool:
        """The key is set (whatever its value): the condition speaks about this span."""
        return self.key in attributes


def conditions(raw: Mapping[str, Any]) -> tuple[Condition, ...]:
    """{key: value | [values] | "*"} -> conditions; "*" matches any value."""
    out: list[Condition] = []
    for key, value in raw.items():
        if value == "*":
            out.append(Condition(key, None))
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        if not values:
            raise ValueError(f"{key}: needs at least one value")
        out.append(Condition(key, frozenset(_text(v) for v in values)))
    return tuple(out)


def _text(value: Any) -> str:
    """Attribute values compared as text (true/false as YAML and OTLP write booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
