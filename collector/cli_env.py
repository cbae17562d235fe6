"""`CTXPREC_<FLAG>` environment variables as defaults for command-line flags (SPEC.md section 8).

`apply_env_defaults(parser)` walks a parser's optional flags and, for each one whose variable is
set, converts the value with the flag's own type and makes it the default. Flags given on the
command line therefore still win. A value that does not convert is refused with a message that
names the variable, the flag and what is wrong."""
from __future__ import annotations

import argparse
import os
from typing import Any, Mapping

ENV_PREFIX = "CTXPREC_"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class EnvError(ValueError):
    """An environment variable holds a value its flag does not accept."""


def env_name(option: str) -> str:
    """`--judge-model` -> `CTXPREC_JUDGE_MODEL`."""
    return ENV_PREFIX + option.lstrip("-").replace("-", "_").upper()


def long_option(action: argparse.Action) -> str | None:
    longs = [o for o in action.option_strings if o.startswith("--")]
    return longs[0] if longs else None


def apply_env_defaults(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> list[str]:
    """Set defaults from `CTXPREC_*`; returns the names of the variables used. Raises EnvError."""
    env = os.environ if environ is None else environ
    used: list[str] = []
    for action in parser._actions:  # argparse has no public iterator over its actions
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        option = long_option(action)
        if option is None:
            continue  # positionals and short-only flags have no variable
        name = env_name(option)
        if name not in env:
            continue
        action.default = _convert(action, option, name, env[name])
        used.append(name)
    return used


def _convert(action: argparse.Action, option: str, name: str, raw: str) -> Any:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        text = raw.strip().lower()
        if text in _TRUE:
            value = True
        elif text in _FALSE:
            value = False
        else:
            raise EnvError(f"{name}={raw!r}: {option} is a switch; use one of 1/0, true/false, yes/no, on/off")
        return value if isinstance(action, argparse._StoreTrueAction) else not value
    if action.nargs == 0:
        raise EnvError(f"{name}: {option} takes no value and cannot be set from the environment")
    if action.nargs in ("*", "+") or isinstance(action.nargs, int):
        return [_convert_one(action, option, name, part) for part in raw.split()]
    return _convert_one(action, option, name, raw)


def _convert_one(action: argparse.Action, option: str, name: str, raw: str) -> Any:
    value: Any = raw
    if action.type is not None:
        try:
            value = action.type(raw)  # type: ignore[misc, operator]
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            detail = str(exc) or f"not a valid {getattr(action.type, '__name__', 'value')}"
            raise EnvError(f"{name}={raw!r}: invalid value for {option}: {detail}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise EnvError(f"{name}={raw!r}: {option} must be one of {choices}")
    return value
