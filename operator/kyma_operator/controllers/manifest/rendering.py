"""One function for every way the Manifest controller turns a raw manifest into runtime objects.

Why: the normal install (``reconciler``) and the install that follows a new version while an
uninstall is blocked (``blockedupgrade``) must apply the same objects for the same Manifest. They
used to render each on their own, and the blocked path left out the image-pull Secret steps
(``pullsecret``): a module upgraded during a blocked deletion lost ``imagePullSecrets`` and its
``SKR_IMG_PULL_SECRET`` variable. Every render step (parse, upstream's transforms with the localized
images, the image-pull Secret steps) is here, so a new step reaches both paths at once.
"""

from __future__ import annotations

from kyma_operator.api.manifest import Manifest
from kyma_operator.controllers.manifest.parsememo import ParsedManifests
from kyma_operator.controllers.manifest.pullsecret import PullSecretError, PullSecrets
from kyma_operator.controllers.manifest.render import RenderContext, RenderError, parse_documents, transform
from kyma_operator.runtime.objects import JSON


class RenderFailed(Exception):
    """The raw manifest cannot be rendered for this Manifest; ``message`` is the status text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


async def render_objects(
    manifest: Manifest,
    text: str,
    *,
    digest: str,
    what: str,
    pull_secrets: PullSecrets,
    parsed: ParsedManifests | None = None,
) -> list[JSON]:
    """The objects to apply for ``manifest`` from its raw manifest ``text`` (blob ``digest``,
    source described as ``what``). Raises ``RenderFailed`` naming the cause. ``parsed``: the memo
    of parsed raw manifests (without one, ``text`` is parsed here)."""
    try:
        documents = parsed.documents(text, digest) if parsed is not None else parse_documents(text)
        objects = transform(
            documents,
            RenderContext(manifest.namespace, manifest.name, tuple(manifest.spec.localized_images or ())),
        )
    except RenderError as exc:
        raise RenderFailed(f"{what}: raw manifest {digest}: {exc}") from None
    try:
        await pull_secrets.apply(manifest, objects)
    except PullSecretError as exc:
        raise RenderFailed(str(exc)) from None
    return objects
