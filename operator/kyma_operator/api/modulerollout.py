"""Models of ModuleRolloutPolicy and ModuleRollout (``operator.kyma-project.io/v1alpha1``, KCP only).

Why: a module version change reaches the fleet in gated waves (docs/rollouts.md). A reusable
``ModuleRolloutPolicy`` says how (waves, deadlines, soak, failure budget, revert); the operator
creates one ``ModuleRollout`` per version change holding a frozen copy of the policy, the operator's
intent (``spec.state``) and the recorded decision (``status``). The leader, every Kyma reconcile and
the CLI read the same objects, so the field names, defaults and the validation of a bad policy are
defined once here (the CRDs in ``manifests/crds`` say the same in OpenAPI + CEL).

Durations use OCM's rollout-strategy spelling (``10m``, ``1h30m``, ``20s``; ``None`` = no limit);
counts that may be a percentage use Kubernetes' int-or-string (``3`` or ``"5%"``).
"""

from __future__ import annotations

import hashlib
import math
import re
from enum import StrEnum
from typing import Annotated, ClassVar, Self

from pydantic import AfterValidator, ConfigDict, Field, StrictInt, StrictStr, model_validator

from kyma_operator.api import names
from kyma_operator.api.meta import Condition, KubeModel, KubeObject, LabelSelector, Time
from kyma_operator.api.names import ResourceInfo

NO_LIMIT = "None"
"""A ``progressDeadline`` that never expires (OCM's ``None``)."""

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_PERCENT = re.compile(r"^(\d{1,3})%$")
_UNIT_SECONDS = (3600, 60, 1)

MANDATORY_CHANNEL = "mandatory"
"""The pseudo-channel of a mandatory module's ``spec.mandatory.version`` (docs/rollouts.md §8.1)."""
ANY_MODULE = "*"
"""A policy's module name matching every module (meant for the mandatory channel)."""
MAX_WAVES = 16
MAX_NAME_LENGTH = 63


def parse_duration(value: str) -> float | None:
    """Seconds of ``1h30m``/``10m``/``20s`` (h, m, s in this order, each at most once); None for
    ``None``. Raises ValueError naming the value otherwise."""
    if value == NO_LIMIT:
        return None
    match = _DURATION.match(value)
    if not value or match is None:
        raise ValueError(f"duration {value!r}: expected e.g. 10m, 1h30m, 45s or None")
    return float(sum(int(part or 0) * unit for part, unit in zip(match.groups(), _UNIT_SECONDS, strict=True)))


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


def _check_finite_duration(value: str) -> str:
    if parse_duration(value) is None:
        raise ValueError(f"duration {value!r}: a finite duration is required here")
    return value


def _check_int_or_percent(value: int | str) -> int | str:
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value}: must not be negative")
        return value
    match = _PERCENT.match(value)
    if match is None or int(match.group(1)) > 100:
        raise ValueError(f"{value!r}: expected a count (3) or a percentage from 0% to 100% (5%)")
    return value


Duration = Annotated[str, AfterValidator(_check_duration)]
FiniteDuration = Annotated[str, AfterValidator(_check_finite_duration)]
IntOrPercent = Annotated[StrictInt | StrictStr, AfterValidator(_check_int_or_percent)]
"""A count (``3``) or a percentage of a total (``"5%"``), like Kubernetes' ``intstr``."""


def scaled(value: int | str, total: int, *, round_up: bool = False) -> int:
    """``value`` as a count of ``total``: a count as is, a percentage rounded down (OCM's
    ``maxFailures``) or up (``round_up``, for "at least" figures)."""
    if isinstance(value, int):
        return value
    _check_int_or_percent(value)
    percent = int(value[:-1])
    exact = percent * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


class OnFailure(StrEnum):
    HALT = "Halt"
    REVERT = "Revert"


class RevertScope(StrEnum):
    FAILED_WAVE = "FailedWave"
    ALL_UPGRADED = "AllUpgraded"


class Approval(StrEnum):
    AUTOMATIC = "Automatic"
    MANUAL = "Manual"


class RolloutState(StrEnum):
    """The operator's intent for a run (``spec.state``; the CLI writes it)."""

    RUNNING = "Running"
    PAUSED = "Paused"
    ABORTED = "Aborted"


class Phase(StrEnum):
    """Where a run is (``status.phase``; the leader writes it)."""

    PROGRESSING = "Progressing"
    SOAKING = "Soaking"
    AWAITING_APPROVAL = "AwaitingApproval"
    PAUSED = "Paused"
    HALTED = "Halted"
    REVERTING = "Reverting"
    REVERTED = "Reverted"
    COMPLETED = "Completed"
    ABORTED = "Aborted"
    SUPERSEDED = "Superseded"
    INVALID = "Invalid"


ACTIVE_PHASES = frozenset({Phase.PROGRESSING, Phase.SOAKING, Phase.AWAITING_APPROVAL, Phase.PAUSED})
"""Phases in which released Kymas move to ``toVersion`` (docs/rollouts.md §6.4)."""
STOPPED_PHASES = frozenset({Phase.HALTED, Phase.ABORTED})
REVERT_PHASES = frozenset({Phase.REVERTING, Phase.REVERTED})
TERMINAL_PHASES = frozenset({Phase.COMPLETED, Phase.ABORTED, Phase.SUPERSEDED, Phase.INVALID, Phase.REVERTED})
"""Phases a run never leaves (Halted is not terminal: ``resume --ignore-failed``)."""
IGNORED_PHASES = frozenset({Phase.COMPLETED, Phase.INVALID, Phase.SUPERSEDED})
"""A run in these phases holds nobody back: resolution is today's (docs/rollouts.md §6.4, §8.4)."""


class ModuleSelector(KubeModel):
    """Which module (``*``: any) on which channels (``mandatory`` for mandatory modules)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    channels: list[str] = Field(min_length=1)

    def matches(self, module: str, channel: str) -> bool:
        return self.name in (module, ANY_MODULE) and channel in self.channels


class Wave(KubeModel):
    """One wave: either the Kymas a ``selector`` matches, or the hash space up to ``upToPercent``
    (cumulative) of the Kymas no selector wave took."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    selector: LabelSelector | None = None
    up_to_percent: int | None = Field(default=None, ge=1, le=100)
    min_upgraded: IntOrPercent = 0
    progress_deadline: Duration = NO_LIMIT
    soak_time: FiniteDuration = "0s"
    max_failures: IntOrPercent = 0
    max_concurrency: IntOrPercent | None = None
    approval: Approval = Approval.AUTOMATIC
    spread: FiniteDuration | None = None
    """Jitter for the enqueue of the Kymas this wave releases (load smoothing only)."""

    @model_validator(mode="after")
    def _selector_or_percent(self) -> Self:
        if (self.selector is None) == (self.up_to_percent is None):
            raise ValueError(f"wave {self.name!r}: exactly one of selector or upToPercent must be set")
        if self.max_concurrency is not None and scaled(self.max_concurrency, 100) == 0:
            raise ValueError(f"wave {self.name!r}: maxConcurrency must allow at least one Kyma")
        return self

    def deadline_seconds(self) -> float | None:
        return parse_duration(self.progress_deadline)

    def soak_seconds(self) -> float:
        return parse_duration(self.soak_time) or 0.0


class ModuleRolloutPolicySpec(KubeModel):
    """How a version change of the selected modules/channels reaches the fleet."""

    modules: list[ModuleSelector] = Field(min_length=1)
    priority: int = 0
    wave_seed: str = ""
    hold_channel_switches: bool = False
    on_failure: OnFailure = OnFailure.HALT
    revert_scope: RevertScope | None = None
    waves: list[Wave] = Field(min_length=1, max_length=MAX_WAVES)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        seen: set[str] = set()
        for wave in self.waves:
            if wave.name in seen:
                raise ValueError(f"wave name {wave.name!r} is used twice")
            seen.add(wave.name)
        percent_seen = False
        last = 0
        for wave in self.waves:
            if wave.up_to_percent is None:
                if percent_seen:
                    raise ValueError(f"selector wave {wave.name!r} comes after a percentage wave")
                continue
            percent_seen = True
            if wave.up_to_percent <= last:
                raise ValueError(
                    f"wave {wave.name!r}: upToPercent {wave.up_to_percent} must be greater than the "
                    f"previous wave's {last}"
                )
            last = wave.up_to_percent
        if self.waves[-1].up_to_percent != 100:
            raise ValueError("the last wave must have upToPercent: 100 (every Kyma belongs to a wave)")
        if self.revert_scope is not None and self.on_failure is not OnFailure.REVERT:
            raise ValueError("revertScope needs onFailure: Revert")
        return self

    def selects(self, module: str, channel: str) -> bool:
        return any(selector.matches(module, channel) for selector in self.modules)

    def effective_revert_scope(self) -> RevertScope:
        return self.revert_scope or RevertScope.FAILED_WAVE

    def seed(self, module: str) -> str:
        """Salt of the wave hash: ``waveSeed``, else the module name."""
        return self.wave_seed or module


class ModuleRolloutPolicy(KubeObject):
    RESOURCE: ClassVar[ResourceInfo] = names.MODULE_ROLLOUT_POLICY

    spec: ModuleRolloutPolicySpec


class ModuleRolloutSpec(KubeModel):
    """One version change of one module on one channel. Immutable except ``state``,
    ``ignoredKymas`` and ``approvedWaves`` (CEL rules on the CRD)."""

    module: str = Field(min_length=1)
    channel: str = Field(min_length=1)
    from_version: str = Field(min_length=1)
    to_version: str = Field(min_length=1)
    policy_ref: str = ""
    policy: ModuleRolloutPolicySpec
    state: RolloutState = RolloutState.RUNNING
    ignored_kymas: list[str] = Field(default_factory=list)
    """Kymas exempt from the failure budget (``resume --ignore-failed`` copies the failed ones)."""
    approved_waves: list[str] = Field(default_factory=list)
    """Names of ``approval: Manual`` waves an operator approved (``resume`` on AwaitingApproval)."""


class Frontier(KubeModel):
    """Waves before ``wave`` are released; in ``wave`` the Kymas whose within-wave hash is below
    ``threshold`` (0: none, 1: all)."""

    wave: int = Field(default=0, ge=0)
    threshold: float = Field(default=0.0, ge=0.0, le=1.0)


class FrontierStep(KubeModel):
    threshold: float = Field(ge=0.0, le=1.0)
    at: Time


class WaveStatus(KubeModel):
    """Counts of one wave (informational, recomputed) and when it was released/soaked."""

    name: str
    members: int = 0
    released_at: Time | None = None
    soaked_at: Time | None = None
    upgraded: int = 0
    ready: int = 0
    failed: int = 0
    waiting: int = 0
    pending: int = 0


class Totals(KubeModel):
    members: int = 0
    upgraded: int = 0
    ready: int = 0
    failed: int = 0
    waiting: int = 0
    held: int = 0
    switched_in: int = 0


class RevertRecord(KubeModel):
    """The recorded exception to the no-downgrade rule: which waves go back, since when."""

    scope: RevertScope
    wave: int = Field(ge=0)
    started_at: Time


class ModuleRolloutStatus(KubeModel):
    phase: Phase = Phase.PROGRESSING
    observed_generation: int | None = None
    started_at: Time | None = None
    frontier: Frontier = Field(default_factory=Frontier)
    frontier_steps: list[FrontierStep] = Field(default_factory=list)
    """Threshold raises of the current wave (``maxConcurrency``), for each Kyma's upgrade start."""
    soak_started_at: Time | None = None
    halted_at: Time | None = None
    halt_reason: str | None = None
    completed_at: Time | None = None
    waves: list[WaveStatus] = Field(default_factory=list)
    totals: Totals = Field(default_factory=Totals)
    failed_kymas: list[str] = Field(default_factory=list)
    revert: RevertRecord | None = None
    message: str | None = None
    """Why the run is Invalid or Superseded."""
    conditions: list[Condition] = Field(default_factory=list)


class ModuleRollout(KubeObject):
    RESOURCE: ClassVar[ResourceInfo] = names.MODULE_ROLLOUT

    spec: ModuleRolloutSpec
    status: ModuleRolloutStatus = Field(default_factory=ModuleRolloutStatus)

    def phase(self) -> Phase:
        return self.status.phase


MAX_FAILED_KYMAS = 20
"""``status.failedKymas`` lists at most this many (the first ones)."""


def rollout_name(module: str, channel: str, to_version: str) -> str:
    """The deterministic run name ``<module>-<channel>-<toVersion>`` (lower-cased, characters a
    name may not hold replaced by ``-``); past 63 characters cut and suffixed with a hash of the
    full name, so two long names never collide."""
    raw = f"{module}-{channel}-{to_version}".lower()
    name = re.sub(r"[^a-z0-9.-]", "-", raw).strip("-.")
    if len(name) <= MAX_NAME_LENGTH:
        return name
    digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
    return f"{name[: MAX_NAME_LENGTH - 11].rstrip('-.')}-{digest}"
