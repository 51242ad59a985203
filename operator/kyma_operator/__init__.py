"""Kyma Lifecycle Manager operator: controllers for Kyma, Manifest and Watcher resources, and the
KCP listener wired to them.

Subpackages, lowest layer first (docs/architecture.md, "Packages and layering"): ``runtime`` (the
controller runtime), ``api``, ``modules``, ``remote``, ``identity``, ``listener``, ``config``,
``agentinstall``, ``controllers``, ``app`` (assembles the process), ``cli``.

Lives in ``operator/kyma_operator`` because a package named ``operator`` would shadow the standard
library module of the same name.
"""
