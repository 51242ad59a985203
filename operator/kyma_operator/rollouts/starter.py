"""Starts a fleet rollout run when a module's channel moves to a newer version (docs/rollouts.md §4, §12).

Why here: a run is one ``ModuleRollout`` object with a deterministic name, created by the leader
only; everything else (the gates, the Kymas' target versions) follows from it. Creating it twice is
``AlreadyExists``, never a second run, so a new leader, a replayed event or the catch-up below may
all try again safely.

When a run starts: a ``ModuleRolloutPolicy`` selects ``(module, c)`` (the highest ``priority``
wins, ties in name order; ``c`` is a channel of the ModuleReleaseMeta or the pseudo-channel
``mandatory`` of ``mandatory.version``), the channel's version ``B`` is newer than the newest run's
``toVersion`` (or there is no run), and some Manifest of the module on ``c`` is installed below
``B`` (so an MRM created, a channel added, or a channel moved back starts nothing: nothing installed
to protect, or the no-downgrade rule speaks). The run goes from the newest run's ``toVersion``, else
from the version the channel was at before the update that moved it (upstream's
``DiffModuleReleaseMetaChannels``), else from the version most of those Manifests are at; it
freezes a copy of the policy's spec.

Why level-based: while a policy governs a channel, the Kyma reconciles keep every Kyma whose
installed version is below the channel's at its version until that version's run exists
(``target.Governed``), so the starter must create the run whatever the way the channel got there:
an update it saw, a move while no operator ran (§12: the informers' initial list enqueues every
release meta), a policy created after the move (a policy change enqueues the release metas). A run
that is still going when a newer one starts is marked ``Superseded`` by the rollout controller (it
sees the newer sibling), not here. Deleting a run while Kymas are still below the channel's version
starts it again: ``spec.state: Aborted`` is how a run is stopped.
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


def _version_key(version: str) -> tuple[int, int, int]:
    match = _SEMVER.match(version)
    if match is None:
        return (-1, -1, -1)
    major, minor, patch = (int(part) for part in match.groups())
    return (major, minor, patch)


def newer(candidate: str, than: str) -> bool:
    """``candidate`` is a newer version than ``than`` on major.minor.patch (unparsable: not newer),
    the order the Kyma reconcile's no-downgrade rule uses."""
    if _SEMVER.match(candidate) is None or _SEMVER.match(than) is None:
        return False
    return _version_key(candidate) > _version_key(than)


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


def most_common_oldest(counts: Counter[str]) -> str:
    """The most common version (ties: the oldest)."""
    top = max(counts.values())
    candidates = sorted((v for v, n in counts.items() if n == top), key=_version_key)
    return candidates[0]


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


def installed_below(
    manifests: Iterable[Mapping[str, Any]], module: str, channel: str, version: str
) -> Counter[str]:
    """How many of ``module``'s Manifests on ``channel`` are at each version older than ``version``."""
    counts: Counter[str] = Counter()
    for manifest in manifests:
        labels = _meta(manifest).get("labels") or {}
        if labels.get(names.MODULE_NAME_LABEL) != module:
            continue
        mandatory = labels.get(names.MANDATORY_MODULE_LABEL) == names.ENABLE_LABEL_VALUE
        if (channel == MANDATORY_CHANNEL) != mandatory:
            continue
        if not mandatory and labels.get(names.CHANNEL_LABEL) != channel:
            continue
        installed = str(_spec(manifest).get("version") or "")
        if installed and newer(version, installed):
            counts[installed] += 1
    return counts


LISTING = "runs or policies still listing"
FLEET_VIEW_LISTING = "fleet view still listing"


class RolloutStarter:
    """The reconciler of the leader's starter controller; its requests name ModuleReleaseMetas.

    ``note_change`` (called by ``sources.MrmToStarter`` from the release-meta informer) records the
    version each moved channel was at before, the run's ``fromVersion`` when no run precedes it.
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
        on_fleet_needed: Callable[[], None] | None = None,
    ) -> None:
        """``on_fleet_needed``: ``manifests`` is the leader's own fleet view, run on demand
        (``fleet_view.FleetView.demand``); called when a start must count what is installed."""
        self.client = client
        self.release_metas = release_metas
        self.policies = policies
        self.rollouts = rollouts
        self.manifests = manifests
        self.on_created = on_created
        self.on_fleet_needed = on_fleet_needed
        self._before: dict[Request, dict[str, str]] = {}
        self.created: list[str] = []
        """Names of the runs this starter created (tests, logs)."""

    def note_change(self, request: Request, changes: Mapping[str, str]) -> None:
        """Channels of ``request`` that moved, with the version each was at before."""
        before = self._before.setdefault(request, {})
        for channel, version in changes.items():
            before.setdefault(channel, version)  # the oldest "before" of a burst of edits

    def forget(self, request: Request) -> None:
        self._before.pop(request, None)

    async def reconcile(self, request: Request) -> Result:
        if not (self.rollouts.synced.is_set() and self.policies.synced.is_set()):
            return Result(requeue_after=1.0, reason=LISTING)
        obj = self.release_metas.get(request.namespace, request.name)
        if obj is None:
            self.forget(request)
            return Result()
        if _meta(obj).get("deletionTimestamp"):
            return Result()
        before = self._before.get(request, {})
        module = module_of_release_meta(obj)
        policies = self.policies.list(request.namespace)
        runs = self.rollouts.list(request.namespace)
        manifests: list[JSON] | None = None
        for channel, version in sorted(channel_versions(obj).items()):
            policy = matching_policy(policies, module, channel)
            if policy is None:
                continue
            latest = newest_run(runs_of(runs, module, channel))
            if latest is not None and not newer(version, str(_spec(latest).get("toVersion") or "")):
                continue  # that version's run (or a newer one) exists
            if manifests is None:
                if not self.manifests.synced.is_set():
                    # a leader's own fleet-wide Manifest view (shard-scoped caches) is stopped or
                    # still listing: "nothing installed below" would be a wrong answer, not a
                    # missing one; ask for it and decide once it has listed
                    if self.on_fleet_needed is not None:
                        self.on_fleet_needed()
                    return Result(requeue_after=1.0, reason=FLEET_VIEW_LISTING)
                manifests = self.manifests.list(request.namespace)
            below = installed_below(manifests, module, channel, version)
            if not below:
                continue  # nothing installed below the channel's version: nobody to protect
            if latest is not None:
                from_version = str(_spec(latest).get("toVersion") or "")
            elif before.get(channel) in below:
                from_version = before[channel]
            else:
                from_version = most_common_oldest(below)
            await self._start(request.namespace, module, channel, from_version, version, policy)
        self._before.pop(request, None)
        return Result()

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
