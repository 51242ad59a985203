"""The kubeconfig Secret of each Kyma, read from an informer cache (never an API call per reconcile).

Upstream: list Secrets in ``kcp-system`` labelled ``operator.kyma-project.io/kyma-name=<kyma>``;
exactly one must exist; the kubeconfig is in ``data["config"]``. One difference is needed here:
the operator itself writes Secrets carrying the same label (a runtime's certificate, signing keys
and published public keys, all labelled ``operator.kyma-project.io/managed-by=lifecycle-manager``).
Those are not access Secrets, so the informer's selector leaves them out; otherwise every Kyma
with an installed agent would report "more than one access Secret".
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kyma_operator.api import names
from kyma_operator.remote.errors import AccessSecretNotFound, InvalidAccessSecret, MoreThanOneAccessSecret
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.informer import FuncHandler, Informer, ListWatcher
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import SECRETS

JSON = dict[str, Any]

KUBECONFIG_KEY = "config"
ACCESS_SECRET_SELECTOR = f"{names.KYMA_NAME_LABEL},{names.MANAGED_BY_LABEL}!={names.OPERATOR_NAME}"
"""Secrets naming a Kyma, except those the operator writes itself."""
BY_KYMA_INDEX = "remote/kyma-name"


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def kyma_index(obj: JSON) -> list[str]:
    """Index function of ``BY_KYMA_INDEX``: ``<namespace>/<kyma name>`` of an access Secret."""
    kyma = (_meta(obj).get("labels") or {}).get(names.KYMA_NAME_LABEL)
    return [f"{_meta(obj).get('namespace') or ''}/{kyma}"] if kyma else []


@dataclass(frozen=True)
class AccessSecret:
    """The selected Secret: its identity (for the client cache key) and the kubeconfig bytes."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    kubeconfig: bytes


def access_secret_informer(client: ListWatcher, namespace: str, *, clock: Clock | None = None) -> Informer:
    """A label-selected informer on the access Secrets of ``namespace`` (upstream: ``kcp-system``)."""
    return Informer(
        client,
        SECRETS,
        namespace=namespace,
        label_selector=ACCESS_SECRET_SELECTOR,
        indexers={BY_KYMA_INDEX: kyma_index},
        clock=clock,
        name="kyma-access-secrets",
    )


def select_access_secret(kyma: Request, candidates: Iterable[JSON]) -> AccessSecret:
    """Upstream's rule over the Secrets labelled for ``kyma``: exactly one, kubeconfig in ``config``."""
    where = f"in namespace {kyma.namespace}"
    selector = f"{names.KYMA_NAME_LABEL}={kyma.name}"
    found = sorted(candidates, key=lambda s: str(_meta(s).get("name")))
    if not found:
        raise AccessSecretNotFound(f"no access Secret with label {selector} {where}")
    if len(found) > 1:
        listed = ", ".join(str(_meta(s).get("name")) for s in found)
        raise MoreThanOneAccessSecret(f"more than one access Secret with label {selector} {where}: {listed}")
    secret = found[0]
    meta = _meta(secret)
    name = str(meta.get("name") or "")
    encoded = (secret.get("data") or {}).get(KUBECONFIG_KEY)
    if not encoded:
        raise InvalidAccessSecret(f"access Secret {kyma.namespace}/{name} has no data key {KUBECONFIG_KEY!r}")
    try:
        kubeconfig = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidAccessSecret(
            f"access Secret {kyma.namespace}/{name}: {KUBECONFIG_KEY!r} is not base64: {exc}"
        ) from None
    return AccessSecret(
        namespace=kyma.namespace,
        name=name,
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        kubeconfig=kubeconfig,
    )


class SecretSelector(Protocol):
    """Where the client cache gets a Kyma's access Secret from (``AccessSecrets``)."""

    def select(self, kyma: Request) -> AccessSecret: ...


class AccessSecrets:
    """Selects a Kyma's kubeconfig Secret from the informer; see the module docstring."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        with contextlib.suppress(ValueError):  # already indexed (built by access_secret_informer)
            informer.add_indexer(BY_KYMA_INDEX, kyma_index)

    def select(self, kyma: Request) -> AccessSecret:
        """The one access Secret of ``kyma``; raises an ``SkrAccessError`` saying what is wrong."""
        return select_access_secret(
            kyma, self.informer.by_index(BY_KYMA_INDEX, f"{kyma.namespace}/{kyma.name}")
        )

    def on_change(self, callback: Callable[[Request, str], None]) -> None:
        """Call ``callback(kyma, what)`` when an access Secret of that Kyma is ``"added"``, its data
        ``"changed"`` (e.g. a rotated kubeconfig) or it was ``"deleted"``.

        Lets a Kyma that failed for lack of access recover at once instead of on its backoff.
        Updates that leave ``data`` and the Kyma label unchanged are not reported.
        """

        def kyma_of(secret: JSON) -> Request | None:
            meta = _meta(secret)
            kyma = (meta.get("labels") or {}).get(names.KYMA_NAME_LABEL)
            return Request(meta.get("namespace") or "", kyma) if kyma else None

        def added(obj: JSON) -> None:
            request = kyma_of(obj)
            if request is not None:
                callback(request, "added")

        def deleted(obj: JSON) -> None:
            request = kyma_of(obj)
            if request is not None:
                callback(request, "deleted")

        def updated(old: JSON, new: JSON) -> None:
            before, after = kyma_of(old), kyma_of(new)
            if before != after:
                if before is not None:
                    callback(before, "deleted")
                if after is not None:
                    callback(after, "added")
            elif after is not None and old.get("data") != new.get("data"):
                callback(after, "changed")

        self.informer.add_handler(FuncHandler(on_add=added, on_update=updated, on_delete=deleted))
