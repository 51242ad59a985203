"""Where an ``oci-ref`` source's blob lives, and clear errors for malformed sources."""

from __future__ import annotations

import pytest

from kyma_operator.api.manifest import ImageSpec
from kyma_operator.controllers.manifest.oci import locate
from kyma_operator.controllers.manifest.source import SourceError

DIGEST = "sha256:" + "a" * 64


def test_repository_of_the_component_below_its_base() -> None:
    spec = ImageSpec(
        repo="reg.io:5000/kyma/component-descriptors", name="kyma-project.io/module/x", ref=DIGEST
    )
    location = locate(spec, "module x")
    assert location.registry == "reg.io:5000"
    assert location.repository == "kyma/component-descriptors/kyma-project.io/module/x"
    assert location.base.component_repository("kyma-project.io/module/x") == location.repository
    bare = locate(ImageSpec(repo="reg.io/component-descriptors", name="c", ref=DIGEST, type="oci-ref"), "m")
    assert bare.repository == "component-descriptors/c"
    assert bare.base.prefix == ""


@pytest.mark.parametrize(
    ("spec", "reason", "text"),
    [
        (
            ImageSpec(repo="r/component-descriptors", name="c", ref=DIGEST, type="oci-dir"),
            "UnsupportedSource",
            "oci-dir",
        ),
        (ImageSpec(repo="r/component-descriptors", name="c"), "InvalidSource", "needs repo, name and ref"),
        (ImageSpec(repo="r/component-descriptors", name="c", ref="latest"), "InvalidSource", "not a sha256"),
        (
            ImageSpec(repo="r/modules", name="c", ref=DIGEST),
            "InvalidSource",
            "does not end in /component-descriptors",
        ),
    ],
)
def test_malformed_sources(spec: ImageSpec, reason: str, text: str) -> None:
    with pytest.raises(SourceError, match=text) as caught:
        locate(spec, "module x")
    assert caught.value.reason == reason
    assert caught.value.message.startswith("module x: ")
