"""Our CRDs carry upstream's deprecated versions unchanged, so they can replace upstream's in place.

Why: on a control plane that once stored ``v1beta1`` objects, a CRD without that version is refused
(the API server keeps every ``status.storedVersions`` entry in ``spec.versions``; shown for real in
tests/integration/test_migration.py). The upstream files are in tests/fixtures/upstream-klm-crds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane.crds import crd_documents

UPSTREAM = Path(__file__).resolve().parents[3] / "fixtures" / "upstream-klm-crds"
PLURALS = ("kymas", "manifests", "moduletemplates", "modulereleasemetas", "watchers")


def _upstream(plural: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((UPSTREAM / f"operator.kyma-project.io_{plural}.yaml").read_text())
    return doc


@pytest.mark.parametrize("plural", PLURALS)
def test_every_upstream_version_is_ours_and_the_old_ones_are_unchanged(plural: str) -> None:
    (ours,) = crd_documents([plural])
    upstream = _upstream(plural)
    assert [v["name"] for v in ours["spec"]["versions"]] == [v["name"] for v in upstream["spec"]["versions"]]
    for theirs in upstream["spec"]["versions"]:
        (mine,) = [v for v in ours["spec"]["versions"] if v["name"] == theirs["name"]]
        assert (mine["served"], mine["storage"]) == (theirs["served"], theirs["storage"])
        if theirs["name"] != "v1beta2":
            assert mine == theirs, "deprecated versions are copied unchanged"
    assert ours["spec"].get("conversion", {"strategy": "None"}) == upstream["spec"].get(
        "conversion", {"strategy": "None"}
    )
