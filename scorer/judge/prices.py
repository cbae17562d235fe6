"""USD per token of a judge model, read from the cost map that litellm ships, without importing
litellm (its import costs seconds of CPU and ~150 MB; a run over the direct OpenAI-compatible
path never needs it otherwise).

litellm keeps the map as a JSON file inside its package. `importlib.util.find_spec` locates the
package without running it, and the file is read once. Names resolve as litellm's
`cost_per_token` resolves them for chat models:

- a name that is a key of the map (`gpt-4o-mini`, `azure/gpt-4o`, `bedrock/...`) is that entry,
  provided litellm can tell the provider of a bare name (it can for OpenAI, Anthropic, Bedrock,
  Vertex AI, Cohere and a few others; `deepseek-chat` alone it cannot);
- `provider/name` where `name` is a key whose provider is `provider` (`openai/gpt-4o-mini`,
  `anthropic/claude-...`) is that entry;
- anything else is unknown, and costs 0 (the stub's model, self-hosted ones) unless the user
  gives its price (JudgeConfig.price_per_mtok, `--judge-price-per-mtok INPUT,OUTPUT`), which also
  wins over the map. A daily budget needs a price: `unpriced_budget_error` says when it has none.

Entries with an `off_peak_pricing` block (DeepSeek's night and weekend rates) are priced at the
rate in force when the call is made, as litellm bills them (see off_peak.py).

tests/scorer/test_prices.py compares this with litellm.cost_per_token over every chat model of
the main providers, with and without the provider prefix."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ctxprec.scorer.judge.off_peak import OffPeak, parse_off_peak

COST_MAP_FILE = "model_prices_and_context_window_backup.json"
UNPRICED = (0.0, 0.0)

# Providers whose bare model names litellm maps to the provider by itself; any other provider's
# models need their prefix (litellm raises for "deepseek-chat", prices "deepseek/deepseek-chat").
_BARE_NAME_PROVIDERS = frozenset({
    "openai", "text-completion-openai", "anthropic", "bedrock", "bedrock_converse", "cohere", "cohere_chat",
    "volcengine", "nlp_cloud", "azure",
})


@dataclass(frozen=True, slots=True)
class PriceSchedule:
    """A model's prices, which may depend on the hour (off-peak rates)."""
    standard: tuple[float, float]
    off_peak: OffPeak | None = None

    def at(self, when: datetime | None = None) -> tuple[float, float]:
        """(USD per prompt token, USD per completion token) at `when` (default: now)."""
        if self.off_peak is not None and self.off_peak.open_at(when or datetime.now(timezone.utc)):
            return self.off_peak.prices
        return self.standard


_UNPRICED_SCHEDULE = PriceSchedule(UNPRICED)


@dataclass(slots=True)
class CostMap:
    entries: dict[str, Any]
    _cache: dict[str, PriceSchedule] = field(default_factory=dict)

    def schedule(self, model: str) -> PriceSchedule:
        """The model's price schedule; unpriced (0, 0) when the map does not price it."""
        found = self._cache.get(model)
        if found is None:
            found = self._cache[model] = self._resolve(model)
        return found

    def prices(self, model: str, when: datetime | None = None) -> tuple[float, float]:
        return self.schedule(model).at(when)

    def _resolve(self, model: str) -> PriceSchedule:
        entry = self.entries.get(model)
        if isinstance(entry, dict):
            if "/" in model or _bare_name_resolves(entry):
                return _schedule(entry)
            return _UNPRICED_SCHEDULE
        provider, _, name = model.partition("/")
        # A routing prefix is an identifier; map provider values such as "vertex_ai-language-models"
        # are labels, not prefixes litellm accepts in a model name.
        if name and provider.replace("_", "").isalnum():
            entry = self.entries.get(name)
            if isinstance(entry, dict) and entry.get("litellm_provider") == provider:
                return _schedule(entry)
        return _UNPRICED_SCHEDULE


def _bare_name_resolves(entry: dict[str, Any]) -> bool:
    provider = str(entry.get("litellm_provider", ""))
    return provider in _BARE_NAME_PROVIDERS or provider.startswith("vertex_ai")


def _schedule(entry: dict[str, Any]) -> PriceSchedule:
    standard = _per_token(entry)
    if standard == UNPRICED:
        return _UNPRICED_SCHEDULE
    return PriceSchedule(standard, parse_off_peak(entry.get("off_peak_pricing"), standard))


def _per_token(entry: dict[str, Any]) -> tuple[float, float]:
    try:
        prices = (float(entry.get("input_cost_per_token") or 0.0), float(entry.get("output_cost_per_token") or 0.0))
    except (TypeError, ValueError):
        return UNPRICED
    return prices if all(math.isfinite(p) and p >= 0 for p in prices) else UNPRICED


_LOCK = threading.Lock()
_LOADED: list[CostMap | None] = []  # empty until the first look-up; [None] when there is no map


def cost_map_path() -> str | None:
    """Where litellm's bundled cost map is, found without importing litellm."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), COST_MAP_FILE)
    return path if os.path.isfile(path) else None


def load_cost_map() -> CostMap | None:
    """The cost map, read once per process; None when litellm or its map is not installed."""
    with _LOCK:
        if not _LOADED:
            path = cost_map_path()
            entries: Any = None
            if path is not None:
                try:
                    with open(path, "rb") as f:
                        entries = json.load(f)
                except (OSError, ValueError):
                    entries = None
            _LOADED.append(CostMap(entries) if isinstance(entries, dict) else None)
        return _LOADED[0]


def model_schedule(model: str) -> PriceSchedule:
    """The model's prices by hour; (0, 0) at every hour for models the map does not know."""
    costs = load_cost_map()
    return costs.schedule(model) if costs is not None else _UNPRICED_SCHEDULE


def model_prices(model: str, when: datetime | None = None) -> tuple[float, float]:
    """USD per prompt token and per completion token at `when` (default: now); (0, 0) for models
    the map does not know."""
    return model_schedule(model).at(when)


def given_schedule(price_per_mtok: tuple[float, float]) -> PriceSchedule:
    """The schedule of a price given in USD per million prompt and completion tokens."""
    return PriceSchedule((price_per_mtok[0] / 1e6, price_per_mtok[1] / 1e6))


def judge_schedule(model: str, price_per_mtok: tuple[float, float] | None = None) -> PriceSchedule:
    """The judge's prices: the one given, else the cost map's."""
    return given_schedule(price_per_mtok) if price_per_mtok is not None else model_schedule(model)


def unpriced_budget_error(model: str, price_per_mtok: tuple[float, float] | None) -> str | None:
    """Why a USD budget cannot work for this judge, or None when it can: a model the cost map does
    not price would cost 0 and the budget would never trip. The local judge is free: no error."""
    if price_per_mtok is not None or model.strip().lower() == "local":
        return None
    schedule = model_schedule(model)
    if schedule.standard != UNPRICED or schedule.off_peak is not None:
        return None
    return (f"the judge model {model!r} has no price in litellm's cost map, so its calls would cost 0 and the "
            f"budget would never trip; give its price with --judge-price-per-mtok INPUT,OUTPUT (USD per million "
            f"prompt and completion tokens, e.g. 0,0 for a free local server), or drop the budget")
