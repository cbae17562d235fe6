"""Discounted hours in litellm's cost map: some providers (DeepSeek) bill less at night and on
weekends, and the map says when in an `off_peak_pricing` block:

    {"input_cost_per_token": ..., "output_cost_per_token": ...,
     "hours_utc": "16:30-00:30" | [...],                 # every day
     "windows": [{"hours_utc": [...], "weekdays": [1, 2, 3, 4, 5]}, ...],
     "weekday_timezone": "Asia/Shanghai"}                # whose calendar names the weekday

A window is "HH:MM-HH:MM" in UTC, start included and end excluded; it may wrap past midnight,
and a start equal to its end is the whole day. Weekdays are ISO numbers (Monday 1) or names.
Malformed parts are ignored, so a map we do not fully understand prices at the standard rate
rather than failing a judge call."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# "mon", "tue", "tues", "thur", "monday", ...: any prefix of three letters or more.
_DAY_NAMES = {day[:n]: number for number, day in enumerate(_DAYS, 1) for n in range(3, len(day) + 1)}


@dataclass(frozen=True, slots=True)
class Window:
    start: time
    end: time

    def contains(self, moment: time) -> bool:
        if self.start < self.end:
            return self.start <= moment < self.end
        return moment >= self.start or moment < self.end  # wraps midnight, or the whole day


@dataclass(frozen=True, slots=True)
class Rule:
    windows: tuple[Window, ...]
    weekdays: frozenset[int] | None  # None: every day


@dataclass(frozen=True, slots=True)
class OffPeak:
    prices: tuple[float, float]
    rules: tuple[Rule, ...]
    calendar: tzinfo

    def open_at(self, when: datetime) -> bool:
        utc = when.astimezone(timezone.utc) if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)
        moment = utc.time().replace(tzinfo=None)
        weekday = utc.astimezone(self.calendar).isoweekday()
        return any((rule.weekdays is None or weekday in rule.weekdays) and any(w.contains(moment) for w in rule.windows)
                   for rule in self.rules)


def parse_off_peak(block: Any, standard: tuple[float, float]) -> OffPeak | None:
    """The block's discounted prices and hours; None when it has no usable hours. A rate the block
    leaves out stays at the standard rate."""
    if not isinstance(block, dict):
        return None
    rules: list[Rule] = []
    every_day = _windows(block.get("hours_utc"))
    if every_day:
        rules.append(Rule(every_day, None))
    for entry in block.get("windows") or ():
        if not isinstance(entry, dict):
            continue
        windows = _windows(entry.get("hours_utc"))
        days = entry.get("weekdays")
        weekdays = None if days is None else _weekdays(days)
        if windows and weekdays != frozenset():
            rules.append(Rule(windows, weekdays))
    if not rules:
        return None
    prices = (_rate(block.get("input_cost_per_token"), standard[0]), _rate(block.get("output_cost_per_token"), standard[1]))
    return OffPeak(prices, tuple(rules), _calendar(block.get("weekday_timezone")))


def _windows(value: Any) -> tuple[Window, ...]:
    texts = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
    found = []
    for text in texts:
        start, sep, end = text.partition("-")
        try:
            if sep:
                found.append(Window(time.fromisoformat(start.strip()), time.fromisoformat(end.strip())))
        except ValueError:
            continue
    return tuple(found)


def _weekdays(value: Any) -> frozenset[int]:
    if not isinstance(value, list):
        return frozenset()
    days = set()
    for day in value:
        if isinstance(day, int) and not isinstance(day, bool) and 1 <= day <= 7:
            days.add(day)
        elif isinstance(day, str) and day.strip().lower() in _DAY_NAMES:
            days.add(_DAY_NAMES[day.strip().lower()])
    return frozenset(days)


def _calendar(name: Any) -> tzinfo:
    if isinstance(name, str) and name.strip():
        try:
            return ZoneInfo(name.strip())
        except (ValueError, ZoneInfoNotFoundError):
            pass
    return timezone.utc


def _rate(value: Any, standard: float) -> float:
    if isinstance(value, bool) or value is None:
        return standard
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return standard
    return rate if rate >= 0 and rate != float("inf") else standard
