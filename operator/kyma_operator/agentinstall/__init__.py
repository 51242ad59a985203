"""Per-runtime agent installation: what the operator puts into each runtime so that it sends events.

* ``artefacts``: the agent's resources rendered per runtime from ``manifests/agent`` (pure functions);
* ``installer``: apply (what ``artefacts`` renders) and remove the agent in a runtime;
* ``readiness``: the agent's readiness for the Kyma ``SKRWebhook`` condition;
* ``kcpaddr``: the KCP address agents send to, from the ``klm-watcher`` Gateway.

Credentials come from ``kyma_operator.identity``.
"""
