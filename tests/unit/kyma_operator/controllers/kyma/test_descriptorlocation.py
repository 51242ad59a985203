"""Where a module is installed from: a repository context's ``subPath`` (``ocm transfer``), the
registry a descriptor was fetched from, and ``--oci-registry-host`` values with a scheme."""

from __future__ import annotations

from typing import Any

from kyma_operator.controllers.kyma.descriptors import located, split_host
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.template import install_source

DIGEST = "sha256:" + "6" * 64


def descriptor(contexts: list[dict[str, Any]]) -> ComponentDescriptor:
    return ComponentDescriptor.parse(
        {
            "meta": {"schemaVersion": "v2"},
            "component": {
                "name": "kyma-project.io/module/template-operator",
                "version": "1.0.3",
                "provider": "kyma-project.io",
                "repositoryContexts": contexts,
                "resources": [
                    {
                        "name": "raw-manifest",
                        "type": "directoryTree",
                        "version": "1.0.3",
                        "relation": "local",
                        "access": {"type": "localBlob", "localReference": DIGEST},
                    }
                ],
            },
        }
    )


def test_a_transferred_module_installs_from_its_last_context_with_the_sub_path() -> None:
    # upstream e2e moduletemplate_template_operator_transferred.yaml: two contexts, both with subPath
    transferred = descriptor(
        [
            {
                "baseUrl": "europe-west3-docker.pkg.dev",
                "componentNameMapping": "urlPath",
                "subPath": "sap-kyma-jellyfish-dev/template-operator",
                "type": "OCIRegistry",
            },
            {
                "baseUrl": "europe-west3-docker.pkg.dev",
                "componentNameMapping": "urlPath",
                "subPath": "sap-kyma-jellyfish-dev/restricted-market",
                "type": "OCIRegistry",
            },
        ]
    )
    source = install_source(transferred)
    assert (
        source.repo
        == "europe-west3-docker.pkg.dev/sap-kyma-jellyfish-dev/restricted-market/component-descriptors"
    )
    assert source.repository == (
        "sap-kyma-jellyfish-dev/restricted-market/component-descriptors/kyma-project.io/module/template-operator"
    )
    assert source.registry == "europe-west3-docker.pkg.dev" and source.ref == DIGEST


def test_a_base_url_with_a_path_and_scheme_still_works() -> None:
    ours = descriptor([{"baseUrl": "https://127.0.0.1:5000/modules", "type": "OCIRegistry"}])
    assert install_source(ours).repo == "127.0.0.1:5000/modules/component-descriptors"


def test_a_fetched_descriptor_is_located_where_it_was_fetched() -> None:
    elsewhere = descriptor([{"baseUrl": "ghcr.io", "subPath": "origin", "type": "OCIRegistry"}])
    moved = located(elsewhere, RegistryBase("127.0.0.1:5000", "mirror/sub"))
    assert moved.component.repository_contexts[-1] == {
        "baseUrl": "127.0.0.1:5000",
        "componentNameMapping": "urlPath",
        "subPath": "mirror/sub",
        "type": "OCIRegistry",
    }
    assert install_source(moved).repo == "127.0.0.1:5000/mirror/sub/component-descriptors"
    assert len(moved.component.repository_contexts) == 2
    # already there (in either spelling): unchanged
    assert located(moved, RegistryBase("127.0.0.1:5000", "mirror/sub")) is moved
    here = descriptor([{"baseUrl": "127.0.0.1:5000/modules", "type": "OCIRegistry"}])
    assert located(here, RegistryBase("127.0.0.1:5000", "modules")) is here
    assert located(elsewhere, RegistryBase("ghcr.io", "")).component.repository_contexts[-1] == {
        "baseUrl": "ghcr.io",
        "componentNameMapping": "urlPath",
        "type": "OCIRegistry",
    }


def test_registry_host_values() -> None:
    assert split_host("http://127.0.0.1:5000/") == ("127.0.0.1:5000", True)
    assert split_host("https://europe-west3-docker.pkg.dev") == ("europe-west3-docker.pkg.dev", False)
    assert split_host("ghcr.io/org") == ("ghcr.io/org", False)
