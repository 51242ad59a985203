"""What happens to Helm hooks when a chart is installed declaratively: pure, no I/O.

Why a policy of our own: Helm runs hooks as one-shot steps of *its* release actions (install,
upgrade, delete, rollback, test), ordered by weight, waited for and deleted by policy. A Manifest
has no such actions, only a desired state that is applied, kept and pruned. So:

* ``pre-install``, ``post-install``, ``pre-upgrade``, ``post-upgrade``: **supported**, as ordinary
  objects of the module: applied with everything else (CRDs and Namespaces first, no weights, no
  waiting), kept and drift-repaired, pruned when the chart stops rendering them, deleted on
  uninstall. ``helm.sh/hook-weight`` and ``helm.sh/hook-delete-policy`` are ignored (a Job hook
  therefore stays after it ran; a changed Job template fails to apply, as Jobs are immutable);
* ``test`` (and the old ``test-success``/``test-failure``): **not installed**: ``helm install``
  does not run chart tests either;
* ``pre-delete``, ``post-delete``, ``pre-rollback``, ``post-rollback``: **not run, not
  installed**: the Manifest's ``HelmHooks`` condition turns False (reason ``HooksSkipped``) naming
  each skipped object, because clean-up the chart expects on uninstall will not happen.

An object that is an install/upgrade hook *and* a delete/rollback hook is installed (as above),
and its delete/rollback part is reported as skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from kyma_operator.runtime.objects import JSON

HOOK_ANNOTATION: Final = "helm.sh/hook"
APPLIED: Final = frozenset({"pre-install", "post-install", "pre-upgrade", "post-upgrade"})
TESTS: Final = frozenset({"test", "test-success", "test-failure"})
SKIPPED: Final = frozenset({"pre-delete", "post-delete", "pre-rollback", "post-rollback"})
CONDITION_TYPE: Final = "HelmHooks"
REASON_SUPPORTED: Final = "HooksSupported"
REASON_SKIPPED: Final = "HooksSkipped"


def hook_events(obj: JSON) -> tuple[str, ...]:
    """The hook events of ``obj`` (``helm.sh/hook``, comma-separated), lower-case; ``()`` if none."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(HOOK_ANNOTATION)
    if not isinstance(value, str):
        return ()
    return tuple(part.strip().lower() for part in value.split(",") if part.strip())


def _describe(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
    return f"{obj.get('kind')} {where}"


@dataclass
class HookReport:
    """The objects to install, and what the hook policy did."""

    objects: list[JSON] = field(default_factory=list)
    applied_hooks: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """``"<object> (<events>)"`` of every hook that will not run."""
    unknown: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.skipped and not self.unknown

    def condition(self) -> tuple[bool, str, str]:
        """``(ok, reason, message)`` of the ``HelmHooks`` condition."""
        parts = []
        if self.skipped or self.unknown:
            gone = [*self.skipped, *self.unknown]
            more = f" and {len(gone) - 10} more" if len(gone) > 10 else ""
            parts.append(
                "not run (pre/post-delete and pre/post-rollback hooks are not supported): "
                f"{', '.join(gone[:10])}{more}"
            )
        if self.applied_hooks:
            parts.append(
                f"install/upgrade hooks applied as module objects: {', '.join(self.applied_hooks[:10])}"
            )
        if self.tests:
            parts.append(f"chart tests not installed: {', '.join(self.tests[:10])}")
        if not parts:
            parts.append("the chart has no hooks")
        return self.ok, REASON_SUPPORTED if self.ok else REASON_SKIPPED, "; ".join(parts)


def apply_hook_policy(objects: Iterable[JSON]) -> HookReport:
    """Split rendered objects by the policy of the module docstring (objects keep their order)."""
    report = HookReport()
    for obj in objects:
        events = hook_events(obj)
        if not events:
            report.objects.append(obj)
            continue
        what = f"{_describe(obj)} ({', '.join(events)})"
        applied = [e for e in events if e in APPLIED]
        skipped = [e for e in events if e in SKIPPED]
        unknown = [e for e in events if e not in APPLIED | SKIPPED | TESTS]
        if applied:
            report.objects.append(obj)
            report.applied_hooks.append(what)
            if skipped:
                report.skipped.append(f"{_describe(obj)} ({', '.join(skipped)})")
        elif skipped:
            report.skipped.append(what)
        elif unknown:
            report.unknown.append(what)
        else:
            report.tests.append(what)
    return report
