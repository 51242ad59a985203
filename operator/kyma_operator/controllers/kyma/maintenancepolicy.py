"""Upstream's maintenance window policy file, parsed and resolved the way upstream reads it.

Why this exists: platform teams already keep one policy file per landscape for upstream's
lifecycle-manager (``/etc/maintenance-policy/policy.json``, a ConfigMap ``maintenance-config``
mounted there); a drop-in replacement must read the same file and pick the same window for the
same runtime. Upstream's resolver (``maintenancewindows/resolver`` of kyma-project/lifecycle-manager)
is followed here step by step:

* the document is ``{"rules": [{"match": {...}, "windows": [...]}, ...], "default": {...}}``; keys
  are matched case-insensitively and unknown keys are ignored (Go's ``encoding/json``), so
  ``globalAccountId`` and ``globalAccountID`` both work;
* a rule's ``match`` holds regular expressions for ``globalAccountID``, ``plan``, ``region`` and
  ``platformRegion``; a rule matches when ANY of its non-empty expressions finds a match anywhere in
  the runtime's non-empty value (unanchored search, Go's ``MatchString``);
* a window has ``begin``/``end``: RFC 3339 timestamps (absolute), or time-only values with a zone
  (``"13:00:00Z"``, ``"01:00:00+02:00"``) together with ``days`` (``Mon`` .. ``Sun``); a daily window
  whose end is not after its begin runs through midnight;
* resolving: the first matching rule's first available window, else (``fallbackDefault``) the
  default window; "available" is a window that begins after the time asked for, or, when ongoing
  windows count, one that still lasts at least ``min_duration``.

Stricter than upstream (bad input is a clear error, not a window that silently never comes): an
unknown day name and a value of the wrong type are rejected with the path to the field.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
"""``datetime.weekday()`` order; upstream compares the first three letters of Go's weekday name."""

MATCH_FIELDS = ("globalAccountID", "plan", "region", "platformRegion")
"""The runtime attributes a rule can match, in upstream's order."""

_DAY = datetime.timedelta(days=1)
_TIME_ONLY = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(Z|[+-]\d{2}:\d{2})$")


class PolicyError(ValueError):
    """The policy document is invalid; the message names the field."""


class NoWindowFound(LookupError):
    """Neither the matching rule nor the default provides a window (upstream ``ErrNoWindowFound``)."""


@dataclass(frozen=True)
class Runtime:
    """The runtime attributes the rules match (from the Kyma's labels)."""

    global_account_id: str = ""
    plan: str = ""
    region: str = ""
    platform_region: str = ""

    def value(self, field: str) -> str:
        return {
            "globalAccountID": self.global_account_id,
            "plan": self.plan,
            "region": self.region,
            "platformRegion": self.platform_region,
        }[field]


@dataclass(frozen=True)
class ResolvedWindow:
    begin: datetime.datetime
    end: datetime.datetime

    def contains(self, at: datetime.datetime) -> bool:
        """Strictly inside (upstream: ``now.After(begin) && now.Before(end)``)."""
        return self.begin < at < self.end


@dataclass(frozen=True)
class _WindowTime:
    absolute: datetime.datetime | None
    """RFC 3339 value; else a time of day in ``tz``."""
    clock: datetime.time
    tz: datetime.tzinfo


@dataclass(frozen=True)
class Window:
    days: tuple[str, ...]
    begin: _WindowTime | None
    end: _WindowTime | None

    def next_window(
        self, at: datetime.datetime, *, ongoing: bool, min_duration: datetime.timedelta
    ) -> ResolvedWindow | None:
        if self.begin is None or self.end is None:
            return None  # upstream: zero times in year 1, never available
        if not self.days:
            begin, end = _absolute(self.begin, at), _absolute(self.end, at)
            return _within(begin, end, at, ongoing, min_duration)
        day = at.astimezone(datetime.UTC)
        begin = _on_day(day, self.begin)
        end = _on_day(day, self.end)
        if end <= begin:
            end += _DAY
        for _ in range(8):  # a week ahead (upstream looks at 8 days)
            if DAY_NAMES[begin.weekday()] in self.days and (
                found := _within(begin, end, at, ongoing, min_duration)
            ):
                return found
            begin += _DAY
            end += _DAY
        return None


@dataclass(frozen=True)
class Rule:
    match: tuple[tuple[str, re.Pattern[str]], ...]
    windows: tuple[Window, ...]

    def matches(self, runtime: Runtime) -> bool:
        for field, pattern in self.match:
            value = runtime.value(field)
            if value and pattern.search(value):
                return True
        return False


@dataclass(frozen=True)
class MaintenancePolicy:
    rules: tuple[Rule, ...]
    default: Window

    def resolve(
        self,
        runtime: Runtime,
        at: datetime.datetime,
        *,
        ongoing: bool = False,
        min_duration: datetime.timedelta = datetime.timedelta(hours=1),
        first_match_only: bool = True,
        fallback_default: bool = True,
    ) -> ResolvedWindow:
        """The next window for ``runtime`` at ``at`` (upstream ``Resolve`` with its options)."""
        matched = False
        for rule in self.rules:
            matched = rule.matches(runtime)
            if not matched:
                continue
            for window in rule.windows:
                found = window.next_window(at, ongoing=ongoing, min_duration=min_duration)
                if found is not None:
                    return found
            if first_match_only:
                break
        if matched and not fallback_default:
            raise NoWindowFound("matched policies did not provide a window")
        found = self.default.next_window(at, ongoing=ongoing, min_duration=min_duration)
        if found is None:
            raise NoWindowFound("matches and defaults also failed to provide a window")
        return found


def parse_policy(raw: bytes | str) -> MaintenancePolicy:
    """The policy from its JSON text (``PolicyError`` naming the bad field)."""
    try:
        document = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PolicyError(f"not JSON: {exc}") from None
    if document is None:
        document = {}
    body = _object(document, "policy")
    rules_raw = _get(body, "rules")
    rules: list[Rule] = []
    for index, item in enumerate(_list(rules_raw, "rules")):
        where = f"rules[{index}]"
        rule = _object(item, where)
        match_raw = _object(_get(rule, "match") or {}, f"{where}.match")
        match: list[tuple[str, re.Pattern[str]]] = []
        for field in MATCH_FIELDS:
            expression = _get(match_raw, field)
            if expression is None or expression == "":
                continue
            if not isinstance(expression, str):
                raise PolicyError(f"{where}.match.{field}: expected a string, got {expression!r}")
            try:
                match.append((field, re.compile(expression)))
            except re.error as exc:
                raise PolicyError(f"{where}.match.{field}: invalid regular expression: {exc}") from None
        windows = tuple(
            _window(w, f"{where}.windows[{i}]")
            for i, w in enumerate(_list(_get(rule, "windows"), f"{where}.windows"))
        )
        rules.append(Rule(tuple(match), windows))
    default_raw = _get(body, "default")
    default = _window(default_raw if default_raw is not None else {}, "default")
    return MaintenancePolicy(tuple(rules), default)


def runtime_of(
    labels: Mapping[str, str], *, global_account: str, plan: str, region: str, platform: str
) -> Runtime:
    """The runtime attributes from a Kyma's labels (the label keys are passed in)."""
    return Runtime(
        global_account_id=labels.get(global_account, ""),
        plan=labels.get(plan, ""),
        region=labels.get(region, ""),
        platform_region=labels.get(platform, ""),
    )


# -- parsing helpers ---------------------------------------------------------------------------


def _get(obj: Mapping[str, Any], key: str) -> Any:
    """Go's case-insensitive key match (an exact match wins)."""
    if key in obj:
        return obj[key]
    lowered = key.lower()
    return next((v for k, v in obj.items() if k.lower() == lowered), None)


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise PolicyError(f"{where}: expected an object, got {value!r}")
    return value


def _list(value: Any, where: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PolicyError(f"{where}: expected a list, got {value!r}")
    return value


def _window(value: Any, where: str) -> Window:
    body = _object(value, where)
    days: list[str] = []
    for index, day in enumerate(_list(_get(body, "days"), f"{where}.days")):
        if day not in DAY_NAMES:
            raise PolicyError(f"{where}.days[{index}]: {day!r} is not one of {', '.join(DAY_NAMES)}")
        days.append(day)
    return Window(
        tuple(days), _time(_get(body, "begin"), f"{where}.begin"), _time(_get(body, "end"), f"{where}.end")
    )


def _time(value: Any, where: str) -> _WindowTime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise PolicyError(f"{where}: expected a string, got {value!r}")
    only = _TIME_ONLY.match(value)
    if only is not None:
        hour, minute, second, zone = only.groups()
        try:
            clock = datetime.time(int(hour), int(minute), int(second))
        except ValueError as exc:
            raise PolicyError(f"{where}: {value!r}: {exc}") from None
        return _WindowTime(None, clock, _zone(zone))
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None or "T" not in value.upper():
        raise PolicyError(
            f"{where}: unable to parse {value!r} as ISO8601 (RFC 3339, with a zone) or time-only-with-zone "
            "(HH:MM:SSZ, HH:MM:SS+hh:mm)"
        )
    return _WindowTime(parsed, parsed.timetz().replace(tzinfo=None), parsed.tzinfo)


def _zone(text: str) -> datetime.tzinfo:
    if text == "Z":
        return datetime.UTC
    sign = -1 if text[0] == "-" else 1
    hours, minutes = int(text[1:3]), int(text[4:6])
    return datetime.timezone(sign * datetime.timedelta(hours=hours, minutes=minutes))


def _absolute(value: _WindowTime, at: datetime.datetime) -> datetime.datetime:
    if value.absolute is not None:
        return value.absolute
    # a time-only value without days: upstream keeps Go's zero date (year 0), long past
    return datetime.datetime.combine(datetime.date(1, 1, 1), value.clock, value.tz)


def _on_day(day: datetime.datetime, value: _WindowTime) -> datetime.datetime:
    """``value``'s time of day on ``day``'s date (upstream: the date fields of the time asked for,
    the clock time and zone of the window)."""
    return datetime.datetime.combine(day.date(), value.clock, value.tz)


def _within(
    begin: datetime.datetime,
    end: datetime.datetime,
    at: datetime.datetime,
    ongoing: bool,
    min_duration: datetime.timedelta,
) -> ResolvedWindow | None:
    if not ongoing:
        return ResolvedWindow(begin, end) if at < begin else None
    return ResolvedWindow(begin, end) if at + min_duration < end else None
