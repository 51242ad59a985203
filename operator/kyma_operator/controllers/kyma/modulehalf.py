"""The Kyma reconcile's module half as one collaborator: Manifests and ``status.modules`` from the
runtime Kyma's spec (``ModuleSync``), the runtime's module catalog (``RuntimeCatalogSync``), and how
their results fold into the Kyma's outcome.

Without ``--kyma-modules`` the reconciler gets ``NO_MODULE_HALF`` (a null object): no Manifests, no
``status.modules``, no catalog condition, and the rest of the flow is the same.

A Manifest a fleet rollout wrote back to its ``fromVersion`` (``ModuleSyncResult.reverted``) is
reported on the Kyma with the event ``ModuleRevertedByRollout`` (``reverted``), right after the
write that reverted it (docs/rollouts.md §8.5).
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import ValidationError

from kyma_operator.api.kyma import KYMA_CONDITION_REASON, Kyma, KymaConditionType, KymaSpec, ModuleStatus
from kyma_operator.api.manifest import Manifest
from kyma_operator.api.meta import Condition, State
from kyma_operator.controllers.kyma import status as st
from kyma_operator.controllers.kyma.insync import InSync
from kyma_operator.controllers.kyma.moduleresolution import NONE_CHANNEL, aggregate_state
from kyma_operator.controllers.kyma.modulesync import ModuleSync, ModuleSyncResult
from kyma_operator.controllers.kyma.report import Collector
from kyma_operator.controllers.kyma.runtimecatalog import RuntimeCatalogSync
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON


@dataclass(frozen=True)
class ModulesRun:
    spec: KymaSpec | None
    result: ModuleSyncResult | None
    invalid: Condition | None
    """Condition ``Modules`` False when the runtime Kyma's spec is invalid (then no result)."""


@dataclass(frozen=True)
class CatalogCheck:
    """The runtime catalog's condition ``ModuleCatalog``; ``error``: why it is False, if it is;
    ``in_sync``: for the next check of this runtime (``RuntimeCatalogSync.sync``)."""

    condition: Condition
    error: KubeError | None
    in_sync: InSync | None = None


class ModuleHalf:
    enabled = True

    def __init__(
        self,
        modules: ModuleSync,
        catalog: RuntimeCatalogSync,
        *,
        reverted: Callable[[Kyma, str, str], Awaitable[None]] | None = None,
    ) -> None:
        """``reverted(kyma, module, rollout)``: records that ``rollout`` took the module back."""
        self.modules = modules
        self.catalog = catalog
        self.reverted = reverted

    async def run(
        self, kyma: Kyma, spec_source: JSON, now: datetime.datetime, report: Collector
    ) -> ModulesRun | None:
        """The runtime Kyma's ``spec.modules``/``spec.channel`` (upstream: the SKR copy owns them)
        decide the Manifests. None without the module half."""
        try:
            spec = KymaSpec.model_validate(spec_source)
            if spec.channel == NONE_CHANNEL:
                raise ValueError(f"channel {NONE_CHANNEL!r} is not a channel a Kyma can follow")
        except (ValidationError, ValueError) as exc:
            detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            message = f"the runtime Kyma's spec is invalid: {detail}"
            bad = st.condition(KymaConditionType.MODULES.value, False, "InvalidSpec", message, now)
            return ModulesRun(None, None, bad)
        # skipMaintenanceWindows is the control plane's (upstream: the KCP Kyma's spec)
        spec = spec.model_copy(update={"skip_maintenance_windows": kyma.spec.skip_maintenance_windows})
        result = await self.modules.sync(kyma.model_copy(update={"spec": spec}))
        if self.reverted is not None:
            for module, rollout in result.reverted:
                await self.reverted(kyma, module, rollout)
        report.wake_after = result.wake_after
        report.applied.extend(result.applied)
        report.deleted.extend(result.deleted)
        report.mandatory = dict(result.mandatory)
        return ModulesRun(spec, result, None)

    def manifest_versions(self, kyma: Kyma) -> frozenset[tuple[str, str]]:
        return self.modules.manifest_versions(kyma)

    def manifests_of(self, kyma: Kyma) -> list[Manifest]:
        return [manifest for manifest, _ in self.modules.manifests_of(kyma)]

    def failed_entries(self, kyma: Kyma, message: str) -> tuple[ModuleStatus, ...] | None:
        """Every module entry Error (the runtime cannot be reached: nothing about them is known)."""
        return tuple(
            m.model_copy(update={"state": State.ERROR, "message": f"runtime unreachable: {message}"})
            for m in kyma.status.modules
        )

    async def check_catalog(
        self, kyma: Kyma, skr: KubeClient, now: datetime.datetime, report: Collector, in_sync: InSync | None
    ) -> CatalogCheck | None:
        """Bring the runtime's catalog in line; its condition ``ModuleCatalog`` (``with_catalog``
        folds it into the outcome), and on failure the error, for the caller to evict the runtime's
        client if it was a connection failure. None without the module half."""
        try:
            result = await self.catalog.sync(kyma, skr, in_sync)
        except KubeError as exc:
            message = f"syncing the module catalog into the runtime failed: {exc}"
            condition = st.condition(
                KymaConditionType.MODULE_CATALOG.value, False, st.REASON_CATALOG_SYNC_FAILED, message, now
            )
            report.requeue_reason = "module_catalog_sync"
            return CatalogCheck(condition, exc)
        report.catalog_writes = len(result.applied) + len(result.deleted)
        condition = st.condition(
            KymaConditionType.MODULE_CATALOG.value,
            True,
            KYMA_CONDITION_REASON,
            "module catalog is in sync",
            now,
        )
        return CatalogCheck(condition, None, result.in_sync)

    async def remove_catalog(self, skr: KubeClient) -> None:
        await self.catalog.remove(skr)


class _NoModuleHalf(ModuleHalf):
    enabled = False

    def __init__(self) -> None:
        pass

    async def run(
        self, kyma: Kyma, spec_source: JSON, now: datetime.datetime, report: Collector
    ) -> ModulesRun | None:
        return None

    def manifest_versions(self, kyma: Kyma) -> frozenset[tuple[str, str]]:
        return frozenset()

    def manifests_of(self, kyma: Kyma) -> list[Manifest]:
        return []

    def failed_entries(self, kyma: Kyma, message: str) -> tuple[ModuleStatus, ...] | None:
        return None

    async def check_catalog(
        self, kyma: Kyma, skr: KubeClient, now: datetime.datetime, report: Collector, in_sync: InSync | None
    ) -> CatalogCheck | None:
        return None

    async def remove_catalog(self, skr: KubeClient) -> None:
        return None


NO_MODULE_HALF: ModuleHalf = _NoModuleHalf()
"""The watcher part only: no Manifests, no ``status.modules``, no runtime catalog."""


def with_modules(outcome: st.Outcome, run: ModulesRun | None, now: datetime.datetime) -> st.Outcome:
    """``outcome`` with the modules' entries, condition ``Modules`` and the aggregated state
    (Error > Warning > Processing > a condition not True > Ready; the heartbeat is informational).
    ``run`` None (no module half): ``outcome`` as it is."""
    if run is None:
        return outcome
    if run.invalid is not None or run.result is None or run.spec is None:
        bad = run.invalid
        assert bad is not None
        return st.Outcome(State.ERROR, (*outcome.conditions, bad), operation(State.ERROR, bad.message))
    result = run.result
    failing = [m.name for m in result.modules if m.state not in (State.READY, State.UNMANAGED)]
    modules_condition = st.condition(
        KymaConditionType.MODULES.value,
        not failing,
        KYMA_CONDITION_REASON,
        "all modules are Ready" if not failing else f"modules not Ready: {', '.join(sorted(failing))}",
        now,
    )
    conditions = (*outcome.conditions, modules_condition)
    module_states = [m.state for m in result.modules]
    if outcome.state in (State.ERROR, State.WARNING, State.PROCESSING):
        module_states.append(outcome.state)
    gating = [c for c in conditions if c.type != st.WATCHER_HEARTBEAT]
    state = aggregate_state(module_states, gating)
    summary = "waiting for all modules to become ready" if failing else modules_condition.message
    if outcome.state in (State.ERROR, State.PROCESSING) and not failing and state is not State.READY:
        summary = outcome.operation
    return st.Outcome(
        state,
        conditions,
        operation(state, summary),
        tuple(result.modules),
        active_channel=run.spec.channel if state in (State.READY, State.WARNING) else None,
    )


def with_catalog(outcome: st.Outcome, check: CatalogCheck | None) -> st.Outcome:
    """``outcome`` with condition ``ModuleCatalog``; a failed catalog sync makes it Error."""
    if check is None:
        return outcome
    conditions = (*outcome.conditions, check.condition)
    if check.error is not None:
        return st.Outcome(
            State.ERROR, conditions, check.condition.message, outcome.modules, outcome.active_channel
        )
    return st.Outcome(outcome.state, conditions, outcome.operation, outcome.modules, outcome.active_channel)


def operation(state: State, message: str) -> str:
    if state is State.READY:
        return "kyma is ready"
    return message


def module_states(outcome: st.Outcome) -> list[tuple[str, State]] | None:
    if outcome.modules is None:
        return None
    return [(m.name, m.state) for m in outcome.modules]
