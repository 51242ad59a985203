"""The KCP listener: authenticates the agents' signed events and routes each to the reconcile of
exactly the Kyma or Manifest concerned.

It depends on ``kyma_wire`` (the contract with the agent, and the HTTP server it shares with the
agent) and ``embedded_server`` only, and
declares what it needs from its host as Protocols; the operator implements them
(``kyma_operator.listener``; docs/architecture.md, "The listener boundary"):

* ``app.build_asgi``: FastAPI for the documented API, a pure-ASGI fast path for events;
* ``intake.EventIntake``: the fixed order of checks, framework-free;
* ``verifier.SignatureVerifier`` (RFC 9421 / Ed25519), ``keystore.KeyStore``, ``xfcc.XfccParser``,
  ``replay.ReplayCache``: who sent it, and only once;
* ``routing.Router`` over a ``routing.KymaDirectory``, into ``routing.RequestSink``s, targets named
  by ``routing.ObjectRef``;
* ``health.HeartbeatTracker``, ``metrics.ListenerMetrics``, ``server.ListenerServer`` (on
  ``direct_server``, ``kyma_wire.http_server``, by default; or uvicorn);
* ``handoff.Handoff`` (over ``handoff.RuntimeShards``), ``handoff_server.HandoffServer``,
  ``handoff_auth.HandoffVerifier`` over a ``handoff_keys.HandoffKeyRing`` (current + previous key,
  replaced when the key is rotated): sharded replicas hand events to the shard's holder.
"""
