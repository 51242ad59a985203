"""Starts a fleet rollout run when a module's channel moves to a newer version (docs/rollouts.md §4, §12).

Why here: a run is one ``ModuleRollout`` object with a deterministic name, created by the leader
only; everything else (the gates, the Kymas' target versions) follows from it. Creating it twice is
``AlreadyExists``, never a second run, so a new leader, a replayed event or the catch-up below may
all try again safely.

When a run starts (upstream ``DiffModuleReleaseMetaChannels``): a ModuleReleaseMeta update changed
``channels[c].version`` (or ``mandatory.version``, the pseudo-channel ``mandatory``) from ``A`` to
``B``, ``B`` is newer than ``A`` (a channel moved back is no rollout: the no-downgrade rule handles
it), and a ``ModuleRolloutPolicy`` selects ``(module, c)``: the highest ``priority`` wins, ties in
name order. The run freezes a copy of that policy's spec. An MRM created or a channel added starts
nothing (nothing installed to protect).

Missed changes (§12): the first time the starter looks at a release meta after it started leading
(the informer's initial list enqueues every one), it compares every channel with the newest run of
that module and channel: a channel at a version newer than that run's ``toVersion`` starts the
missing run from the run's ``toVersion``; with no run at all, from the version most of the
channel's Manifests are at (if older). A run that is still going when a newer one starts is marked
``Superseded`` by the rollout controller (it sees the newer sibling), not here.
"""

from __future__ import annotations

import copy
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.modulerollout import ANY_MODULE, MANDATORY_CHANNEL, rollout_name
from kyma_operator.api.resources import MODULE_ROLLOUTS
from kyma_operator.runtime.errors import AlreadyExists
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request, Result

log = logging.getLogger(__name__)

_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def newer(candidate: str, than: str) -> bool:
    """``candidate`` is a newer version than ``than`` on major.minor.patch (unparsable: not newer),
    the order the Kyma reconcile's no-downgrade rule uses."""
    a, b = _SEMVER.match(candidate), _SEMVER.match(than)
    if a is None or b is None:
        return False
    return tuple(map(int, a.groups())) > tuple(map(int, b.groups()))


def module_of_release_meta(obj: Mapping[str, Any]) -> str:
    return str(_spec(obj).get("moduleName") or _meta(obj).get("name") or "")


def channel_versions(release_meta: Mapping[str, Any]) -> dict[str, str]:
    """Channel -> version of a release meta; ``mandatory.version`` as channel ``mandatory``."""
    spec = _spec(release_meta)
    found: dict[str, str] = {}
    for entry in spec.get("channels") or []:
        if isinstance(entry, dict) and entry.get("channel") and entry.get("version"):
            found[str(entry["channel"])] = str(entry["version"])
    mandatory = spec.get("mandatory")
    if isinstance(mandatory, dict) and mandatory.get("version"):
        found[MANDATORY_CHANNEL] = str(mandatory["version"])
    return found


def channel_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, str]:
    """Channels present before and after whose version changed: channel -> the version before.
    Added and removed channels are no change (upstream)."""
    before, after = channel_versions(old), channel_versions(new)
    return {c: before[c] for c, v in after.items() if c in before and before[c] != v}


def policy_selects(policy: Mapping[str, Any], module: str, channel: str) -> bool:
    for entry in _spec(policy).get("modules") or []:
        if not isinstance(entry, dict):
            continue
        name = str(entry.get("name") or "")
        if name not in (module, ANY_MODULE):
            continue
        if channel in (entry.get("channels") or []):
            return True
    return False


def matching_policy(
    policies: Iterable[Mapping[str, Any]], module: str, channel: str
) -> Mapping[str, Any] | None:
    """The policy for ``(module, channel)``: highest ``spec.priority``, ties by name; None: no run."""
    selecting = [
        p for p in policies if policy_selects(p, module, channel) and not _meta(p).get("deletionTimestamp")
    ]
    if not selecting:
        return None

    def rank(policy: Mapping[str, Any]) -> tuple[int, str]:
        priority = _spec(policy).get("priority")
        return (-(priority if isinstance(priority, int) else 0), str(_meta(policy).get("name") or ""))

    return min(selecting, key=rank)


def runs_of(rollouts: Iterable[Mapping[str, Any]], module: str, channel: str) -> list[Mapping[str, Any]]:
    return [r for r in rollouts if _spec(r).get("module") == module and _spec(r).get("channel") == channel]


def newest_run(runs: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The run with the newest ``toVersion`` (ties: the later created)."""
    best: Mapping[str, Any] | None = None
    for run in runs:
        if best is None:
            best = run
            continue
        to, best_to = str(_spec(run).get("toVersion") or ""), str(_spec(best).get("toVersion") or "")
        if newer(to, best_to) or (
            to == best_to
            and str(_meta(run).get("creationTimestamp") or "")
            > str(_meta(best).get("creationTimestamp") or "")
        ):
            best = run
    return best


def installed_majority(manifests: Iterable[Mapping[str, Any]], module: str, channel: str) -> str | None:
    """The version most of ``module``'s Manifests on ``channel`` are at (ties: the oldest)."""
    counts: Counter[str] = Counter()
    for manifest in manifests:
        labels = _meta(manifest).get("labels") or {}
        if labels.get(names.MODULE_NAME_LABEL) != module:
            continue
        mandatory = labels.get(names.MANDATORY_MODULE_LABEL) == names.ENABLE_LABEL_VALUE
        if channel == MANDATORY_CHANNEL:
            if not mandatory:
                continue
        elif mandatory or labels.get(names.CHANNEL_LABEL) != channel:
            continue
        version = _spec(manifest).get("version")
        if version:
            counts[str(version)] += 1
    if not counts:
        return None
    top = max(counts.values())
    candidates = [v for v, n in counts.items() if n == top]
    oldest = candidates[0]
    for version in candidates[1:]:
        if newer(oldest, version):
            oldest = version
    return oldest


def run_body(
    namespace: str, module: str, channel: str, from_version: str, to_version: str, policy: Mapping[str, Any]
) -> JSON:
    """The ``ModuleRollout`` to create: spec immutable but for ``state``/``ignoredKymas``."""
    return {
        "apiVersion": names.MODULE_ROLLOUT.api_version,
        "kind": names.MODULE_ROLLOUT.kind,
        "metadata": {
            "name": rollout_name(module, channel, to_version),
            "namespace": namespace,
            "labels": {names.MODULE_NAME_LABEL: module, names.CHANNEL_LABEL: channel},
        },
        "spec": {
            "module": module,
            "channel": channel,
            "fromVersion": from_version,
            "toVersion": to_version,
            "policyRef": str(_meta(policy).get("name") or ""),
            "policy": copy.deepcopy(dict(_spec(policy))),
            "state": "Running",
        },
    }


class RolloutStarter:
    """The reconciler of the leader's starter controller; its requests name ModuleReleaseMetas.

    ``note_change`` (called by ``sources.MrmToStarter`` from the release-meta informer) records the
    channels an update changed with their previous versions; ``reconcile`` acts on them, or, the
    first time it sees a release meta, on every channel (the catch-up).
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        release_metas: Informer,
        policies: Informer,
        rollouts: Informer,
        manifests: Informer,
        on_created: Callable[[Request], None] | None = None,
    ) -> None:
        self.client = client
        self.release_metas = release_metas
        self.policies = policies
        self.rollouts = rollouts
        self.manifests = manifests
        self.on_created = on_created
        self._changes: dict[Request, dict[str, str]] = {}
        self._checked: set[Request] = set()
        self.created: list[str] = []
        """Names of the runs this starter created (tests, logs)."""

    def note_change(self, request: Request, changes: Mapping[str, str]) -> None:
        """Channels of ``request`` that moved, with the version each was at before."""
        pending = self._changes.setdefault(request, {})
        for channel, before in changes.items():
            pending.setdefault(channel, before)  # the oldest "before" of a burst of edits

    def forget(self, request: Request) -> None:
        self._checked.discard(request)
        self._changes.pop(request, None)

    async def reconcile(self, request: Request) -> Result:
        obj = self.release_metas.get(request.namespace, request.name)
        if obj is None:
            self.forget(request)
            return Result()
        changes = self._changes.pop(request, {})
        catch_up = request not in self._checked
        self._checked.add(request)
        if _meta(obj).get("deletionTimestamp"):
            return Result()
        module = module_of_release_meta(obj)
        policies = self.policies.list(request.namespace)
        runs = [r for r in self.rollouts.list(request.namespace)]
        for channel, version in sorted(channel_versions(obj).items()):
            policy = matching_policy(policies, module, channel)
            if policy is None:
                continue
            from_version = self._from_version(
                request.namespace, module, channel, version, changes, runs, catch_up
            )
            if from_version is None:
                continue
            await self._start(request.namespace, module, channel, from_version, version, policy)
        return Result()

    def _from_version(
        self,
        namespace: str,
        module: str,
        channel: str,
        version: str,
        changes: Mapping[str, str],
        runs: list[JSON],
        catch_up: bool,
    ) -> str | None:
        latest = newest_run(runs_of(runs, module, channel))
        if latest is not None:
            latest_to = str(_spec(latest).get("toVersion") or "")
            if not newer(version, latest_to):
                return None  # that run (or a newer one) exists
            if channel in changes or catch_up:
                return latest_to
            return None
        if channel in changes:
            before = changes[channel]
            return before if newer(version, before) else None
        if catch_up:
            installed = installed_majority(self.manifests.list(namespace), module, channel)
            if installed is not None and newer(version, installed):
                return installed
        return None

    async def _start(
        self,
        namespace: str,
        module: str,
        channel: str,
        from_version: str,
        to_version: str,
        policy: Mapping[str, Any],
    ) -> None:
        body = run_body(namespace, module, channel, from_version, to_version, policy)
        name = body["metadata"]["name"]
        try:
            await self.client.create(MODULE_ROLLOUTS, body)
        except AlreadyExists:
            return  # started before (an earlier leader, a replayed event): one run per change
        self.created.append(name)
        log.info(
            "rollout %s/%s started: module %s channel %s %s -> %s (policy %s)",
            namespace,
            name,
            module,
            channel,
            from_version,
            to_version,
            _meta(policy).get("name"),
        )
        if self.on_created is not None:
            self.on_created(Request(namespace, name))
