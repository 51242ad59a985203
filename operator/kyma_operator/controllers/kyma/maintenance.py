"""Maintenance windows: an upgrade to a module version that requires downtime waits for the
runtime's next window.

Why this exists: a module team marks a version ``spec.requiresDowntime: true`` on its
ModuleTemplate; upgrading a runtime to it must then happen inside the maintenance window the
landscape's policy gives that runtime (upstream ``internal/maintenancewindows`` and the
``WithMaintenanceWindowDecorator`` of the template lookup). Until then the installed version keeps
being reconciled, and the module's ``status.modules`` entry says ``maintenance: true`` and when the
window comes. No wait when:

* the version does not require downtime, or the Kyma sets ``spec.skipMaintenanceWindows: true``;
* the module is not installed yet (first installation), or the installed version is the target.

The policy is read once at start from ``--maintenance-policy-file`` (upstream's fixed
``/etc/maintenance-policy/policy.json``); gauge ``lifecycle_mgr_maintenance_window_config_read_success``
says whether that worked. Without a readable policy an upgrade that needs a window cannot be placed:
the module goes Error ("failed to determine if maintenance window is active") and keeps its version,
as upstream. Time comes from the injected wall clock, so tests set it instead of waiting.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma, ModuleStatus
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.controllers.kyma.maintenancepolicy import (
    MaintenancePolicy,
    NoWindowFound,
    PolicyError,
    ResolvedWindow,
    parse_policy,
    runtime_of,
)
from kyma_operator.runtime.clock import utc_now

log = logging.getLogger(__name__)

DEFAULT_POLICY_FILE = Path("/etc/maintenance-policy/policy.json")
"""Upstream reads ``<policies directory>/<policy name>.json`` = ``/etc/maintenance-policy/policy.json``."""
DEFAULT_MIN_WINDOW_SIZE = 20 * 60.0
"""Upstream ``--min-maintenance-window-size`` default (20m): an ongoing window must still last this long."""

METRIC_CONFIG_READ_SUCCESS = "lifecycle_mgr_maintenance_window_config_read_success"

WAITING_MESSAGE = "waiting for next maintenance window to update module version"
"""Upstream ``ErrWaitingForNextMaintenanceWindow`` (our message adds the version and the window)."""
UNKNOWN_MESSAGE = "failed to determine if maintenance window is active"
"""Upstream ``ErrFailedToDetermineIfMaintenanceWindowIsActive``."""
NO_POLICY = "no maintenance window policy configured"


@dataclass(frozen=True)
class Waiting:
    """The upgrade waits for ``window`` (starting ``wake_after`` seconds from now)."""

    window: ResolvedWindow
    wake_after: float
    message: str


@dataclass(frozen=True)
class Unknown:
    """No window can be determined (no policy, or it gives none): the module is Error."""

    message: str


Hold = Waiting | Unknown


class MaintenanceWindows:
    """The policy (or why there is none), the minimum window size and the clock."""

    def __init__(
        self,
        policy: MaintenancePolicy | None,
        *,
        problem: str = NO_POLICY,
        min_window_size: float = DEFAULT_MIN_WINDOW_SIZE,
        now: Callable[[], datetime.datetime] = utc_now,
    ) -> None:
        self.policy = policy
        self.problem = problem
        self.min_window = datetime.timedelta(seconds=min_window_size)
        self.now = now

    @classmethod
    def load(
        cls,
        path: Path | None,
        *,
        min_window_size: float = DEFAULT_MIN_WINDOW_SIZE,
        now: Callable[[], datetime.datetime] = utc_now,
        registry: CollectorRegistry | None = None,
    ) -> MaintenanceWindows:
        """Read the policy file; the gauge says 1 when it was read and parsed, 0 otherwise (also when
        the file is missing, as upstream). A bad file is logged and leaves no policy."""
        policy: MaintenancePolicy | None = None
        problem = NO_POLICY
        if path is None:
            problem = f"{NO_POLICY} (--maintenance-policy-file unset)"
        else:
            try:
                policy = parse_policy(path.read_bytes())
            except FileNotFoundError:
                problem = f"{NO_POLICY}: maintenance window policy file {path} not found"
            except (OSError, PolicyError) as exc:
                problem = f"{NO_POLICY}: maintenance window policy file {path}: {exc}"
        if policy is None and (path is None or not path.exists()):
            # no policy configured is the common case: said once, not a warning on every start
            log.info("maintenance windows: %s", problem)
        elif policy is None:
            log.warning("maintenance windows: %s", problem)
        else:
            log.info("maintenance windows: policy read from %s (%d rules)", path, len(policy.rules))
        if registry is not None:
            gauge = Gauge(
                METRIC_CONFIG_READ_SUCCESS,
                "Indicates whether the maintenance window configuration was read successfully "
                "(1 for success, 0 for failure)",
                registry=registry,
            )
            gauge.set(1 if policy is not None else 0)
        return cls(policy, problem=problem, min_window_size=min_window_size, now=now)

    @staticmethod
    def required(kyma: Kyma, template: ModuleTemplate, installed: ModuleStatus | None) -> bool:
        """Upstream ``IsRequired``: a downtime version, no skip, and an installed other version."""
        if not template.spec.requires_downtime or kyma.spec.skip_maintenance_windows:
            return False
        if installed is None or installed.manifest is None or not installed.version:
            return False  # first installation: nothing to take down
        return installed.version != template.spec.version

    def active_window(self, kyma: Kyma) -> tuple[bool, ResolvedWindow]:
        """Upstream ``IsActive``: the window resolved for the Kyma's labels (ongoing windows that
        still last ``min_window_size`` count) and whether now is inside it."""
        if self.policy is None:
            raise NoWindowFound(self.problem)
        runtime = runtime_of(
            kyma.labels,
            global_account=names.GLOBAL_ACCOUNT_ID_LABEL,
            plan=names.PLAN_LABEL,
            region=names.REGION_LABEL,
            platform=names.PLATFORM_REGION_LABEL,
        )
        now = self.now()
        window = self.policy.resolve(runtime, now, ongoing=True, min_duration=self.min_window)
        return window.contains(now), window

    def hold(self, kyma: Kyma, template: ModuleTemplate, installed: ModuleStatus | None) -> Hold | None:
        """None: the version may be applied now. Else why and until when it waits."""
        if not self.required(kyma, template, installed):
            return None
        try:
            active, window = self.active_window(kyma)
        except NoWindowFound as exc:
            return Unknown(f"{UNKNOWN_MESSAGE}: {exc}")
        if active:
            return None
        wake = max(0.0, (window.begin - self.now()).total_seconds())
        current = installed.version if installed is not None else None
        message = (
            f"{WAITING_MESSAGE}: {current} -> {template.spec.version} requires downtime; next window "
            f"{_stamp(window.begin)} - {_stamp(window.end)}"
        )
        return Waiting(window, wake, message)


def _stamp(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
