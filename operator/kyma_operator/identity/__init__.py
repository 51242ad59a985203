"""Runtime identity: what proves to KCP that an event comes from a given runtime.

* ``ca``, ``bundle``, ``leaf``, ``signing_keys``: the operator CA, the zero-downtime CA rotation,
  per-runtime certificates and Ed25519 signing-key rotation, as pure functions over ``now``;
* ``secret_layout``, ``store``: their layout in KCP Secrets and the ``IdentityStore`` that persists them;
* ``rotator``: moves the CA rotation along on its own schedule.

The agent side of the same material is ``skr_watcher.credentials``; the listener reads the public
half through ``kcp_listener.keystore``.
"""
