"""``make run`` (``python -m localrun``): the whole system on this machine until Ctrl-C.

KCP + SKRs, the operator with its listener, and one agent per runtime.

What runs:

* one etcd and kube-apiservers for KCP and ``--skrs N`` runtimes (``skr-1``..), CRDs installed;
* in KCP, from ``manifests/kcp``: namespaces, RBAC, listener Service, the default Watchers and the
  ``klm-watcher`` Gateway (its host overlaid with 127.0.0.1: there is no Istio locally, the Gateway
  only tells the operator which address agents send to, and agents reach the listener directly);
* per runtime an admin-kubeconfig access Secret and a Kyma ``rt-<skr>`` (runtime id = name);
* the operator in this process (Watcher, Kyma and Manifest controllers, CA rotation, the listener on
  127.0.0.1), with webhook URL mode: each runtime's API server calls its agent on 127.0.0.1;
* every cluster is a living one (kube-controller-manager, kube-scheduler and kwok with simulated
  nodes, ``tests/controlplane/living.py``): the agent Deployment the operator installs gets a
  ReplicaSet and a pod that is scheduled onto a kwok node and reported Ready by kwok, so the
  Deployment's readiness, garbage collection and namespace deletion are the cluster's own (and
  heal like a real cluster's after an API server outage: kwok readies the nodes and the pods the
  controller manager marked not ready again, ``tests/controlplane/kwok/stages.yaml``);
* per runtime a real agent process (``python -m skr_watcher``), started by ``LocalAgent`` as the
  container of that pod (a kwok pod runs nothing): environment from the Deployment, credential
  files from the ``skr-webhook-tls`` Secret (kept up to date under ``.local/run/<skr>/ssl``).

An edit of a runtime's Kyma (``KUBECONFIG=.local/run/skr-1.kubeconfig kubectl edit kyma -n
kyma-system default``) then shows up as a routed event and a targeted reconcile. ``--once`` brings
everything up, makes such an edit itself, waits for the targeted reconcile and stops again.
``--module`` also runs a local OCI registry and publishes a sample module to it with the real
``kyma module create/template/deploy`` commands (``module.py``: two versions in two channels, their
ModuleTemplates and ModuleReleaseMeta in KCP) and prints a copy-paste session (list, enable, delete a
module object and see it back, switch channel, disable); with ``--once`` the module is enabled and a
module object is deleted and restored by its event. ``--demo`` runs that session scripted and timed
(``demo.py``) with an outage of the agents' path to the listener (``outage.py``) in the middle.


Modules: ``kcp`` (KCP set-up: manifests, runtimes' access Secrets and Kymas, the operator's
configuration), ``agent`` (one runtime's agent process, started like a kubelet would), ``system``
(operator + agents over a started control plane, the live output, ``--once``), ``module`` (the sample
module and its publication), ``demo`` (``--demo``), ``outage`` (the relay the demo cuts), ``output``
(the time-stamped console lines), ``__main__`` (flags, the control plane, exit codes).
"""
