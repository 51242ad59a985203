"""Reaching runtimes (SKRs): clients built from the kubeconfig Secret of each Kyma, cached and evicted.

* ``secrets``: select a Kyma's access Secret from a label-selected informer (exactly one, upstream);
* ``cache``: one client per Kyma, rebuilt when the Secret changes, evicted on 401/TLS/transport errors;
* ``errors``: why a runtime cannot be reached, as typed errors with condition reasons.
"""

from kyma_operator.remote.cache import ClientFactory, SkrClientCache, default_client_factory
from kyma_operator.remote.errors import (
    AccessSecretNotFound,
    InvalidAccessSecret,
    MoreThanOneAccessSecret,
    SkrAccessError,
    is_connection_error,
)
from kyma_operator.remote.secrets import (
    ACCESS_SECRET_SELECTOR,
    KUBECONFIG_KEY,
    AccessSecret,
    AccessSecrets,
    SecretSelector,
    access_secret_informer,
    select_access_secret,
)

__all__ = [
    "ACCESS_SECRET_SELECTOR",
    "KUBECONFIG_KEY",
    "AccessSecret",
    "AccessSecretNotFound",
    "AccessSecrets",
    "ClientFactory",
    "InvalidAccessSecret",
    "MoreThanOneAccessSecret",
    "SecretSelector",
    "SkrAccessError",
    "SkrClientCache",
    "access_secret_informer",
    "default_client_factory",
    "is_connection_error",
    "select_access_secret",
]
