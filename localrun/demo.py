"""``--demo`` (``make demo``): the README's module walk-through, scripted and timed, plus an outage.

Why: the copy-paste session of ``make run RUN_ARGS=--module`` is what a person tries; this runs the
same steps against the same running system and measures each one from the write in the runtime to
the moment the result is visible through the API servers (the runtime's own Kyma status, objects in
the runtime, the Manifest in KCP): enable -> Ready, a module object deleted -> restored, channel
switch -> upgraded, then an outage of the path from the agents to the listener (``outage.py``)
with runtime edits made during it that must all land once it is over, and finally disable ->
removed. It ends with one table of the measured latencies and exits non-zero if any step failed.
Pauses between steps only pace the output for a person; every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS
from kyma_operator.controllers.kyma.status import WATCHER_HEARTBEAT
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CONFIGMAPS, DEPLOYMENTS
from localrun.kcp import KCP_NAMESPACE, SYNC_NAMESPACE
from localrun.module import (
    CONFIGMAP,
    DEPLOYMENT,
    MODULE,
    MODULE_NAMESPACE,
    RELEASES,
    enable_module,
    kyma_cli,
    module_manifest,
    module_status,
)
from localrun.outage import ListenerRelay
from localrun.output import Say
from localrun.system import LocalSystem

STEP_DEADLINE = 60.0


@dataclass
class Measure:
    """One measured result of a step: what became true, after how long (None: it did not)."""

    step: str
    what: str
    seconds: float | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.seconds is not None and not self.error


@dataclass
class Demo:
    system: LocalSystem
    relay: ListenerRelay
    outage: float
    say: Say
    pause: float = 1.0
    measures: list[Measure] = field(default_factory=list)

    @property
    def skr(self) -> KubeClient:
        return self.system.runtimes[0].client

    @property
    def kcp(self) -> KubeClient:
        return self.system.kcp

    @property
    def manifest(self) -> str:
        return module_manifest(self.system.runtimes[0].kyma)

    async def measure(
        self, step: str, what: str, since: float, check: Callable[[], Awaitable[bool]], deadline: float
    ) -> Measure:
        """Poll ``check`` until true; record the time since ``since`` (monotonic)."""
        result = Measure(step, what)
        until = time.monotonic() + deadline
        while True:
            try:
                done = await check()
            except NotFound:
                done = False
            if done:
                result.seconds = time.monotonic() - since
                self.say(f"demo: {step}: {what} after {result.seconds * 1000:.0f} ms")
                break
            if time.monotonic() > until:
                result.error = f"not within {deadline:.0f} s"
                self.say(f"demo: FAILED {step}: {what} {result.error}")
                break
            await asyncio.sleep(0.01)
        self.measures.append(result)
        return result

    # -- checks -----------------------------------------------------------------------------

    async def module_state(self, state: str, version: str | None = None) -> bool:
        kyma = await self.skr.get(KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, SYNC_NAMESPACE)
        entry = module_status(kyma)
        return entry is not None and entry.get("state") == state and version in (None, entry.get("version"))

    async def module_gone(self) -> bool:
        kyma = await self.skr.get(KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, SYNC_NAMESPACE)
        return module_status(kyma) is None

    async def manifest_exists(self, version: str | None = None) -> bool:
        obj = await self.kcp.get(MANIFESTS, self.manifest, KCP_NAMESPACE)
        return version in (None, (obj.get("spec") or {}).get("version"))

    async def manifest_gone(self) -> bool:
        try:
            await self.kcp.get(MANIFESTS, self.manifest, KCP_NAMESPACE)
        except NotFound:
            return True
        return False

    async def deployment(self, *, uid_not: str = "", image_tag: str = "", available: bool = False) -> bool:
        obj = await self.skr.get(DEPLOYMENTS, DEPLOYMENT, MODULE_NAMESPACE)
        if uid_not and obj["metadata"]["uid"] == uid_not:
            return False
        image = obj["spec"]["template"]["spec"]["containers"][0]["image"]
        if image_tag and not image.endswith(f":{image_tag}"):
            return False
        return not available or (obj.get("status") or {}).get("availableReplicas", 0) >= 1

    async def deployment_gone(self) -> bool:
        try:
            await self.skr.get(DEPLOYMENTS, DEPLOYMENT, MODULE_NAMESPACE)
        except NotFound:
            return True
        return False

    async def catalog_synced(self) -> bool:
        meta = await self.skr.get(MODULE_RELEASE_METAS, MODULE, SYNC_NAMESPACE)
        channels = {c.get("channel") for c in meta["spec"].get("channels") or []}
        return channels >= {ch for _, ch in RELEASES}

    async def kyma_read(self, channel: str, after: int) -> bool:
        """The KCP reconcile of the runtime's Kyma has read ``channel`` from the runtime copy."""
        runtime = self.system.runtimes[0]
        return any(
            r.request == runtime.request and f"channel={channel}" in r.remote_spec
            for r in self.system.reports[after:]
        )

    # -- the walk-through -------------------------------------------------------------------

    async def run(self) -> int:
        (regular, _), (fast, _) = RELEASES
        start = time.monotonic()
        await self.measure("catalog", "ModuleReleaseMeta in the runtime", start, self.catalog_synced, 30)
        env = {"KUBECONFIG": str(self.system.runtimes[0].server.kubeconfig_path)}
        listing = await kyma_cli("module", "list", env=_with_path(env))
        self.say("demo: kyma module list\n" + listing.rstrip())
        await asyncio.sleep(self.pause)

        step = f"enable {MODULE} (regular)"
        self.say(f"demo: {step}: spec.modules in the runtime's Kyma")
        since = time.monotonic()
        await enable_module(self.skr, "regular")
        await self.measure(step, "Manifest in KCP", since, self.manifest_exists, STEP_DEADLINE)
        await self.measure(
            step, f"module Ready ({regular}) in the runtime", since,
            lambda: self.module_state("Ready", regular), STEP_DEADLINE,
        )  # fmt: skip
        await asyncio.sleep(self.pause)

        step = "delete module Deployment"
        current = await self.skr.get(DEPLOYMENTS, DEPLOYMENT, MODULE_NAMESPACE)
        self.say(f"demo: {step}: {MODULE_NAMESPACE}/{DEPLOYMENT} in the runtime")
        since = time.monotonic()
        await self.skr.delete(DEPLOYMENTS, DEPLOYMENT, MODULE_NAMESPACE)
        uid = str(current["metadata"]["uid"])
        await self.measure(
            step, "Deployment restored", since, lambda: self.deployment(uid_not=uid), STEP_DEADLINE
        )
        await self.measure(
            step, "restored Deployment available", since,
            lambda: self.deployment(uid_not=uid, available=True), STEP_DEADLINE,
        )  # fmt: skip
        await asyncio.sleep(self.pause)

        step = "switch channel regular -> fast"
        self.say(f"demo: {step}: the module's channel in the runtime's Kyma")
        since = time.monotonic()
        await enable_module(self.skr, "fast")
        await self.measure(
            step, f"Manifest at {fast}", since, lambda: self.manifest_exists(fast), STEP_DEADLINE
        )
        await self.measure(
            step, f"Deployment rolled to {fast}", since,
            lambda: self.deployment(image_tag=fast, available=True), STEP_DEADLINE,
        )  # fmt: skip
        await self.measure(
            step, f"module Ready ({fast})", since, lambda: self.module_state("Ready", fast), STEP_DEADLINE
        )
        await asyncio.sleep(self.pause)

        await self.run_outage()
        await asyncio.sleep(self.pause)

        step = f"disable {MODULE}"
        self.say(f"demo: {step}: removed from the runtime's Kyma")
        since = time.monotonic()
        await self.skr.patch(KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, {"spec": {"modules": []}}, SYNC_NAMESPACE)
        await self.measure(step, "Manifest deleted in KCP", since, self.manifest_gone, STEP_DEADLINE)
        await self.measure(step, "module Deployment gone", since, self.deployment_gone, STEP_DEADLINE)
        await self.measure(step, "module gone from status", since, self.module_gone, STEP_DEADLINE)
        return exit_code(self.measures)

    async def settle(self, quiet_for: float = 2.0, deadline: float = 30.0) -> None:
        """Until no Kyma or Manifest reconcile ran for ``quiet_for`` seconds.

        An event schedules re-reads of its Kyma (up to 1 s later), and a module's status writes
        bring further events: an outage started before these end would have its edits picked up
        by them, not by the events the outage holds back.
        """
        until = time.monotonic() + deadline
        seen = (-1, -1)
        since = time.monotonic()
        while time.monotonic() < until:
            now = (len(self.system.reports), len(self.system.manifest_reports))
            if now != seen:
                seen, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_for:
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"reconciles did not settle within {deadline:.0f}s")

    async def agent_seen(self) -> bool:
        """The KCP Kyma's ``SKRWatcherHeartbeat`` condition is True: its reconciles have seen the
        agent's heartbeats (the agent's first heartbeat wakes a Kyma that saw it silent,
        ``HeartbeatSweep.beat``), so no health flip is left for the heartbeat sweep to reconcile."""
        runtime = self.system.runtimes[0].request
        kyma = await self.kcp.get(KYMAS, runtime.name, runtime.namespace)
        conditions = (kyma.get("status") or {}).get("conditions") or []
        return any(c.get("type") == WATCHER_HEARTBEAT and c.get("status") == "True" for c in conditions)

    async def run_outage(self) -> None:
        step = f"{self.outage:.0f} s outage"
        # a Kyma reconciled before the agent's first heartbeat says "NoHeartbeat" until that heartbeat
        # wakes it: such a reconcile, in the outage, would read the edits the outage holds back
        await self.measure(
            step, "agent seen alive before the cut", time.monotonic(), self.agent_seen, STEP_DEADLINE
        )
        await self.settle()
        self.say(f"demo: {step}: cutting the path from the agents to the listener (connections refused)")
        await self.relay.cut()
        cut_at = time.monotonic()
        mark = len(self.system.reports)
        deployment = await self.skr.get(DEPLOYMENTS, DEPLOYMENT, MODULE_NAMESPACE)
        uid = str(deployment["metadata"]["uid"])
        await self.skr.delete(DEPLOYMENTS, DEPLOYMENT, MODULE_NAMESPACE)
        await self.skr.delete(CONFIGMAPS, CONFIGMAP, MODULE_NAMESPACE)
        await self.skr.patch(
            KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, {"spec": {"channel": "fast"}}, SYNC_NAMESPACE
        )
        self.say(
            f"demo: {step}: edits during it: deleted Deployment and ConfigMap of {MODULE}, runtime Kyma "
            "spec.channel regular -> fast; waiting"
        )
        await asyncio.sleep(max(0.0, self.outage - (time.monotonic() - cut_at)))
        landed_early = [
            what
            for what, check in (
                ("Deployment", lambda: self.deployment(uid_not=uid)),
                ("ConfigMap", self.configmap_exists),
                ("Kyma channel", lambda: self.kyma_read("fast", mark)),
            )
            if await _safe(check)
        ]
        await self.relay.restore()
        back = time.monotonic()
        self.say(f"demo: {step}: path restored after {back - cut_at:.1f} s")
        held = Measure(step, "no edit landed while cut", back - cut_at)
        if landed_early:
            held.error = f"landed during the outage: {', '.join(landed_early)}"
            self.say(f"demo: FAILED {step}: {held.error}")
        self.measures.append(held)
        after = f"{step} (from restore)"
        await self.measure(
            after, "Deployment restored", back, lambda: self.deployment(uid_not=uid), STEP_DEADLINE
        )
        await self.measure(after, "ConfigMap restored", back, self.configmap_exists, STEP_DEADLINE)
        await self.measure(
            after, "KCP read channel=fast", back, lambda: self.kyma_read("fast", mark), STEP_DEADLINE
        )
        await self.measure(
            after, "restored Deployment available", back,
            lambda: self.deployment(uid_not=uid, available=True), STEP_DEADLINE,
        )  # fmt: skip

    async def configmap_exists(self) -> bool:
        await self.skr.get(CONFIGMAPS, CONFIGMAP, MODULE_NAMESPACE)
        return True

    def table(self) -> str:
        return summary_table(self.measures)


def exit_code(measures: list[Measure]) -> int:
    """0 when every measure succeeded (and there was one), else 1."""
    return 0 if measures and all(m.ok for m in measures) else 1


def summary_table(measures: list[Measure]) -> str:
    """One row per measure: step, what was awaited, latency, ok or FAILED with why; a count last."""
    rows = [("step", "result", "latency", "")]
    for m in measures:
        latency = f"{m.seconds * 1000:.0f} ms" if m.seconds is not None else "-"
        rows.append((m.step, m.what, latency, "ok" if m.ok else f"FAILED ({m.error})"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "  ".join(
            cell.rjust(w) if i == 2 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths[:3]))
    failed = sum(not m.ok for m in measures)
    lines.append(f"{len(measures) - failed} of {len(measures)} ok" + (f", {failed} FAILED" if failed else ""))
    return "\n".join(lines)


async def _safe(check: Callable[[], Awaitable[bool]]) -> bool:
    try:
        return await check()
    except NotFound:
        return False


def _with_path(env: dict[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, **env}
