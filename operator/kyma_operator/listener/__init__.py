"""The KCP listener inside the operator: ``kcp_listener`` wired to informers, intakes and shards.

Why a package of its own: ``kcp_listener`` (authenticate, validate, route, hand off) depends only
on ``kyma_wire`` and Protocols it declares; everything Kubernetes-backed that serves those
Protocols lives here, so the dependency runs one way, operator -> listener -> wire
(docs/architecture.md, "Layering"):

* ``wiring.OperatorListener``: one object the Manager runs (informers, serving rule, hand-off);
* ``kube.InformerDirectory``: routing look-ups from informer indexes; ``kube.feed_keystore``;
* ``sinks.ControllerSink``: the listener's ``ObjectRef`` into a controller's ``Intake``;
* ``shards.RuntimeShardView``: hand-off decisions from the shard map;
* ``handoff_key``: the replicas' shared hand-off keys in a watched KCP Secret (current + previous);
* ``handoff_key_rotation.HandoffKeyRotator``: the leader's automatic key rotation;
* ``python -m kyma_operator.listener --print``: the standalone development mode.
"""
