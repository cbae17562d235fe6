"""`ServeConfig`: what `ctxprec serve` runs with, from the YAML file (`--config`), `CTXPREC_*`
environment variables and flags; flags win over the environment, the environment over the file.

Each component declares its own settings beside it (receivers/config.py, exporters/config.py,
scoring/config.py, sampling/config.py, assembly/config.py, assembly/conventions.py,
metrics/config.py, metrics/drift.py, kafka/config.py, diagnostics/config.py,
cluster/config.py, resolving/config.py, judging/config.py, canary/config.py,
shadow/config.py): the YAML section, every key's default
and meaning, and its flag. This module only composes them; pydantic-settings layers the three
sources and validates. The environment names stay flat (`CTXPREC_<FLAG>`, e.g.
`CTXPREC_SAMPLE_RATE`), as users set them. A bad value is refused before anything starts, with a
message that names the key and where the value came from:

    config key sampling.rules[2].rate: must be between 0 and 1, got 1.5
    config key sampling.default_rate (from --sample-rate): must be between 0 and 1, got '2'
    config key sample_rate: unknown key; did you mean sampling.default_rate? (every key: ...)
"""
from __future__ import annotations

import argparse
import contextvars
import difflib
import os
import sys
from dataclasses import dataclass
from typing import Annotated, Any, Iterator, Mapping

import yaml
from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.cli import ENV_PREFIX, env_name
from ctxprec.collector.assembly.conventions import ConventionConfig
from ctxprec.collector.canary.config import CanaryConfig
from ctxprec.collector.cluster.config import ClusterConfig
from ctxprec.collector.config_types import METAVARS, Switch, choice, setting
from ctxprec.collector.diagnostics.config import DiagnosticsConfig
from ctxprec.collector.exporters.config import ExportConfig
from ctxprec.collector.judging.config import JudgingConfig
from ctxprec.collector.kafka.config import KafkaConfig
from ctxprec.collector.listener_limits import ListenersConfig
from ctxprec.collector.metrics.config import MetricsConfig
from ctxprec.collector.metrics.drift import DriftConfig
from ctxprec.collector.receivers.config import ReceiversConfig
from ctxprec.collector.resolving.config import ResolverConfig
from ctxprec.collector.sampling.config import SamplingConfig
from ctxprec.collector.shadow.config import ShadowConfig
from ctxprec.collector.scoring.config import ServeJudgeConfig, ScoringConfig
from pydantic import BaseModel, BeforeValidator, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
DOCS = "docs/CONFIG.md"
# Old spellings that still work, each with a note that says what replaced it.
DEPRECATED_FLAGS = {"--judge-redact-pii": ("judge", "redact_pii")}


class ConfigError(ValueError):
    """A setting that cannot work; the message names the key."""


class ServeConfig(BaseSettings):
    model_config = SettingsConfigDict(extra="forbid", validate_default=True)

    receivers: ReceiversConfig = Field(default_factory=ReceiversConfig, description="OTLP receivers")
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="the metrics endpoint")
    listeners: ListenersConfig = Field(default_factory=ListenersConfig,
                                      description="limits every listener keeps on its connections")
    export: ExportConfig = Field(default_factory=ExportConfig,
                                description="results written back over OTLP and into result sinks")
    judge: ServeJudgeConfig = Field(default_factory=ServeJudgeConfig, description="the judge")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="sampling and budgets")
    scoring: ScoringConfig = Field(default_factory=ScoringConfig, description="scoring workers")
    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig, description="trace assembly")
    conventions: ConventionConfig = Field(default_factory=ConventionConfig, description="reading retrievals from spans")
    drift: DriftConfig = Field(default_factory=DriftConfig, description="the drift detector")
    kafka: KafkaConfig = Field(default_factory=KafkaConfig, description="Kafka input and results")
    diagnostics: DiagnosticsConfig = Field(default_factory=DiagnosticsConfig,
                                           description="noisy documents, the right top-k, drift slices")
    cluster: ClusterConfig = Field(default_factory=ClusterConfig,
                                   description="cluster learning: every replica learns from all replicas' scores")
    resolver: ResolverConfig = Field(default_factory=ResolverConfig,
                                     description="document resolvers: the text of documents that traces name only "
                                                 "by id, looked up in the app's own store")
    judging: JudgingConfig = Field(default_factory=JudgingConfig,
                                   description="how far to trust the judge: human labels and the judge's agreement "
                                               "with them")
    canary: CanaryConfig = Field(default_factory=CanaryConfig,
                                 description="the judge canary: a set of samples re-judged on a schedule, to notice "
                                             "a changed judge")
    shadow: ShadowConfig = Field(default_factory=ShadowConfig,
                                 description="a shadow judge: a candidate judging a share of the retrievals beside "
                                             "the live judge")
    log_level: Annotated[str, BeforeValidator(choice(*LOG_LEVELS))] = setting(
        "info", "log level", flag="--log-level", choices=LOG_LEVELS)
    log_format: Annotated[str, BeforeValidator(choice(*LOG_FORMATS))] = setting(
        "text", "log lines as text, or one JSON object per line for log pipelines", flag="--log-format",
        choices=LOG_FORMATS)

    @model_validator(mode="after")
    def _budget_needs_a_price(self) -> "ServeConfig":
        # A budget over a judge that costs 0 per call would never trip: refuse it, never fail open.
        if self.sampling.daily_budget_usd:
            from ctxprec.scorer.judge.prices import unpriced_budget_error

            error = unpriced_budget_error(self.judge.model or "local", self.judge.price_per_mtok)
            if error:
                raise ValueError(f"[sampling.daily_budget_usd / judge.price_per_mtok] {error}")
        return self

    @property
    def write_back(self) -> str:
        """The write-back mode: as configured, else evaluator for Kafka input and span otherwise."""
        return self.export.write_back or ("evaluator" if self.kafka.enabled else "span")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        layers = _LAYERS.get()
        # Highest priority first: flags (passed as init values), then the environment, then the file.
        return (init_settings, _Layer(settings_cls, layers.env), _Layer(settings_cls, layers.file))


# -- the settings, as a flat list (for flags, environment variables and the docs) -----------------

@dataclass(frozen=True, slots=True)
class Setting:
    path: tuple[str, ...]  # ("sampling", "default_rate")
    field: FieldInfo
    annotation: Any

    @property
    def key(self) -> str:
        return ".".join(self.path)

    @property
    def flag(self) -> str | None:
        extra = self.field.json_schema_extra
        return extra.get("flag") if isinstance(extra, dict) else None  # type: ignore[return-value]

    @property
    def env(self) -> str | None:
        extra = self.field.json_schema_extra
        if isinstance(extra, dict) and extra.get("env"):
            return extra["env"]  # type: ignore[return-value]
        return env_name(self.flag) if self.flag else None

    @property
    def choices(self) -> list[str] | None:
        extra = self.field.json_schema_extra
        return extra.get("choices") if isinstance(extra, dict) else None  # type: ignore[return-value]

    @property
    def repeatable(self) -> bool:
        extra = self.field.json_schema_extra
        return bool(extra.get("repeatable")) if isinstance(extra, dict) else False

    @property
    def metavar(self) -> str | None:
        extra = self.field.json_schema_extra
        return extra.get("metavar") if isinstance(extra, dict) else None  # type: ignore[return-value]

    @property
    def switch(self) -> bool:
        return self.annotation is Switch

    @property
    def secret(self) -> bool:
        return self.field.repr is False

    @property
    def default(self) -> Any:
        return self.field.get_default(call_default_factory=True)

    @property
    def help(self) -> str:
        return self.field.description or ""


def settings(model: type[BaseModel] = ServeConfig, prefix: tuple[str, ...] = ()) -> Iterator[Setting]:
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):  # a section, or a block in one
            yield from settings(annotation, (*prefix, name))
        else:
            original = _annotated(model, name)
            yield Setting((*prefix, name), info, original)


def _annotated(model: type[BaseModel], name: str) -> Any:
    """The field's declared type with its Annotated metadata (pydantic strips it from FieldInfo)."""
    hints = getattr(model, "__annotations__", {})
    for klass in model.__mro__:
        if name in getattr(klass, "__annotations__", {}):
            hints = klass.__annotations__
            break
    hint = hints.get(name)
    if isinstance(hint, str):
        module = sys.modules[model.__module__]
        try:
            hint = eval(hint, vars(module))  # noqa: S307 - our own annotations, resolved once
        except Exception:  # noqa: BLE001 - only used to pick a metavar
            return None
    return hint


SETTINGS: tuple[Setting, ...] = tuple(settings())
_BY_FLAG = {s.flag: s for s in SETTINGS if s.flag}
_BY_KEY = {s.key: s for s in SETTINGS}


def flag_of(key: str) -> str:
    """The flag of setting `key` ("receivers.otlp_grpc" -> "--otlp-grpc"), or the key itself."""
    setting = _BY_KEY.get(key)
    return setting.flag if setting is not None and setting.flag else key


# -- the sources ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Inputs:
    env: dict[str, Any]
    file: dict[str, Any]


_LAYERS: contextvars.ContextVar[_Inputs] = contextvars.ContextVar("ctxprec_config_layers",
                                                                  default=_Inputs({}, {}))


class _Layer(PydanticBaseSettingsSource):
    """Values already read (from the environment or the file), as nested sections."""

    def __init__(self, settings_cls: type[BaseSettings], values: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._values = values

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self._values


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"sampling.default_rate": 0.5} -> {"sampling": {"default_rate": 0.5}}."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping of keys, got {type(data).__name__}")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"config key {key!r}: keys must be text")
    return data


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load(args: argparse.Namespace | None = None, *, environ: Mapping[str, str] | None = None,
         file_values: Mapping[str, Any] | None = None) -> ServeConfig:
    """File < environment < flags, validated. `file_values` (dotted keys) act as a file that the
    real file overrides (the demo's defaults). Raises ConfigError."""
    env = os.environ if environ is None else environ
    config_path = getattr(args, "config", None) if args is not None else None
    if config_path is None:
        config_path = env.get(ENV_PREFIX + "CONFIG") or None
    file_layer = _nest(file_values or {})
    if config_path:
        file_layer = _merge(file_layer, read_file(config_path))

    sources: dict[str, str] = {}  # dotted key -> where its value came from (flags and env only)
    env_flat: dict[str, Any] = {}
    for setting_ in SETTINGS:
        if setting_.env and setting_.env in env:
            env_flat[setting_.key] = env[setting_.env]
            sources[setting_.key] = f"env {setting_.env}"
    flag_flat: dict[str, Any] = {}
    for flag, (section, name) in DEPRECATED_FLAGS.items():
        old_env = env_name(flag)
        key = f"{section}.{name}"
        if old_env in env and key not in env_flat:
            _deprecated(f"{old_env} is deprecated; set {_BY_KEY[key].env} instead")
            env_flat[key] = env[old_env]
            sources[key] = f"env {old_env}"
        given = getattr(args, _dest(flag), None) if args is not None else None
        if given is not None:
            _deprecated(f"{flag} is deprecated; use {_BY_KEY[key].flag} (a switch) instead")
            flag_flat[key] = given
            sources[key] = flag
    if args is not None:
        for setting_ in SETTINGS:
            given = getattr(args, _dest(setting_.flag), None) if setting_.flag else None
            if given is not None:
                flag_flat[setting_.key] = given
                sources[setting_.key] = setting_.flag  # type: ignore[assignment]

    token = _LAYERS.set(_Inputs(_nest(env_flat), file_layer))
    try:
        return ServeConfig(**_nest(flag_flat))
    except ValidationError as exc:
        raise ConfigError(_describe(exc, sources)) from None
    finally:
        _LAYERS.reset(token)


def _deprecated(message: str) -> None:
    sys.stderr.write(f"ctxprec serve: {message}\n")


def _describe(exc: ValidationError, sources: Mapping[str, str]) -> str:
    """The first error, as `config key KEY (from SOURCE): what is wrong`."""
    error = exc.errors(include_url=False)[0]
    loc = [part for part in error["loc"] if part != "__root__"]
    key = _key(loc)
    message = str(error.get("msg", ""))
    if error["type"] == "value_error":
        message = str(error.get("ctx", {}).get("error", message))
    if message.startswith("["):  # a rule across keys: "[a / b] what is wrong"
        names, _, message = message[1:].partition("] ")
        section = f"{key}." if key else ""
        key = " / ".join(section + name.strip() for name in names.split(" / "))
    elif error["type"] == "extra_forbidden":
        suggestion = _closest(key)
        hint = f"did you mean {suggestion}? " if suggestion else ""
        message = f"unknown key; {hint}(every key is listed in {DOCS} and in `ctxprec serve --help`)"
    elif error["type"] in _TYPE_WORDS:
        message = f"{_TYPE_WORDS[error['type']]}, got {error.get('input')!r}"
    elif error["type"] == "missing":
        message = "required"
    else:
        message = message[:1].lower() + message[1:]
    where = sources.get(key)
    return f"config key {key}{f' (from {where})' if where else ''}: {message}"


_TYPE_WORDS = {"list_type": "must be a list", "dict_type": "must be a mapping", "model_type": "must be a mapping",
               "model_attributes_type": "must be a mapping", "string_type": "must be text",
               "tuple_type": "must be a list", "int_type": "must be an integer", "float_type": "must be a number",
               "bool_type": "must be true or false"}


def _closest(key: str) -> str | None:
    """The known key (or section) an unknown key most likely meant: within its section first
    (`sampling.defualt_rate`), else anywhere (`sample_rate` -> `sampling.default_rate`)."""
    sections = [name for name in ServeConfig.model_fields if "." not in name and name not in _BY_KEY]
    names: dict[str, str] = {}  # spelling -> full key
    for setting_ in SETTINGS:
        names.setdefault(setting_.key, setting_.key)
        names.setdefault(setting_.path[-1], setting_.key)
        names.setdefault(setting_.key.replace(".", "_"), setting_.key)
    for section in sections:
        names.setdefault(section, section)
    section, _, _ = key.partition(".")
    if "." in key and section in sections:
        inside = [k for k in _BY_KEY if k.startswith(section + ".")]
        guess = difflib.get_close_matches(key, inside, n=1, cutoff=0.6)
        if guess:
            return guess[0]
    guess = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    return names[guess[0]] if guess and names[guess[0]] != key else None


def _key(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# -- the command line -----------------------------------------------------------------------------

def _dest(flag: str | None) -> str:
    assert flag is not None
    return flag.lstrip("-").replace("-", "_")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, metavar="FILE",
                        help=f"YAML config file; flags win over {ENV_PREFIX}* variables, which win over the file "
                             f"(default: none) [env {ENV_PREFIX}CONFIG]")
    for setting_ in SETTINGS:
        if not setting_.flag:
            continue
        default = setting_.default
        shown = "none" if default is None or default == () else _shown(default)
        # argparse formats help with %: a literal one (a "95%" in a setting's words) is doubled.
        help_text = f"{setting_.help} (default: {shown}) [yaml {setting_.key}, env {setting_.env}]".replace("%", "%%")
        if setting_.switch:
            parser.add_argument(setting_.flag, dest=_dest(setting_.flag), nargs="?", const="true", default=None,
                                metavar="true|false", help=help_text)
        elif setting_.repeatable:
            # Each use adds an item; given at all, the flags replace the environment's and the
            # file's list (flags win, as for every other key).
            parser.add_argument(setting_.flag, dest=_dest(setting_.flag), action="append", default=None,
                                metavar=_metavar(setting_), help=help_text)
        else:
            parser.add_argument(setting_.flag, dest=_dest(setting_.flag), default=None, metavar=_metavar(setting_),
                                help=help_text)
    for flag, (section, name) in DEPRECATED_FLAGS.items():
        parser.add_argument(flag, dest=_dest(flag), default=None, metavar="true|false",
                            help=f"deprecated: use {_BY_KEY[f'{section}.{name}'].flag} (default: false) "
                                 f"[env {env_name(flag)}, also deprecated]")


def environment_variables() -> set[str]:
    """Every variable `load` reads: each setting's, CTXPREC_CONFIG and the deprecated spellings."""
    return ({s.env for s in SETTINGS if s.env} | {ENV_PREFIX + "CONFIG"}
            | {env_name(flag) for flag in DEPRECATED_FLAGS})


def _metavar(setting_: Setting) -> str:
    if setting_.metavar:
        return setting_.metavar
    if setting_.choices:
        return "|".join(str(c) for c in setting_.choices)
    return METAVARS.get(setting_.annotation, "VALUE")


def _shown(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int):
        return f"{value[0]}:{value[1]}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def describe_help() -> str:
    """The epilog of `ctxprec serve --help`."""
    return (f"Every setting is a YAML key (shown as [yaml ...]) and most are flags; every flag also reads "
            f"{ENV_PREFIX}<FLAG> from the environment. Flags win over the environment, the environment over "
            f"the file. All keys, with their defaults: {DOCS}.")


NO_JUDGE_WARNING = (
    "no judge configured: scoring with the offline local judge (lexical, deterministic). "
    "Set a real one with --judge-model (or CTXPREC_JUDGE_MODEL, or judge.model in the config file), "
    "e.g. --judge-model openai/gpt-4o-mini with OPENAI_API_KEY set, or --judge-api-base for an "
    "OpenAI-compatible server.")
