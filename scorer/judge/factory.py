"""make_chat_client: pick the transport for a judge model and wrap it in LimitedChatClient.

transport="auto" takes the direct pooled path for every endpoint that speaks the OpenAI
chat-completions wire (openai/, hosted_vllm/, and any provider litellm lists as OpenAI-compatible
when we know its base URL) because it is ~30x cheaper in CPU per call; litellm otherwise."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.judge.chat import ChatClient, RequestObserver
from ctxprec.scorer.judge.client import LimitedChatClient
from ctxprec.scorer.judge.transport_litellm import LiteLLMTransport, import_litellm
from ctxprec.scorer.judge.transport_openai import OpenAIDirectTransport

OPENAI_DEFAULT_BASE = "https://api.openai.com/v1"
# Prefixes known to be OpenAI-compatible without asking litellm (keeps litellm's multi-second
# import off the common paths).
_DIRECT_PREFIXES = ("openai", "hosted_vllm")
# litellm's providers for servers people run themselves: without a base URL they are not a
# provider's API either (litellm's default for them is a local address).
_SELF_HOSTED_PROVIDERS = frozenset({"ollama", "ollama_chat", "lm_studio", "llamafile", "hosted_vllm", "vllm",
                                    "xinference", "triton", "oobabooga", "openai_like", "custom_openai"})


@dataclass(frozen=True, slots=True)
class DirectRoute:
    provider: str
    model: str  # the name the server knows, provider prefix removed
    api_base: str | None
    api_key: str | None


def make_chat_client(config: JudgeConfig, observer: RequestObserver | None = None) -> ChatClient:
    if config.model == "local":
        raise ValueError("model: 'local' is the offline judge and has no chat client; build it with build_engine")
    if config.transport == "litellm":
        return _litellm_client(config, observer)
    route = resolve_direct_route(config, resolve_with_litellm=True)
    if route is None:
        if config.transport == "direct":
            raise ValueError(
                f"transport: 'direct' needs an OpenAI-compatible model (openai/..., hosted_vllm/..., or one "
                f"with api_base that litellm knows as OpenAI-compatible); {config.model!r} is not"
            )
        return _litellm_client(config, observer)
    if route.api_base is None:
        raise ValueError(
            f"api_base: model {config.model!r} needs an api_base (or {route.provider.upper()}_API_BASE in the environment)"
        )
    if route.api_key is None and route.api_base.rstrip("/") == OPENAI_DEFAULT_BASE:
        raise ValueError("api_key: OpenAI needs an API key; set OPENAI_API_KEY or the judge's api_key")
    transport = OpenAIDirectTransport(
        api_base=route.api_base, model=route.model, api_key=route.api_key, pool_size=max(config.concurrency, 1),
        max_response_bytes=int(config.max_response_mb * 1024 * 1024), connect_timeout_s=config.timeout_s,
    )
    return LimitedChatClient(transport, model=config.model, config=config, observer=observer,
                             hosted=is_hosted(route.provider, route.api_base))


def _litellm_client(config: JudgeConfig, observer: RequestObserver | None) -> LimitedChatClient:
    transport = LiteLLMTransport(model=config.model, api_base=config.api_base, api_key=config.api_key)
    provider = config.model.partition("/")[0] if "/" in config.model else "openai"
    return LimitedChatClient(transport, model=config.model, config=config, observer=observer,
                             hosted=is_hosted(provider, config.api_base or _env_base(provider)))


def is_hosted(provider: str, api_base: str | None) -> bool:
    """Whether the judge is a provider's API (its latency does not depend on our load, so the
    adaptive limit starts at the ceiling): a base URL over https, or none for a provider litellm
    knows that is not a server people run themselves. A model server on this machine or the
    network (http://) may answer one request at a time: the limit finds its pace from a few."""
    if api_base is not None:
        return api_base.strip().lower().startswith("https://")
    return provider not in _SELF_HOSTED_PROVIDERS


def resolve_direct_route(config: JudgeConfig, *, resolve_with_litellm: bool) -> DirectRoute | None:
    """Where the direct path would send this model, or None when it is not OpenAI-compatible."""
    provider, _, name = config.model.partition("/")
    if name and provider in _DIRECT_PREFIXES:
        api_base = config.api_base or _env_base(provider)
        if api_base is None and provider == "openai":
            api_base = OPENAI_DEFAULT_BASE
        return DirectRoute(provider, name, api_base, config.api_key or _env_key(provider))
    if not resolve_with_litellm:
        return None
    litellm = import_litellm()
    try:
        name, provider, dynamic_key, dynamic_base = litellm.get_llm_provider(
            model=config.model, api_base=config.api_base, api_key=config.api_key
        )
    except Exception:  # litellm does not know the provider: leave the model to the litellm path
        return None
    compatible = provider == "openai" or provider in getattr(litellm, "openai_compatible_providers", ())
    if not compatible:
        return None
    api_base = config.api_base or dynamic_base or _env_base(provider)
    if api_base is None and provider == "openai":
        api_base = OPENAI_DEFAULT_BASE
    if api_base is None:
        # Without a base URL we cannot go direct; litellm knows the provider's default.
        return None if config.transport == "auto" else DirectRoute(provider, name, None, None)
    api_key = config.api_key or _env_key(provider) or (dynamic_key if isinstance(dynamic_key, str) else None)
    return DirectRoute(provider, name, api_base, api_key)


def _env_key(provider: str) -> str | None:
    return os.environ.get(f"{provider.upper()}_API_KEY") or None


def _env_base(provider: str) -> str | None:
    upper = provider.upper()
    for name in (f"{upper}_API_BASE", f"{upper}_BASE_URL"):
        value = os.environ.get(name)
        if value:
            return value
    return None
