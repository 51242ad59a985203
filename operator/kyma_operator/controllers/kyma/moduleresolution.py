"""Which ModuleTemplate a Kyma's module resolves to, and what its Manifest is called.

Why this exists: the module half of the Kyma reconcile needs one pure, unit-testable answer to
"module M on channel C of this Kyma -> which template, or which Error/Warning with what message",
following upstream ``pkg/templatelookup`` (MRM ``channels[channel]`` -> template ``<m>-<v>``, gating
by the template's beta/internal labels against the Kyma's, no downgrades), and the exact upstream
Manifest name (``CreateModuleName``). Look-ups are passed in as already-read objects so the reconcile
decides how to read them (informer cache or API) and this module stays free of I/O.

Fleet rollouts (docs/rollouts.md §6.4): given a rollout look-up, the channel's version passes
through ``rollouts.target`` (a Kyma outside the released waves keeps its version; a revert may go
below the installed version, the one recorded exception to the no-downgrade rule). Without a
look-up, or with no run for the module and channel, resolution is exactly what it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

from kyma_operator.api.kyma import Kyma, ModuleStatus
from kyma_operator.api.meta import Condition, ConditionStatus, State
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.modulerollout import ModuleRollout
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.controllers.kyma.catalog import InvalidCatalogObject
from kyma_operator.rollouts.target import Governed, Reason, RolloutLookup, Target, target

# validation.DNS1035LabelMaxLength upstream; names are cut to one less (upstream does so "for
# unknown reasons", and the names must match).
_DNS1035_LABEL_MAX = 63

NONE_CHANNEL = "none"
"""Upstream rejects the channel ``none`` (module Error; on the Kyma itself ``ErrInvalidKymaSpec``)."""

_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193
_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def fnv32(data: bytes) -> int:
    """FNV-1 32-bit hash (Go's ``hash/fnv.New32``: multiply, then xor)."""
    value = _FNV32_OFFSET
    for byte in data:
        value = (value * _FNV32_PRIME) & 0xFFFFFFFF
        value ^= byte
    return value


def manifest_name(kyma_name: str, ocm_component_name: str, module_name: str) -> str:
    """The Manifest name upstream gives module ``module_name`` of Kyma ``kyma_name``.

    ``<kyma>-<last '/' segment of the component name>-<fnv32(component name + module name)>``, cut to
    62 characters when it reaches 63, trailing ``-`` trimmed.
    """
    last = ocm_component_name.rsplit("/", 1)[-1]
    hashed = fnv32((ocm_component_name + module_name).encode())
    name = f"{kyma_name}-{last}-{hashed}"
    if len(name) >= _DNS1035_LABEL_MAX:
        name = name[: _DNS1035_LABEL_MAX - 1].rstrip("-")
    return name


def template_name(module_name: str, version: str) -> str:
    """ModuleTemplate name for one module version (upstream ``<moduleName>-<version>``)."""
    return f"{module_name}-{version}"


@dataclass(frozen=True, slots=True)
class Resolved:
    """Module resolved to one template: install or update its Manifest from it."""

    module: str
    channel: str
    version: str
    template: ModuleTemplate
    release_meta: ModuleReleaseMeta
    rollout: str | None = None
    """The ModuleRollout whose ``toVersion`` (or revert) this is: the Manifest's rollout label."""
    reverted_by: str | None = None
    """The ModuleRollout reverting this module to its ``fromVersion`` (Manifest annotation)."""

    @property
    def ocm_component_name(self) -> str:
        return self.release_meta.spec.ocm_component_name or self.template.ocm_component_name() or self.module


@dataclass(frozen=True, slots=True)
class Unresolved:
    """Module that cannot be installed or updated now; the status entry gets ``state`` and
    ``message``. ``keep_previous``: the previous status entry (version, Manifest reference) stays and
    only its state/message change (upstream keeps it for downgrades and a missing MRM)."""

    module: str
    channel: str
    state: State
    message: str
    keep_previous: bool = False
    template_not_allowed: bool = False


Resolution = Resolved | Unresolved
TemplateLookup = Callable[[str], ModuleTemplate | InvalidCatalogObject | None]


def restriction_allows(
    kyma: Kyma, release_meta: ModuleReleaseMeta, restricted_modules: Collection[str]
) -> bool:
    """Upstream's restricted modules: an MRM with a ``kymaSelector`` is for the Kymas its selector
    matches, and only if the operator lists the module as restricted (``--restricted-modules``);
    an MRM with a selector that is not listed is for nobody. A listed module whose MRM has no
    selector, or ``{}``, matches no Kyma (upstream ``restrictedmodule.RestrictedModuleMatch``);
    a module not listed and without a selector is for everyone."""
    selector = release_meta.spec.kyma_selector
    empty = selector is None or not (selector.match_labels or selector.match_expressions)
    if release_meta.spec.module_name in restricted_modules:
        return selector is not None and not empty and selector.matches(kyma.labels)
    return empty


def resolve(
    kyma: Kyma,
    module: str,
    channel: str,
    release_meta: ModuleReleaseMeta | InvalidCatalogObject | None,
    templates: TemplateLookup,
    previous: ModuleStatus | None,
    restricted_modules: Collection[str] = (),
    *,
    rollouts: RolloutLookup | None = None,
    installed_version: str | None = None,
) -> Resolution:
    """Resolve ``module`` on ``channel`` for ``kyma``.

    ``release_meta``: the MRM named after the module in the Kyma's namespace (None if missing);
    ``templates``: looks a template of that namespace up by name; ``previous``: the module's
    current ``status.modules`` entry, if any; ``rollouts``: the ModuleRollout in force for a module
    and channel (None: no rollouts); ``installed_version``: the version its Manifest holds, for the
    rollout's decision (default: the status entry's; the live Manifest is the better answer when a
    status write lagged).
    """

    def fail(state: State, message: str, *, keep: bool = False, blocked: bool = False) -> Unresolved:
        # Without a previous installation there is nothing to keep: upstream reports Error then (an
        # earlier entry that never resolved to a template, e.g. this same Error, is no installation).
        if keep and (previous is None or previous.template is None):
            state, keep = State.ERROR, False
        return Unresolved(module, channel, state, message, keep, blocked)

    if channel == NONE_CHANNEL:
        return fail(
            State.ERROR,
            f"module {module!r}: channel {NONE_CHANNEL!r} cannot be installed from; name a channel of "
            f"ModuleReleaseMeta {module!r}",
        )
    if release_meta is None:
        return fail(
            State.WARNING,
            f"module {module!r}: no ModuleReleaseMeta {module!r} in namespace {kyma.namespace!r}",
            keep=True,
        )
    if isinstance(release_meta, InvalidCatalogObject):
        return fail(State.ERROR, f"module {module!r}: {release_meta.message}")
    if release_meta.is_deleting():
        return fail(
            State.WARNING,
            f"module {module!r}: ModuleReleaseMeta {module!r} is being deleted",
            keep=True,
        )
    if release_meta.is_mandatory():
        return fail(
            State.WARNING,
            f"module {module!r} is mandatory and installed by the operator; it cannot be enabled",
        )
    if not restriction_allows(kyma, release_meta, restricted_modules):
        return fail(
            State.ERROR,
            f"module {module!r} is restricted: its ModuleReleaseMeta's kymaSelector does not select "
            "this Kyma"
            + (
                ""
                if module in restricted_modules
                else " (and the operator does not list it in --restricted-modules)"
            ),
            blocked=True,
        )
    version = release_meta.version_for(channel)
    if version is None:
        known = ", ".join(sorted(a.channel for a in release_meta.spec.channels)) or "none"
        return fail(
            State.ERROR,
            f"module {module!r}: channel {channel!r} not found in ModuleReleaseMeta {module!r} "
            f"(channels: {known})",
        )
    installed = previous.version if previous is not None else None
    decision: Target | None = None
    found = rollouts(module, channel) if rollouts is not None else None
    if found is not None:
        switching = previous is not None and bool(previous.channel) and previous.channel != channel
        current = installed_version or installed
        decision = target(found, version, kyma.labels, kyma.name, current, switching=switching)
        version = decision.version
    name = template_name(module, version)
    template = templates(name)
    if template is None and decision is not None and decision.reason in (Reason.HELD, Reason.AWAITING_RUN):
        assert found is not None
        return fail(
            State.WARNING,
            f"module {module!r} channel {channel!r}: held at version {version!r} by "
            f"{_holder(found, decision.reason)}, and ModuleTemplate {name!r} is not in namespace "
            f"{kyma.namespace!r}",
            keep=previous is not None and previous.template is not None,
        )
    if isinstance(template, InvalidCatalogObject):
        return fail(State.ERROR, f"module {module!r} channel {channel!r}: {template.message}")
    if template is None:
        return fail(
            State.ERROR,
            f"module {module!r} channel {channel!r}: ModuleTemplate {name!r} for version "
            f"{version!r} not found in namespace {kyma.namespace!r}",
        )
    if template.is_internal() and not kyma.is_internal():
        return fail(
            State.ERROR,
            f"module {module!r} channel {channel!r}: ModuleTemplate {name!r} is internal and this "
            "Kyma is not labelled internal",
            blocked=True,
        )
    if template.is_beta() and not kyma.is_beta():
        return fail(
            State.ERROR,
            f"module {module!r} channel {channel!r}: ModuleTemplate {name!r} is beta and this "
            "Kyma is not labelled beta",
            blocked=True,
        )
    if installed and is_downgrade(installed, version) and not (decision and decision.allows_downgrade):
        assert previous is not None
        if previous.channel and previous.channel != channel:
            message = CHANNEL_SKEW.format(old=previous.channel, new=channel, installed=installed)
        else:
            message = (
                f"module {module!r} channel {channel!r}: version {version!r} is older than the "
                f"installed {installed!r}; downgrades are not allowed"
            )
        return fail(State.WARNING, message, keep=True)
    if decision is not None:
        return Resolved(
            module, channel, version, template, release_meta, decision.rollout, decision.reverted_by
        )
    return Resolved(module, channel, version, template, release_meta)


def _holder(found: ModuleRollout | Governed, reason: Reason) -> str:
    """Who holds a module back, for its status message."""
    if isinstance(found, Governed):
        if reason is Reason.AWAITING_RUN or found.run is None:
            return f"rollout policy {found.policy!r} (the rollout of this version has not started)"
        found = found.run
    return f"rollout {found.name!r}"


CHANNEL_SKEW = (
    "module template update not allowed: ignore channel skew (from {old} to {new}), "
    "as a higher version ({installed}) of the module was previously installed"
)
"""Upstream's message (its e2e ``module_upgrade_channel_switch_test.go`` reads it) for a channel
switch that would downgrade the installed version."""


def is_downgrade(installed: str, target: str) -> bool:
    """True if ``target`` is older than ``installed`` on major.minor.patch (unparsable: False)."""
    a, b = _SEMVER.match(installed), _SEMVER.match(target)
    if a is None or b is None:
        return False
    return tuple(map(int, b.groups())) < tuple(map(int, a.groups()))


_STATE_RANK = {State.ERROR: 0, State.WARNING: 1, State.PROCESSING: 2}


def aggregate_state(module_states: list[State], conditions: list[Condition]) -> State:
    """Kyma state from its modules and conditions (upstream order): Error > Warning > Processing >
    any condition not True (Processing) > Ready."""
    ranked = [s for s in module_states if s in _STATE_RANK]
    if ranked:
        return min(ranked, key=_STATE_RANK.__getitem__)
    if any(c.status is not ConditionStatus.TRUE for c in conditions):
        return State.PROCESSING
    return State.READY
