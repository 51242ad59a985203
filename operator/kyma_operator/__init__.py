"""Kyma Lifecycle Manager operator: controllers for Kyma, Manifest and Watcher resources.

Lives in ``operator/kyma_operator`` because a package named ``operator`` would shadow the standard
library module of the same name.
"""
