"""Reconciles one Watcher: finalizer, validation, its VirtualService, status; or its removal.

Level-based and cheap in the steady state: the Watcher, Gateways and VirtualServices are read from
informer caches, the VirtualService is written only when it differs from the rendered one, and the
status only when it changes (server-side apply on the status subresource). Drift is repaired by
events, not timers: the controller also watches Gateways (a host change re-renders every Watcher
of the namespace) and VirtualServices (an edit or delete enqueues the owning Watcher).

States as upstream: ``""`` -> ``Processing`` -> ``Ready`` | ``Error``; ``Deleting`` while the
finalizer ``operator.kyma-project.io/watcher`` is being released; ``Unmanaged`` is left alone. The
``VirtualService`` condition carries a reason that says what is wrong (upstream: always ``Ready``).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kyma_operator.api import names
from kyma_operator.api.istio import Gateway, VirtualService
from kyma_operator.api.meta import Condition, ConditionStatus, InvalidObjectError, State, set_condition
from kyma_operator.api.resources import WATCHERS, resource_for
from kyma_operator.api.watcher import (
    GATEWAY_SECRET_REASON_INVALID,
    GATEWAY_SECRET_REASON_USABLE,
    GATEWAY_SECRET_USABLE,
    VIRTUAL_SERVICE_CONFIGURED,
    VIRTUAL_SERVICE_NOT_CONFIGURED,
    Watcher,
    WatcherConditionType,
)
from kyma_operator.api.watcher_validation import (
    REASON_INVALID_SPEC,
    REASON_READY,
    REASON_VIRTUAL_SERVICE_ERROR,
    Problem,
    validate_watcher,
)
from kyma_operator.controllers.watcher import virtualservice as vs
from kyma_operator.controllers.watcher.events import EventRecorder
from kyma_operator.runtime.clock import utc_now
from kyma_operator.runtime.controller import TerminalError
from kyma_operator.runtime.errors import AlreadyExists, KubeError, NotFound
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request, Result

log = logging.getLogger(__name__)


class WatcherControllerConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str = Field(default=names.KCP_NAMESPACE, min_length=1)
    """Only Watchers (and Gateways, VirtualServices) of this namespace are served (upstream default)."""
    workers: int = Field(default=1, ge=1, le=16)
    safety_net_interval: float = Field(default=600.0, gt=0)
    """Requeue of Ready Watchers. Drift is repaired by events; this only covers missed events."""
    field_manager: str = Field(default=names.FIELD_MANAGER, min_length=1)
    istio_version: Literal["v1beta1", "v1"] = "v1beta1"
    """The networking.istio.io version read and written (upstream: v1beta1; our CRDs serve v1 too)."""


class WatcherReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        watchers: Informer,
        gateways: Informer,
        virtual_services: Informer,
        config: WatcherControllerConfig | None = None,
        events: EventRecorder | None = None,
        wall_clock: Callable[[], datetime.datetime] = utc_now,
    ) -> None:
        self.config = config or WatcherControllerConfig()
        self._client = client
        self._watchers = watchers
        self._gateways = gateways
        self._virtual_services = virtual_services
        self._events = events
        self._now = wall_clock
        self.virtual_services = resource_for(names.VIRTUAL_SERVICE, self.config.istio_version)
        self.vs_writes = 0
        self.status_writes = 0
        self.gateway_problem: Callable[[], str | None] | None = None
        """What is wrong with the gateway Secret (the identity store's last look), for the
        ``GatewaySecret`` condition; None: no such condition (no identity store wired)."""

    # -- entry -------------------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        if request.namespace != self.config.namespace:
            return Result()
        obj = self._watchers.get(request.namespace, request.name)
        if obj is None:
            return Result()
        try:
            watcher = Watcher.from_object(obj)
        except InvalidObjectError as exc:
            await self._fail_unparsable(obj, str(exc))
            raise TerminalError(str(exc)) from exc
        if watcher.is_deleting():
            return await self._delete(watcher)
        state = watcher.state()
        if state == State.UNMANAGED:
            return Result()
        if names.WATCHER_FINALIZER not in watcher.metadata.finalizers:
            watcher = await self._add_finalizer(watcher)
        if state in (None, State.EMPTY):
            watcher = await self._write_status(watcher, State.PROCESSING, None)
        return await self._process(watcher)

    # -- processing ----------------------------------------------------------------------------------

    async def _process(self, watcher: Watcher) -> Result:
        problems = validate_watcher(watcher)
        if problems:
            await self._fail(watcher, problems)
            return Result()  # only a spec change can fix it, and that enqueues the Watcher
        gateways = self._gateways_in(self.config.namespace)
        try:
            desired = vs.render(watcher, gateways, namespace=self.config.namespace)
        except vs.RenderError as exc:
            await self._fail(watcher, [exc.problem])
            return Result(requeue_after=self.config.safety_net_interval)  # Gateway events repair it
        try:
            await self._ensure_virtual_service(desired)
        except KubeError as exc:
            await self._fail(
                watcher, [Problem(REASON_VIRTUAL_SERVICE_ERROR, f"writing the VirtualService failed: {exc}")]
            )
            raise
        await self._write_status(watcher, State.READY, None)
        if self._events is not None:
            self._events.forget(watcher.to_object())
        return Result(requeue_after=self.config.safety_net_interval)

    def _gateways_in(self, namespace: str) -> list[Gateway]:
        gateways = []
        for obj in self._gateways.list(namespace):
            try:
                gateways.append(Gateway.from_object(obj))
            except InvalidObjectError as exc:
                log.warning("ignoring malformed Gateway: %s", exc)
        return gateways

    async def _ensure_virtual_service(self, desired: VirtualService) -> None:
        current = self._virtual_services.get(desired.namespace, desired.name)
        if not vs.needs_write(current, desired):
            return
        if current is None:
            try:
                await self._client.create(
                    self.virtual_services, desired.to_object(), field_manager=self.config.field_manager
                )
                self.vs_writes += 1
                return
            except AlreadyExists:
                current = await self._client.get(self.virtual_services, desired.name, desired.namespace)
                if not vs.needs_write(current, desired):
                    return
        await self._client.update(
            self.virtual_services,
            vs.merged_for_update(current, desired),
            field_manager=self.config.field_manager,
        )
        self.vs_writes += 1

    # -- deletion ------------------------------------------------------------------------------------

    async def _delete(self, watcher: Watcher) -> Result:
        if names.WATCHER_FINALIZER not in watcher.metadata.finalizers:
            return Result()
        if watcher.state() != State.DELETING:
            watcher = await self._write_status(watcher, State.DELETING, None)
        current = await self._client.get_or_none(self.virtual_services, watcher.name, watcher.namespace)
        if current is not None and _owned_by(current, watcher):
            try:
                await self._client.delete(self.virtual_services, watcher.name, watcher.namespace)
            except NotFound:
                pass
            except KubeError as exc:
                await self._fail(
                    watcher,
                    [Problem(REASON_VIRTUAL_SERVICE_ERROR, f"deleting the VirtualService failed: {exc}")],
                    state=State.ERROR,
                )
                raise
        finalizers = [f for f in watcher.metadata.finalizers if f != names.WATCHER_FINALIZER]
        with contextlib.suppress(NotFound):
            await self._client.patch(
                WATCHERS,
                watcher.name,
                {
                    "metadata": {
                        "finalizers": finalizers,
                        "resourceVersion": watcher.metadata.resource_version,
                    }
                },
                watcher.namespace,
            )
        if self._events is not None:
            self._events.forget(watcher.to_object())
        return Result()

    async def _add_finalizer(self, watcher: Watcher) -> Watcher:
        finalizers = [*watcher.metadata.finalizers, names.WATCHER_FINALIZER]
        updated = await self._client.patch(
            WATCHERS,
            watcher.name,
            {"metadata": {"finalizers": finalizers, "resourceVersion": watcher.metadata.resource_version}},
            watcher.namespace,
        )
        return Watcher.from_object(updated)

    # -- status --------------------------------------------------------------------------------------

    async def _fail(self, watcher: Watcher, problems: list[Problem], *, state: State = State.ERROR) -> None:
        first = problems[0]
        message = "; ".join(p.message for p in problems)
        log.warning("Watcher %s/%s: %s: %s", watcher.namespace, watcher.name, first.reason, message)
        await self._write_status(watcher, state, Problem(first.reason, message))
        if self._events is not None:
            await self._events.warning(watcher.to_object(), first.reason, message)

    async def _fail_unparsable(self, obj: JSON, message: str) -> None:
        meta = obj.get("metadata") or {}
        condition = {
            "type": WatcherConditionType.VIRTUAL_SERVICE.value,
            "status": ConditionStatus.FALSE.value,
            "reason": REASON_INVALID_SPEC,
            "message": f"{VIRTUAL_SERVICE_NOT_CONFIGURED}: {message}"[:32768],
            "lastTransitionTime": _stamp(self._now()),
        }
        body = {
            "apiVersion": WATCHERS.api_version,
            "kind": WATCHERS.kind,
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
            "status": {"state": State.ERROR.value, "conditions": [condition]},
        }
        try:
            await self._client.apply_status(WATCHERS, body, field_manager=self.config.field_manager)
            self.status_writes += 1
        except KubeError as exc:
            log.warning("could not write the status of an unparsable Watcher: %s", exc)
        if self._events is not None:
            await self._events.warning(obj, REASON_INVALID_SPEC, message)

    async def _write_status(self, watcher: Watcher, state: State, problem: Problem | None) -> Watcher:
        """Set state and the VirtualService condition; writes only if something changed."""
        current_status = watcher.status
        conditions = list(current_status.conditions) if current_status is not None else []
        if state in (State.PROCESSING, State.DELETING):
            condition = Condition(
                type=WatcherConditionType.VIRTUAL_SERVICE.value,
                status=ConditionStatus.UNKNOWN,
                reason=state.value,
                message=VIRTUAL_SERVICE_NOT_CONFIGURED,
                last_transition_time=self._now(),
            )
        elif problem is None:
            condition = Condition(
                type=WatcherConditionType.VIRTUAL_SERVICE.value,
                status=ConditionStatus.TRUE,
                reason=REASON_READY,
                message=VIRTUAL_SERVICE_CONFIGURED,
                last_transition_time=self._now(),
            )
        else:
            condition = Condition(
                type=WatcherConditionType.VIRTUAL_SERVICE.value,
                status=ConditionStatus.FALSE,
                reason=problem.reason,
                message=f"{VIRTUAL_SERVICE_NOT_CONFIGURED}: {problem.message}"[:32768],
                last_transition_time=self._now(),
            )
        condition.observed_generation = watcher.metadata.generation
        changed = set_condition(conditions, condition)
        gateway = self._gateway_condition(watcher)
        if gateway is not None:
            changed = set_condition(conditions, gateway) or changed
        generation = watcher.metadata.generation
        if (
            not changed
            and current_status is not None
            and current_status.state == state
            and current_status.observed_generation == generation
        ):
            return watcher
        status: JSON = {
            "state": state.value,
            "conditions": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in conditions],
        }
        if generation is not None:
            status["observedGeneration"] = generation
        body = {
            "apiVersion": WATCHERS.api_version,
            "kind": WATCHERS.kind,
            "metadata": {"name": watcher.name, "namespace": watcher.namespace},
            "status": status,
        }
        updated = await self._client.apply_status(WATCHERS, body, field_manager=self.config.field_manager)
        self.status_writes += 1
        return Watcher.from_object(updated)

    def _gateway_condition(self, watcher: Watcher) -> Condition | None:
        if self.gateway_problem is None:
            return None
        problem = self.gateway_problem()
        return Condition(
            type=WatcherConditionType.GATEWAY_SECRET.value,
            status=ConditionStatus.TRUE if problem is None else ConditionStatus.FALSE,
            reason=GATEWAY_SECRET_REASON_USABLE if problem is None else GATEWAY_SECRET_REASON_INVALID,
            message=GATEWAY_SECRET_USABLE if problem is None else problem[:32768],
            last_transition_time=self._now(),
            observed_generation=watcher.metadata.generation,
        )


def _owned_by(obj: JSON, watcher: Watcher) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == watcher.metadata.uid for ref in refs)


def _stamp(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
