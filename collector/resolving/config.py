"""Settings of the document resolvers (YAML section `resolver`): where the text of documents that
traces name only by id is looked up (collector/resolving/, docs/FORMATS.md "Traces without
document text"). Nothing is on by default: without `sources` the pipeline has no resolving stage.

Each source is one store of one `kind`, chosen for a retrieval by its `when` (span or resource
attributes, as `conventions.mappings` entries match spans). Its secret (a password, a token) is
never written in the file: `password_env` names the variable holding it, `password_file` a file
(a mounted secret); a DSN or URL with a password in it is refused, and neither ever appears in a
log line or an error."""
from __future__ import annotations

import os
import re
from typing import Annotated, Any, ClassVar, Literal, Union
from urllib.parse import urlsplit

from ctxprec.collector.config_types import Count, Positive, Switch, setting
from ctxprec.collector.listener_security import read_token_file
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

KINDS = ("postgres", "redis", "chroma", "milvus", "http")

WhenValue = Union[str, int, float, bool, list[Union[str, int, float, bool]]]


class SourceConfig(BaseModel):
    """What every kind of source has: its name, when it applies, its secret and its limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="names the source in metrics, logs and errors",
                      pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    when: dict[str, WhenValue] = Field(
        default_factory=dict, description="span or resource attribute -> value, or list of values; all must match "
                                          "(empty: every retrieval); the first source that matches looks it up")
    password_env: str | None = Field(None, description="environment variable holding the secret (the PostgreSQL "
                                                       "or Redis password, the Milvus token, the bearer token of "
                                                       "Chroma and http)")
    password_file: str | None = Field(None, description="as password_env, read from this file (a mounted secret)")
    timeout_s: float = Field(2.0, gt=0, description="one lookup's time at most, seconds; past it its retrievals "
                                                     "are decided unresolved (reason timeout)")
    max_concurrency: int = Field(4, ge=1, description="lookups in flight to this source at most")
    max_batch: int = Field(1000, ge=1, description="ids in one lookup at most")
    breaker_threshold: int = Field(5, ge=1, description="failed lookups in a row that open the circuit breaker "
                                                        "(no lookups, reason error, until the cooldown passed)")
    breaker_cooldown_s: float = Field(30.0, gt=0, description="how long an open breaker waits before one lookup "
                                                              "tries again, seconds")

    @model_validator(mode="after")
    def _one_secret(self) -> "SourceConfig":
        if self.password_env and self.password_file:
            raise ValueError("[password_env / password_file] give one of them, not both")
        return self

    def secret(self) -> str | None:
        """The secret, read now (at start); ValueError naming the source when it is missing."""
        if self.password_env:
            value = os.environ.get(self.password_env)
            if not value:
                raise ValueError(f"resolver source {self.name}: the variable {self.password_env} is not set")
            return value
        if self.password_file:
            return read_token_file(self.password_file, f"resolver source {self.name}: password_file")
        return None

    ADDRESS: ClassVar[str] = "url"  # the field that says where the source is

    @property
    def address(self) -> str:
        """Where the source is (its DSN, URL or URI): what logs and errors never show."""
        return str(getattr(self, self.ADDRESS))


def _no_password(value: str, what: str) -> str:
    """A DSN or URL without a password in it (the secret goes in password_env or password_file).
    The message never repeats the value."""
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        raise ValueError(f"{what} is not a valid URL") from None
    if password or re.search(r"(^|\s)password\s*=", value, re.IGNORECASE):
        raise ValueError(f"{what} holds a password: put it in password_env or password_file instead")
    return value


def _http_url(value: str, what: str) -> str:
    _no_password(value, what)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an http:// or https:// URL with a host")
    return value


class _OverHttp(SourceConfig):
    """A source reached over HTTP (Chroma, Milvus's gRPC at an http:// URI, the app's endpoint)."""

    @field_validator("url", "uri", check_fields=False)
    @classmethod
    def _http(cls, value: str) -> str:
        return _http_url(value, cls.ADDRESS)


class PostgresSource(SourceConfig):
    ADDRESS = "dsn"
    kind: Literal["postgres"] = Field(description="PostgreSQL, with asyncpg (ctxprec[resolve-postgres])")
    dsn: str = Field(description="postgresql://USER@HOST:PORT/DATABASE, without the password", min_length=1)
    query: str = Field(description="one query returning (id, text) rows for the array of ids bound as $1, e.g. "
                                   "SELECT id, content FROM documents WHERE id = ANY($1)", min_length=1)

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, value: str) -> str:
        return _no_password(value, "dsn")

    @field_validator("query")
    @classmethod
    def _bound(cls, value: str) -> str:
        if "$1" not in value or re.search(r"\$[2-9]", value):
            raise ValueError("query must take the array of ids as its one parameter, $1")
        return value


class RedisSource(SourceConfig):
    kind: Literal["redis"] = Field(description="Redis, with redis-py's asyncio client (ctxprec[resolve-redis])")
    url: str = Field(description="redis://HOST:PORT/DB (rediss:// for TLS), without the password", min_length=1)
    key_template: str = Field(description="the key of a document, {id} standing for its id, e.g. doc:{id}",
                              min_length=1)
    field: str | None = Field(None, description="the hash field holding the text; unset: the key holds the text "
                                                "as a plain string")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        _no_password(value, "url")
        if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("url must be redis://, rediss:// or unix://")
        return value

    @field_validator("key_template")
    @classmethod
    def _template(cls, value: str) -> str:
        if "{id}" not in value:
            raise ValueError("key_template must contain {id}")
        return value


class ChromaSource(_OverHttp):
    kind: Literal["chroma"] = Field(description="a Chroma server, with chromadb's HTTP client "
                                                "(ctxprec[resolve-chroma])")
    url: str = Field(description="the Chroma server, http://HOST:PORT", min_length=1)
    collection: str = Field(description="the collection holding the documents", min_length=1)
    tenant: str = Field("default_tenant", description="the Chroma tenant")
    database: str = Field("default_database", description="the Chroma database")


class MilvusSource(_OverHttp):
    ADDRESS = "uri"
    kind: Literal["milvus"] = Field(description="Milvus or Milvus Lite, with pymilvus (ctxprec[resolve-milvus])")
    uri: str = Field(description="the Milvus server, http://HOST:19530", min_length=1)
    collection: str = Field(description="the collection holding the documents", min_length=1)
    text_field: str = Field(description="the field holding each document's text", min_length=1)
    db_name: str = Field("", description="the Milvus database (empty: the default one)")


class HttpSource(_OverHttp):
    kind: Literal["http"] = Field(description="the app's own endpoint (no extra needed)")
    url: str = Field(description="POSTed a JSON list of ids, it answers a JSON object of id -> text (an id "
                                 "left out, or null: missing)", min_length=1)
    max_response_mb: float = Field(8.0, gt=0, description="largest answer read, MB")


AnySource = Annotated[Union[PostgresSource, RedisSource, ChromaSource, MilvusSource, HttpSource],
                      Field(discriminator="kind")]
SOURCE_MODELS: tuple[type[SourceConfig], ...] = (PostgresSource, RedisSource, ChromaSource, MilvusSource, HttpSource)


class ResolverConfig(BaseModel):
    """The `resolver` section."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    sources: tuple[AnySource, ...] = setting((), "stores to look up the text of documents that traces name only by "
                                                 "id: a list of {name, kind, when, ...} (YAML only; see below)")
    required: Switch = setting(True, "a source that cannot be reached at start, or whose query or collection does "
                                     "not fit, stops the start; off: a WARNING, and its retrievals are decided "
                                     "unresolved until it answers", flag="--resolver-required")
    cache_mb: Positive = setting(64.0, "resolved texts kept for reuse at most, MB (least recently used first out)")
    cache_ttl_s: Positive = setting(600.0, "how long a resolved text is reused before it is looked up again, "
                                           "seconds")
    queue_size: Count = setting(1000, "retrievals waiting for a lookup at most; past it new ones are shed as "
                                      "`overloaded`")
    max_text_chars: Count = setting(20_000, "characters kept of each resolved text (as of a span attribute)")

    @field_validator("sources", mode="before")
    @classmethod
    def _a_list(cls, raw: Any) -> Any:
        if raw is None:
            return ()
        if isinstance(raw, (str, dict)) or not isinstance(raw, (list, tuple)):
            raise ValueError("must be a list of sources, each {name, kind, ...}")
        return raw

    @model_validator(mode="after")
    def _unique(self) -> "ResolverConfig":
        names = [s.name for s in self.sources]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"[sources] the name {repeated[0]!r} is used twice")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.sources)


def sources_reference() -> str:
    """The keys of a `resolver.sources` entry, per kind, for docs/CONFIG.md (generated from the
    models above, so the page lists what the code reads)."""
    common = SourceConfig.model_fields
    lines = ["- `resolver.sources`: a list; each entry has these keys (a retrieval is looked up in the first "
             "source whose `when` matches it):"]
    lines += [f"  - {_key(name, info)}" for name, info in common.items()]
    for model in SOURCE_MODELS:
        kind = model.model_fields["kind"].annotation.__args__[0]  # type: ignore[union-attr]
        lines.append(f"  - `kind: {kind}`: {model.model_fields['kind'].description}; its keys:")
        lines += [f"    - {_key(name, info)}" for name, info in model.model_fields.items()
                  if name not in common and name != "kind"]
    return "\n".join(lines) + "\n"


def _key(name: str, info: Any) -> str:
    shown = "required" if info.is_required() else f"default `{_shown(info.get_default(call_default_factory=True))}`"
    return f"`{name}` ({shown}): {info.description}"


def _shown(value: Any) -> str:
    if value == {}:
        return "{}"
    if value is None:
        return "none"
    if value == "":
        return '""'
    return f"{value:g}" if isinstance(value, float) else str(value)
