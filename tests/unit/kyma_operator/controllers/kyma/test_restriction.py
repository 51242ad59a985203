"""Restricted modules as upstream's ``restrictedmodule.RestrictedModuleMatch``: a listed module whose
ModuleReleaseMeta has no ``kymaSelector`` or ``{}`` matches no Kyma (issue 25 item 5)."""

from __future__ import annotations

import pytest

from kyma_operator.api.meta import LabelSelector, LabelSelectorOperator, LabelSelectorRequirement
from kyma_operator.controllers.kyma.moduleresolution import restriction_allows
from tests.unit.kyma_operator.controllers.kyma.test_moduleresolution import kyma, mrm

EU = LabelSelector(match_labels={"region": "eu"})
HAS_PLAN = LabelSelector(
    match_expressions=[LabelSelectorRequirement(key="plan", operator=LabelSelectorOperator.EXISTS)]
)


@pytest.mark.parametrize(
    ("selector", "listed", "labels", "allowed"),
    [
        (None, True, {"region": "eu"}, False),  # restricted, no selector: nobody
        (LabelSelector(), True, {"region": "eu"}, False),  # restricted, {}: nobody
        (EU, True, {"region": "eu"}, True),
        (EU, True, {"region": "us"}, False),
        (HAS_PLAN, True, {"plan": "premium"}, True),
        (HAS_PLAN, True, {}, False),
        (None, False, {}, True),  # not restricted, no selector: everyone
        (LabelSelector(), False, {}, True),
        (EU, False, {"region": "eu"}, False),  # a selector on a module not listed: nobody
    ],
)
def test_restricted_module_match(
    selector: LabelSelector | None, listed: bool, labels: dict[str, str], allowed: bool
) -> None:
    release = mrm({"regular": "1.0.0"})
    release.spec.kyma_selector = selector
    assert restriction_allows(kyma(**labels), release, ("mod",) if listed else ()) is allowed
