"""The `ctxprec` command. The subcommand is read first and only its module is imported, so that
`ctxprec --help` (and every subcommand that does not need them) starts without loading litellm,
grpc or the OpenTelemetry SDK.

Each subcommand module provides `add_arguments(parser)` and `run(args) -> int`. Every long flag
also reads `CTXPREC_<FLAG>` from the environment; flags win. `serve` reads its variables in its
config loader (which names the variable in its errors); for the other commands the parser turns
them into flag defaults. A module whose command reads variables that are not flags names them in
`environment_variables()`; a `CTXPREC_*` variable no command reads is warned about at start.

Flags are never abbreviated (`--sample-rat` is not `--sample-rate`), and a usage error is one
line, with a did-you-mean for a misspelt flag, not the whole usage."""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NoReturn, Sequence

PROG = "ctxprec"
ENV_PREFIX = "CTXPREC_"


@dataclass(frozen=True)
class Subcommand:
    name: str
    module: str  # provides add_arguments(parser) and run(args) -> int
    summary: str


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("serve", "ctxprec.collector.serve", "run the sidecar: OTLP/Kafka in, scores and metrics out"),
    Subcommand("score", "ctxprec.scorer.batch", "score a JSONL file of RAG events, write score records"),
    Subcommand("report", "ctxprec.scorer.report", "render score records as one self-contained HTML report"),
    Subcommand("demo", "ctxprec.collector.demo", "a synthetic RAG app scored live, in the terminal"),
    Subcommand("stub-judge", "ctxprec.collector.stub_judge", "an OpenAI-compatible deterministic judge for dry runs"),
)
_BY_NAME = {s.name: s for s in SUBCOMMANDS}

_EPILOG = (
    "Every flag can also be set in the environment as CTXPREC_<FLAG> "
    "(e.g. CTXPREC_JUDGE_MODEL for --judge-model); flags win. "
    f"Run '{PROG} COMMAND --help' for a command's flags."
)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ctxprec")
    except Exception:  # noqa: BLE001 - not installed as a distribution (source checkout)
        return "unknown"


def _top_parser() -> argparse.ArgumentParser:
    commands = "\n".join(f"  {s.name:<11} {s.summary}" for s in SUBCOMMANDS)
    parser = CommandParser(
        prog=PROG,
        usage=f"{PROG} [--version] COMMAND [ARGS]",
        description="Score live RAG traffic with the context precision scorer.\n\ncommands:\n" + commands,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    return parser


class EnvError(ValueError):
    """An environment variable holds a value its flag does not accept."""


def env_name(option: str) -> str:
    """`--judge-model` -> `CTXPREC_JUDGE_MODEL`: the variable every command reads for a flag."""
    return ENV_PREFIX + option.lstrip("-").replace("-", "_").upper()


class CommandParser(argparse.ArgumentParser):
    """An argument parser that remembers its long flags as they are added, so that `CTXPREC_*`
    variables can become their defaults (and show in --help) through argparse's public API.
    Flags are never taken by a prefix, and a usage error is one line (`error`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.long_flags: list[tuple[str, argparse.Action]] = []  # before: the base adds --help
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """What is wrong in one line, with a did-you-mean for an unknown flag: `serve`'s whole
        usage is some 70 lines, and the mistake would scroll out of sight above it."""
        self.exit(2, f"{self.prog}: error: {self._explain(message)} (see '{self.prog} --help')\n")

    def _explain(self, message: str) -> str:
        head, _, words = message.partition(": ")
        if head != "unrecognized arguments":
            return message
        unknown = words.split()
        flag = next((w.partition("=")[0] for w in unknown if w.startswith("-")), None)
        if flag is None:
            return f"unexpected argument {unknown[0]!r}" if unknown else message
        known = [o for action in self._actions for o in action.option_strings]
        return f"unknown flag {flag}{did_you_mean(flag, known)}"

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and kwargs.get("help") != argparse.SUPPRESS:
            self.long_flags.append((longs[0], action))
        return action

    def apply_env_defaults(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """Flag defaults from `CTXPREC_*`; returns the variables used. Raises EnvError."""
        env = os.environ if environ is None else environ
        used: list[str] = []
        defaults: dict[str, Any] = {}
        for option, action in self.long_flags:
            if action.default == argparse.SUPPRESS:  # --help: not a setting
                continue
            name = env_name(option)
            if action.help is not None:
                action.help = f"{action.help}{_default_note(action)} [env {name}]"
            if name in env:
                defaults[action.dest] = _env_value(action, option, name, env[name])
                used.append(name)
        self.set_defaults(**defaults)
        return used


def _default_note(action: argparse.Action) -> str:
    """` (default X)` for a flag whose help does not already say its default."""
    if "default" in (action.help or "") or action.nargs == 0 or action.default is None or action.default is False:
        return ""
    return f" (default {action.default})"


def _env_value(action: argparse.Action, option: str, name: str, raw: str) -> Any:
    if action.nargs == 0:  # a switch (store_true / store_false)
        from ctxprec.collector.config_types import (
            parse_bool,  # pydantic: only when a variable is set
        )

        try:
            value = parse_bool(raw) if raw.strip() else False
        except ValueError:
            raise EnvError(f"{name}={raw!r}: {option} is a switch; use one of 1/0, true/false, yes/no, on/off") from None
        return value if action.const is not False else not value
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
        raise EnvError(f"{name}={raw!r}: {option} must be one of {', '.join(map(str, action.choices))}")
    return value


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`; did you mean X?` for the closest known spelling, or nothing."""
    guess = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {guess[0]}?" if guess else ""


def variables_of(parser: CommandParser, module: Any) -> set[str]:
    """The `CTXPREC_*` variables a command reads: one per long flag, and the module's others."""
    names = {env_name(option) for option, action in parser.long_flags if action.default != argparse.SUPPRESS}
    extra = getattr(module, "environment_variables", None)
    return names | set(extra() if callable(extra) else ())


def unknown_variables(environ: Mapping[str, str], known: set[str]) -> list[str]:
    return sorted(name for name in environ if name.startswith(ENV_PREFIX) and name not in known)


def _every_command_reads() -> set[str]:
    """The variables of every command: one set for the whole environment, so that a variable
    meant for another command (CTXPREC_CONCURRENCY beside `serve`) is not called unknown. Built
    only when the running command does not know a variable, since it imports every command."""
    names: set[str] = set()
    for sub in SUBCOMMANDS:
        try:
            module = importlib.import_module(sub.module)
        except ImportError:  # a command whose module cannot load has no variables to offer
            continue
        parser = _command_parser(sub)
        module.add_arguments(parser)
        names |= variables_of(parser, module)
    return names


def _warn_unknown_variables(name: str, parser: CommandParser, module: Any,
                            environ: Mapping[str, str] | None = None) -> None:
    env = os.environ if environ is None else environ
    if not unknown_variables(env, variables_of(parser, module)):
        return
    known = _every_command_reads()
    for variable in unknown_variables(env, known):
        sys.stderr.write(f"{PROG} {name}: warning: {variable} is set but no ctxprec command reads it (ignored)"
                         f"{did_you_mean(variable, known)}\n")


def _command_parser(sub: Subcommand) -> CommandParser:
    return CommandParser(
        prog=f"{PROG} {sub.name}",
        description=sub.summary[:1].upper() + sub.summary[1:] + ".",
        epilog=_EPILOG,
    )


def _fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return 2


def _split_command(argv: Sequence[str]) -> tuple[list[str], str | None, list[str]]:
    """Top-level options, the command name (first non-option word) and its arguments."""
    for i, word in enumerate(argv):
        if not word.startswith("-"):
            return list(argv[:i]), word, list(argv[i + 1 :])
    return list(argv), None, []


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    top_args, name, rest = _split_command(args_in)
    top = _top_parser()
    if name is None:
        top.parse_args(top_args)  # handles --help / --version (and exits)
        top.print_usage(sys.stderr)
        return _fail(f"a command is required: one of {', '.join(_BY_NAME)}")
    if top_args:
        try:
            top.parse_args(top_args)
        except SystemExit as exc:
            return int(exc.code or 0)
    sub = _BY_NAME.get(name)
    if sub is None:
        return _fail(f"unknown command {name!r}{did_you_mean(name, _BY_NAME)} (commands: {', '.join(_BY_NAME)})")

    module = _load(sub)
    if module is None:
        return 2
    parser = _command_parser(sub)
    module.add_arguments(parser)
    if not getattr(module, "READS_OWN_ENVIRONMENT", False):
        try:
            parser.apply_env_defaults()
        except EnvError as exc:
            return _fail(str(exc))
    try:
        args = parser.parse_args(rest)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed by argparse
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    _warn_unknown_variables(name, parser, module)
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG} {name}: interrupted\n")
        return 130


def _load(sub: Subcommand) -> Any | None:
    try:
        module = importlib.import_module(sub.module)
    except ModuleNotFoundError as exc:
        if exc.name and (sub.module == exc.name or sub.module.startswith(exc.name + ".")):
            _fail(f"'{sub.name}' is not available in this build ({sub.module} is not installed yet)")
        else:
            _fail(f"'{sub.name}' cannot start: it needs the Python module {exc.name!r}, which is not installed")
        return None
    missing = [fn for fn in ("add_arguments", "run") if not callable(getattr(module, fn, None))]
    if missing:
        _fail(f"'{sub.name}' is not available in this build ({sub.module} has no {' or '.join(missing)})")
        return None
    return module


if __name__ == "__main__":
    raise SystemExit(main())
