"""Why a runtime (SKR) cannot be reached, as typed errors the Kyma controller turns into conditions.

Upstream (``ErrAccessSecretNotFound``, ``ErrMoreThanOneSecretFound``) reports these as a Kyma in
Error; the reason names which of them it is, so an operator sees at once whether the kubeconfig
Secret is missing, duplicated or broken. ``is_connection_error`` says which API errors mean the
cached client itself is bad (credentials rotated or revoked, TLS or transport failures) and must
be rebuilt from the Secret.
"""

from __future__ import annotations

from kyma_operator.runtime.errors import KubeTransportError, Unauthorized


class SkrAccessError(Exception):
    """The runtime of a Kyma cannot be reached; ``reason`` is a CamelCase condition reason."""

    reason = "SkrAccessError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AccessSecretNotFound(SkrAccessError):
    """No kubeconfig Secret is labelled for the Kyma (upstream ``ErrAccessSecretNotFound``)."""

    reason = "AccessSecretNotFound"


class MoreThanOneAccessSecret(SkrAccessError):
    """Several kubeconfig Secrets are labelled for the Kyma (upstream ``ErrMoreThanOneSecretFound``)."""

    reason = "MoreThanOneAccessSecret"


class InvalidAccessSecret(SkrAccessError):
    """The Secret has no usable kubeconfig in ``data["config"]``."""

    reason = "InvalidAccessSecret"


def is_connection_error(exc: BaseException) -> bool:
    """True when the client that raised ``exc`` should be thrown away (401, TLS, transport)."""
    return isinstance(exc, Unauthorized | KubeTransportError)
