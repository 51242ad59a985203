"""The wire contract between the runtime agent, the KCP listener and the operator.

Why a top-level package and not a module of ``kcp_listener``: the contract belongs to the listener
in the sense that the listener defines what it accepts. But the agent runs on every customer's
nodes and must not load the listener's verification libraries (PyNaCl, http-message-signatures) or
anything else of it just to build an event; a separate package makes that boundary visible in every
import line (``skr_watcher`` imports ``kyma_wire``, never ``kcp_listener``) and lets a test enforce
it (``tests/unit/test_import_layering.py``; docs/architecture.md, "Packages and layering"). The
same reasoning as controller-runtime's tiny shared ``pkg/reconcile``.

What is here, one concern per module, importing nothing heavier than pydantic and ``cryptography``:

* :mod:`kyma_wire.names` - label, annotation, namespace and manager names shared by agent, listener
  and operator (operator-only names are in ``kyma_operator.api.names``);
* :mod:`kyma_wire.events` - paths, limits and the event/heartbeat/batch bodies;
* :mod:`kyma_wire.profile` - the RFC 9421 signature profile (covered components, parameters,
  signature base, ``Content-Digest``, key ids): what signer and verifier must agree on byte for byte;
* :mod:`kyma_wire.keys` - Ed25519 PEM helpers (the keys' wire format in Secrets);
* :mod:`kyma_wire.log_limit` - at most one log line per reason and interval, for whatever a client
  can trigger per request (agent and listener);
* :mod:`kyma_wire.http_client` - the small keep-alive HTTP/1.1 client (asyncio streams, httptools,
  TLS/mTLS) the agent posts to KCP with and the listener hands events to other replicas with;
  :mod:`kyma_wire.httpx_transport` adapts httpx transports to it for tests (never the agent);
* :mod:`kyma_wire.http_server` - the small HTTP/1.1 server (asyncio protocol, httptools, answers
  inside the parser's callbacks; :mod:`kyma_wire.deadlines`, :mod:`kyma_wire.tls_layer`): the
  agent's ports, and the listener's with ``server="direct"`` (``kcp_listener.direct_server``).
  Here rather than in the agent because both use it, and the agent may import only this package.

The signer lives with the agent (``skr_watcher.signer``), the verifier with the listener
(``kcp_listener.verifier``).
"""
