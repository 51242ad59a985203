"""What makes a Watcher usable, with messages a user can act on.

A Watcher feeds two things: the KCP VirtualService (needs a manager name and a valid serviceInfo)
and, in every runtime, one webhook of the shared ValidatingWebhookConfiguration (needs a concrete,
well-formed rule and label selector). An invalid Watcher must not reach either: the API server would
reject the whole webhook configuration, breaking event delivery for every *other* Watcher too. So
the Watcher controller reports these problems in the Watcher's status, and the agent installer
skips Watchers that have any.

The CRD already rejects most of this at admission (required fields, port range, minLength); the
checks are repeated here because objects may predate the schema or come from another version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kyma_operator.api.watcher import Watcher

REASON_READY = "Ready"
REASON_INVALID_SERVICE_INFO = "InvalidServiceInfo"
REASON_MANAGER_MISSING = "ManagerMissing"
REASON_INVALID_MANAGER = "InvalidManager"
REASON_INVALID_RESOURCE = "InvalidResourceToWatch"
REASON_INVALID_LABELS = "InvalidLabelsToWatch"
REASON_INVALID_SPEC = "InvalidSpec"
REASON_GATEWAY_NOT_FOUND = "GatewayNotFound"
REASON_GATEWAY_WITHOUT_HOSTS = "GatewayHostMissing"
REASON_VIRTUAL_SERVICE_ERROR = "VirtualServiceError"

# The manager is a URL path segment (/v2/<manager>/event) and the agent's /validate/<manager> path.
_MANAGER = re.compile(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_VERSION = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")


@dataclass(frozen=True)
class Problem:
    """Why a Watcher cannot be served: a condition reason (CamelCase) and a human message."""

    reason: str
    message: str


def _valid_label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return bool(_LABEL_NAME.fullmatch(name))


def validate_watcher(watcher: Watcher) -> list[Problem]:
    """Every problem of ``watcher``, most fundamental first; empty if it can be served."""
    problems: list[Problem] = []
    spec = watcher.spec
    info = spec.service_info
    info_errors = []
    if not info.name.strip():
        info_errors.append("name is empty")
    elif not _DNS_LABEL.fullmatch(info.name):
        info_errors.append(f"name {info.name!r} is not a valid Service name")
    if not info.namespace.strip():
        info_errors.append("namespace is empty")
    elif not _DNS_LABEL.fullmatch(info.namespace):
        info_errors.append(f"namespace {info.namespace!r} is not a valid namespace name")
    if not 1 <= info.port <= 65535:
        info_errors.append(f"port {info.port} is outside 1-65535")
    if info_errors:
        problems.append(Problem(REASON_INVALID_SERVICE_INFO, "spec.serviceInfo: " + "; ".join(info_errors)))

    manager = watcher.manager_name()
    if not manager:
        problems.append(
            Problem(
                REASON_MANAGER_MISSING,
                "no manager name: set spec.manager or the label operator.kyma-project.io/managed-by "
                "(it names the event path /v2/<manager>/event)",
            )
        )
    elif not _MANAGER.fullmatch(manager):
        problems.append(
            Problem(
                REASON_INVALID_MANAGER,
                f"manager name {manager!r} is not usable as a URL path segment "
                "(lower-case letters, digits, '-' and '.', at most 63 characters)",
            )
        )

    gvr = spec.resource_to_watch
    gvr_errors = []
    if gvr.group not in ("", "*") and not _DNS_SUBDOMAIN.fullmatch(gvr.group):
        gvr_errors.append(f"group {gvr.group!r} is not an API group (or '*')")
    if gvr.version != "*" and not _VERSION.fullmatch(gvr.version):
        gvr_errors.append(f"version {gvr.version!r} is not an API version (or '*')")
    if gvr.resource != "*" and not _RESOURCE.fullmatch(gvr.resource):
        gvr_errors.append(
            f"resource {gvr.resource!r} is not a lower-case plural resource name (e.g. 'configmaps') or '*'"
        )
    if gvr_errors:
        problems.append(Problem(REASON_INVALID_RESOURCE, "spec.resourceToWatch: " + "; ".join(gvr_errors)))

    label_errors = []
    for key, value in spec.labels_to_watch.items():
        if not _valid_label_key(key):
            label_errors.append(f"{key!r} is not a valid label key")
        elif not _LABEL_VALUE.fullmatch(value):
            label_errors.append(f"value {value!r} of {key!r} is not a valid label value")
    if label_errors:
        problems.append(Problem(REASON_INVALID_LABELS, "spec.labelsToWatch: " + "; ".join(label_errors)))
    return problems
