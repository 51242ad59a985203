"""Canary: the repository's ``operator/`` folder must never shadow the standard library module."""

import importlib
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_operator_is_the_standard_library_module() -> None:
    module = sys.modules.get("operator") or importlib.import_module("operator")
    assert module.__file__ is not None
    assert module.__file__.endswith("operator.py")
    assert hasattr(module, "itemgetter")


def test_operator_folder_is_not_a_package() -> None:
    assert not (REPO / "operator" / "__init__.py").exists()
    assert (REPO / "operator" / "kyma_operator" / "__init__.py").exists()


def test_kyma_operator_imports_from_operator_folder() -> None:
    import kyma_operator

    assert kyma_operator.__file__ is not None
    assert pathlib.Path(kyma_operator.__file__).parent == REPO / "operator" / "kyma_operator"
