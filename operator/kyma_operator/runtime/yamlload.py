"""YAML parsed by libyaml where PyYAML has it: the same documents, several times faster.

Why: PyYAML's pure-Python scanner is slow. On this machine a module's 1.3 KB raw manifest took
9.6 ms to parse, and the agent's base files 25 ms. Both were parsed again on every reconcile that
used them: a Manifest install, and every full Kyma reconcile of a runtime with an agent. A
runtime's 2 KB kubeconfig took 3-5 ms whenever its client was built (at 50,000 runtimes, minutes
of CPU). The libyaml binding that ships in PyYAML's wheels (``CSafeLoader``) parsed the same
manifest in 1.25 ms and the kubeconfig in 0.2-0.4 ms. Only the scanner and parser run in C. What a
scalar becomes (resolver, constructor: the safe tags only) is the same Python code as in
``SafeLoader``, so the objects are the same. ``tests/unit/kyma_operator/runtime/test_yamlload.py``
holds the two to the same results, hostile input included. Where PyYAML was built without libyaml,
the pure ``SafeLoader`` is used.
"""

from __future__ import annotations

from typing import Any

import yaml

SafeLoader: type[yaml.CSafeLoader] | type[yaml.SafeLoader] = (
    yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
)
"""The loader used here: libyaml's when PyYAML has it."""


def safe_load(text: str | bytes) -> Any:
    """One document, as ``yaml.safe_load``; raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=SafeLoader)


def safe_load_all(text: str | bytes) -> list[Any]:
    """Every document, as ``list(yaml.safe_load_all(...))``; raises ``yaml.YAMLError``."""
    return list(yaml.load_all(text, Loader=SafeLoader))
