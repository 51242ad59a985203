"""One clear line and a non-zero exit for every expected failure.

Why: the brief asks for "one clear error line + non-zero exit" for bad input, unreachable registries,
wrong keys and missing access. Library errors already carry a message naming the field, file, module
or registry; this module decides which exceptions are such expected failures (no traceback).
"""

from __future__ import annotations

from kyma_operator.modules.archive import ArchiveError
from kyma_operator.modules.auth import CredentialsError
from kyma_operator.modules.build import ModuleConfigError
from kyma_operator.modules.componentarchive import ArchiveFormatError
from kyma_operator.modules.descriptor import DescriptorError
from kyma_operator.modules.normalise import NormalisationError
from kyma_operator.modules.reference import ReferenceParseError
from kyma_operator.modules.registry import RegistryError
from kyma_operator.modules.signing import KeyFileError, SignatureError


class CliError(Exception):
    """An expected failure of a command; the message is shown as is."""


class WaitFailed(CliError):
    """``--wait`` saw the module go to Error (or time out)."""


# Kubernetes API errors are expected too; their module is imported only when a command talks to a
# cluster (``expected_errors``), which keeps the API client (httpx) out of `kyma module create` & co.
_EXPECTED: tuple[type[BaseException], ...] = (
    CliError,
    ArchiveError,
    ArchiveFormatError,
    CredentialsError,
    DescriptorError,
    KeyFileError,
    ModuleConfigError,
    NormalisationError,
    ReferenceParseError,
    RegistryError,
    SignatureError,
)


def expected_errors() -> tuple[type[BaseException], ...]:
    import sys

    kube_errors = sys.modules.get("kyma_operator.runtime.errors")
    if kube_errors is None:  # no cluster command ran: no Kubernetes error can have been raised
        return _EXPECTED
    return (*_EXPECTED, kube_errors.KubeError)


def describe(exc: BaseException) -> str:
    """The one line shown for ``exc``."""
    from kyma_operator.runtime.errors import KubeError

    text = str(exc)
    if isinstance(exc, KubeError):
        if exc.status == 0:
            text = f"cannot reach the API server: {exc.message}"
        elif exc.status in (401, 403):
            text = f"no access: {exc.message} (check the kubeconfig's user and RBAC)"
        else:
            text = exc.message or text
    lines = text.strip().splitlines()
    return lines[0] if lines else type(exc).__name__
