"""Per-runtime agent installation and identity: what the operator puts into each runtime and into KCP.

* ``ca``, ``bundle``, ``leaf``, ``signing_keys``: the operator CA, the zero-downtime CA rotation,
  per-runtime certificates and Ed25519 signing-key rotation, as pure functions over ``now``;
* ``secrets``, ``store``: their layout in KCP Secrets and the ``IdentityStore`` that persists them;
* ``rotator``: moves the CA rotation along on its own schedule;
* ``installer``, ``readiness``, ``kcpaddr``: render (from ``skr_watcher.artefacts``), apply and
  remove the agent in a runtime, and report its readiness for the Kyma ``SKRWebhook`` condition.
"""
