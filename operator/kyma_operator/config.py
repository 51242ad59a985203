"""The operator's configuration: one validated model, filled from environment variables and flags.

Every field ``some_setting`` can be set as ``--some-setting VALUE`` or as environment variable
``KLM_SOME_SETTING`` (flags win; ``--kubeconfig`` also falls back to ``KUBECONFIG``). Booleans take
``true``/``false`` (a bare ``--flag`` means true); mappings take ``key=value`` (flag repeated, or
comma-separated in the environment); lists take repeated flags or comma-separated values. Invalid
input is a ``ConfigError`` whose message names the flag and the variable, and nothing starts.

Defaults are upstream's where upstream has one (namespaces, listener port 8082, probes on 8081,
metrics on 8080, Gateway ``klm-watcher``); the probe and listener servers bind 127.0.0.1 unless told
otherwise (in a cluster: ``--probe-host 0.0.0.0 --listener-host 0.0.0.0``).
"""

from __future__ import annotations

import argparse
import os
import types
import typing
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from kcp_listener.config import AuthMode, ServerKind
from kyma_operator.api import names
from kyma_operator.controllers.kyma.config import DEFAULT_HEARTBEAT_SWEEP_INTERVAL, KymaControllerConfig
from kyma_operator.controllers.kyma.descriptors import DescriptorSourceConfig
from kyma_operator.controllers.kyma.maintenance import DEFAULT_MIN_WINDOW_SIZE, DEFAULT_POLICY_FILE
from kyma_operator.controllers.manifest.config import (
    DEFAULT_APPLY_CONCURRENCY,
    DEFAULT_WORKLOAD_WATCHES,
    ManifestControllerConfig,
)
from kyma_operator.listener.handoff_key_rotation import MIN_ROTATION_INTERVAL
from kyma_operator.remote.cache import DEFAULT_IDLE_TTL
from kyma_operator.runtime.leader import LeaderElectionConfig
from kyma_operator.runtime.sharding import ShardingConfig, default_replica_id, request_timeout_for
from kyma_operator.runtime.shardmap import DEFAULT_SHARDS
from kyma_wire.events import DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS
from kyma_wire.logs import LogFormat

ENV_PREFIX = "KLM_"

Port = Annotated[int, Field(ge=0, le=65535)]
Seconds = Annotated[float, Field(gt=0)]


class ConfigError(ValueError):
    """The configuration is invalid; the message names the settings concerned."""


def check_lease_timings(lease_duration: float, renew_deadline: float, retry_period: float) -> None:
    """The Lease timings the operator accepts (client-go's rule): lease duration > renew deadline >
    1.2 x retry period. Raises ``ValueError`` naming the rule broken; also used by
    ``benchmarks/scale_bench --lease-timings``."""
    if not lease_duration > renew_deadline:
        raise ValueError("leader_elect_lease_duration must be longer than leader_elect_renew_deadline")
    if not renew_deadline > 1.2 * retry_period:
        raise ValueError("leader_elect_renew_deadline must exceed 1.2 x leader_elect_retry_period")


class OperatorConfig(BaseModel):
    # Attribute docstrings become field descriptions: the --help text of every flag.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    # KCP access
    kubeconfig: Path | None = None
    """Kubeconfig of the KCP API server; unset: in-cluster service account."""
    namespace: str = Field(default=names.KCP_NAMESPACE, min_length=1)
    """Kymas, access Secrets, Watchers, Gateway, Leases (upstream ``kcp-system``)."""
    istio_namespace: str = Field(default="istio-system", min_length=1)
    """The operator CA, gateway credential and per-runtime certificates (upstream ``--istio-namespace``)."""

    # process
    leader_elect: bool = True
    """Run only while holding the Lease (several replicas: one leads, the others stand by)."""
    leader_election_id: str = Field(default="klm-controller-manager-leader-election", min_length=1)
    """Name of the Lease in ``namespace``."""
    leader_elect_lease_duration: Seconds = 10.0
    """Seconds a standby waits, after the Lease stopped changing, before it takes over (failover time)."""
    leader_elect_renew_deadline: Seconds = 7.0
    """Seconds after the last successful renewal at which the leader stops all leader work (fencing);
    must be shorter than the lease duration."""
    leader_elect_retry_period: Seconds = 1.5
    """Seconds between renewals (leader) and acquisition attempts (standby)."""

    # sharding (docs/sharding.md)
    sharding: bool = False
    """Split the Kymas into ``--shards`` shards over every running replica (one Lease per shard plus
    one membership Lease per replica; shard Leases use the leader election's timings); the leader
    still runs the Watcher controller and cluster-wide work. Off: the leader reconciles every Kyma."""
    shards: Annotated[int, Field(ge=1, le=1024)] = DEFAULT_SHARDS
    """Number of shards (with ``--sharding``; every replica must use the same number)."""
    shard_scoped_caches: bool = False
    """With ``--sharding``: cache only the Kymas, Manifests and access Secrets of the shards this
    replica holds (one informer per held shard on the shard label, plus one for objects not labelled
    yet), so memory and resync work follow the replica's share; the leader adds a fleet-wide view
    for rollouts that keeps only what rollouts read. Off: every replica caches the whole fleet. Off
    by default: at start-up, while the shard lists are in, shard Lease renewals can still be late
    on a loaded control plane (fenced for moments; no Lease was lost since the Lease thread:
    docs/sharding.md)."""
    replica_id: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=200)
    """This replica's id in its membership and shard Leases (a lower-case DNS name, unique per
    replica); unset: ``POD_NAME``, else the host name."""
    internal_address: str | None = None
    """Address other replicas hand events for this replica's shards to, published in its membership
    Lease; unset: ``http://$POD_IP:<--handoff-port>`` (``--handoff-host`` without ``POD_IP``): the
    listener's internal hand-off endpoint (HMAC-authenticated, docs/sharding-handoff.md)."""
    reconcile_trace_file: Path | None = None
    """Debugging: append ``start|end <controller> <object> <replica> <monotonic ns>`` per reconcile
    (``end``: then the CPU ns of the reconcile's thread meanwhile) to this file (tests check that no
    Kyma is reconciled by two replicas at once)."""
    probe_host: str = "127.0.0.1"
    """Address the health, readiness and metrics endpoints bind to."""
    health_port: Port = 8081
    """Port of ``/healthz`` and ``/readyz`` (0: any free port)."""
    metrics_port: Port | None = 8080
    """Port of ``/metrics``; unset: metrics are served on the health port."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """DEBUG, INFO, WARNING or ERROR."""
    log_format: LogFormat = "text"
    """text (one readable line per record) or json (one JSON object per line: ts, level, logger, msg;
    for log pipelines)."""

    # listener
    listener_enabled: bool = True
    """Serve the event listener (agents' signed events -> targeted reconciles): on the leader, or on
    every replica with ``--sharding`` (events of shards held elsewhere are handed to the holder)."""
    listener_host: str = "127.0.0.1"
    """Address the listener binds to (behind the KCP gateway: the pod address)."""
    listener_port: Port = 8082
    """Port of the listener (upstream 8082)."""
    listener_auth_mode: AuthMode = AuthMode.SIGNATURE
    """How runtimes prove who they are: signature (Ed25519, RFC 9421), xfcc (client certificate
    forwarded by the gateway), both, or either (a signature when sent, else XFCC: for fleets that
    still run upstream agents, see docs/migration.md)."""
    listener_public_origin: str | None = None
    """``scheme://host[:port]`` the agents sign; unset: from each request."""
    listener_header_timeout: Annotated[float, Field(gt=0, le=60)] = 10.0
    """Seconds a request's headers may take to arrive at the listener (and the hand-off endpoint);
    then the connection is closed (slowloris)."""
    listener_body_timeout: Annotated[float, Field(gt=0, le=60)] = 30.0
    """Seconds a request's body may take after its headers; then the connection is closed."""
    listener_idle_timeout: Annotated[float, Field(gt=0, le=60)] = 60.0
    """Seconds a kept-alive listener connection may wait for its next request (upstream: 60)."""
    listener_write_timeout: Annotated[float, Field(gt=0, le=60)] = 30.0
    """Seconds a client may leave the listener's answers unread before its connection is closed."""
    listener_server: ServerKind = ServerKind.DIRECT
    """The listener's HTTP server: direct (the agent's small server: events answered without a task
    per request, ~1.6x uvicorn's events per CPU-second; benchmarks/results/listener.md) or uvicorn."""
    handoff_host: str = "127.0.0.1"
    """Address of the internal hand-off endpoint (sharded: other replicas deliver events here)."""
    handoff_port: Port = 8083
    """Port of the internal hand-off endpoint (pod network only, never through the gateway)."""
    handoff_key_rotation_interval: Annotated[float, Field(ge=0)] = 604800.0
    """With --sharding: seconds between automatic rotations of the replicas' hand-off key (by the
    leader; no restart, no refused hand-off; docs/sharding-handoff.md); 0: only rotated by hand.
    At least 600. Default: 7 days."""
    heartbeat_max_silence: Seconds = DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS
    """Seconds without an agent heartbeat after which a runtime's watcher counts as unhealthy."""
    heartbeat_sweep_interval: Seconds = DEFAULT_HEARTBEAT_SWEEP_INTERVAL
    """Seconds between two looks at every runtime's agent health: a Kyma whose agent went silent
    since its last reconcile is reconciled then (its SKRWatcherHeartbeat condition and safety-net
    interval); a look is one in-memory comparison per Kyma, no API call. An agent that comes back
    does not wait for it: its heartbeat wakes its Kyma at once."""
    event_throttle_window: Annotated[float, Field(ge=0, le=60)] = 0.5
    """Runtime events for one Kyma within this window after a forward become one trailing reconcile
    (the first goes at once); 0 disables throttling."""

    # agents in the runtimes
    watcher_enabled: bool = True
    """The Watcher feature: VirtualServices for Watchers and an agent in every runtime (off: only
    single-cluster Kymas, label ``operator.kyma-project.io/sync=false``, are served; ``kyma install``)."""
    kcp_addr: str | None = None
    """``host:port`` agents send to; unset: resolved from the Gateway (upstream)."""
    gateway_name: str = Field(default="klm-watcher", min_length=1)
    """Istio Gateway in ``namespace`` whose host agents send to (upstream ``klm-watcher``)."""
    listener_port_overwrite: Annotated[int, Field(ge=1, le=65535)] | None = None
    """Port agents use instead of the Gateway's (upstream ``--listener-port-overwrite``, local set-ups)."""
    sync_namespace: str = Field(default=names.SKR_NAMESPACE, min_length=1)
    """Namespace in each runtime for the Kyma copy and the agent (upstream ``kyma-system``)."""
    agent_image: str | None = None
    """Container image of the runtime agent; unset: the image the agent chart names."""
    agent_env: dict[str, str] = Field(default_factory=dict)
    """Extra agent environment (e.g. ``KCP_SCHEME=http`` when agents reach the listener directly)."""
    agent_readiness_poll: Seconds = 30.0
    """Seconds between readiness checks of an agent that is still starting."""
    additional_dns_names: tuple[str, ...] = ()
    """Extra SANs on every runtime certificate (``127.0.0.1`` for webhook URL mode on loopback)."""
    istio_gateway_secret_requeue_success_interval: Seconds = 300.0
    """Seconds between looks at the CA and gateway Secrets (a broken gateway Secret is repaired at the
    next look; rotation steps due earlier run on time)."""
    istio_gateway_secret_requeue_err_interval: Seconds = 2.0
    """Seconds before the next look after a look failed (API error, unreadable CA Secret)."""
    webhook_configuration_name: str = Field(default="skr-webhook", min_length=1)
    """Name of the runtime's ValidatingWebhookConfiguration (differs only when operators share runtimes)."""
    webhook_url: str | None = None
    """Local runs: runtimes call their agent at this ``https://`` base URL instead of the Service."""
    webhook_urls: dict[str, str] = Field(default_factory=dict)
    """Local runs: ``<kyma name>=https://host:port`` per runtime (one agent process each)."""

    # controllers
    kyma_workers: Annotated[int, Field(ge=1, le=64)] = 4
    """Kymas reconciled concurrently (never the same Kyma twice at once)."""
    kyma_modules: bool = True
    """The Kyma controller's module half: one Manifest per enabled (and mandatory) module,
    ``status.modules``, the module catalog in every runtime (off: agents and runtime copies only)."""
    restricted_modules: tuple[str, ...] = ()
    """Modules whose ModuleReleaseMeta may limit them to the Kymas its ``kymaSelector`` matches
    (upstream ``--restricted-modules``); a release meta with a selector that is not listed here is
    offered to no Kyma."""
    skr_image_pull_secret: str | None = Field(
        default=None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253
    )
    """Name of a Secret in ``namespace`` that runtimes pull images with (upstream
    ``--skr-image-pull-secret``): copied into every runtime's sync namespace (condition
    ``SKRImagePullSecretSync``), named in ``imagePullSecrets`` of the agent and of every module
    Deployment/StatefulSet, and as ``SKR_IMG_PULL_SECRET`` in module managers' containers."""
    maintenance_policy_file: Path | None = DEFAULT_POLICY_FILE
    """Maintenance window policy in upstream's format (upstream reads this fixed path: the
    ConfigMap ``maintenance-config`` mounted at /etc/maintenance-policy); module upgrades to a
    version with ``requiresDowntime`` wait for the Kyma's next window (docs/maintenance-windows.md).
    Missing or invalid: such upgrades go Error and gauge
    ``lifecycle_mgr_maintenance_window_config_read_success`` is 0."""
    min_maintenance_window_size: Annotated[float, Field(ge=0)] = DEFAULT_MIN_WINDOW_SIZE
    """Seconds an ongoing maintenance window must still last to be used (upstream
    ``--min-maintenance-window-size``, 20m)."""
    module_upgrade_rollout_max_delay: Annotated[float, Field(ge=0)] = 300.0
    """Seconds over which a changed ModuleReleaseMeta or ModuleTemplate reaches the Kymas using it,
    spread at random so a version bump does not upgrade every runtime at once (upstream 5 min);
    0: at once."""
    kyma_runtime_checks_after_write: Annotated[float, Field(ge=0)] = 1.0
    """Seconds after a Kyma reconcile woken by edits alone (a runtime event, a KCP Kyma edit,
    Manifest changes) wrote Manifests until the runtime's agent and module catalog are checked, so
    that those reads do not compete with the new modules' install (timers, catalog changes, the
    agent's health and access Secrets always check at once); 0: in the same reconcile."""
    kyma_healthy_interval: Seconds = 1800.0
    """Safety-net reconcile of a Ready Kyma whose agent sends heartbeats (events do the rest)."""
    kyma_unhealthy_interval: Seconds = 300.0
    """Safety-net reconcile while a runtime's agent is silent or not Ready (upstream's 5 minutes)."""
    failure_base_delay: Seconds = 5.0
    """First retry delay after a failed reconcile (doubles per failure)."""
    failure_max_delay: Seconds = 30.0
    """Longest retry delay after repeated failures."""
    watcher_workers: Annotated[int, Field(ge=1, le=16)] = 1
    """Watchers reconciled concurrently."""
    manifest_controller_enabled: bool = True
    """Run the Manifest controller (install modules into runtimes); off: Manifest events are only counted."""
    manifest_workers: Annotated[int, Field(ge=1, le=64)] = 4
    """Manifests reconciled concurrently (never the same Manifest twice at once)."""
    manifest_processing_interval: Seconds = 5.0
    """Readiness poll of a Processing/Deleting Manifest (upstream 5 s)."""
    manifest_apply_concurrency: Annotated[int, Field(ge=1, le=256)] = DEFAULT_APPLY_CONCURRENCY
    """Objects of one Manifest applied to its runtime concurrently (bounded, unlike upstream)."""
    manifest_workload_watches: Annotated[int, Field(ge=0, le=100_000)] = DEFAULT_WORKLOAD_WATCHES
    """Rolling-out module workloads (Deployment, StatefulSet) followed by a short watch at once, so a
    Processing Manifest turns Ready when its workload does, not at the next poll; each holds one
    connection to its runtime's API server; 0: the poll alone."""
    runtime_client_idle_ttl: Seconds = DEFAULT_IDLE_TTL
    """Seconds after which an unused runtime API client is closed with its connections (rebuilt from
    the access Secret on the runtime's next reconcile)."""
    oci_registry_cred_secret: str | None = None
    """Name of a ``kubernetes.io/dockerconfigjson`` Secret in ``namespace`` with the module registry's
    credentials (upstream ``--oci-registry-cred-secret``); its one ``auths`` entry is also the
    registry that descriptors of upstream-form ModuleTemplates (``spec.descriptor: {}``) are fetched
    from. Not together with ``--oci-registry-host``."""
    oci_registry_host: str | None = None
    """Registry ``host[:port][/path]`` that descriptors of upstream-form ModuleTemplates are fetched
    from, without credentials (upstream ``--oci-registry-host``; ``http://host`` or a host in
    ``--oci-insecure-registries``: plain HTTP). Not together with ``--oci-registry-cred-secret``."""
    modules_repository_subpath: str = ""
    """Path below the registry where component versions are stored (upstream
    ``--modules-repository-subpath``): ``<registry>/<subpath>/component-descriptors/<component>``."""
    descriptor_fetch_concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    """Component descriptors fetched from the module registry at once (one fetch per component
    version however many Kymas wait for it)."""
    descriptor_cache_size: Annotated[int, Field(ge=1)] = 512
    """Component versions whose fetched descriptors are kept in memory (shared by all Kymas)."""
    descriptor_retry_base_delay: Seconds = 1.0
    """Seconds before a failed descriptor fetch is tried again (doubles per failure in a row)."""
    descriptor_retry_max_delay: Seconds = 60.0
    """Longest delay between attempts to fetch a descriptor that keeps failing."""
    oci_insecure_registries: tuple[str, ...] = ()
    """``host:port`` of module registries and chart repositories reached over plain HTTP (never implied)."""
    oci_ca_file: Path | None = None
    """Extra CA bundle (PEM) trusted for module registries."""
    module_cache_dir: Path | None = None
    """Where pulled raw manifests and chart archives are cached by digest; unset: ``kyma-operator-modules``
    in the temp dir."""
    module_verification_key: Path | None = None
    """RSA public key (PEM): install only component versions whose OCM signature it verifies."""
    helm_binary: Path | None = None
    """The ``helm`` CLI (v3.8+ or v4) that renders ``helm-chart`` Manifests with ``helm template``;
    unset: ``helm`` on the PATH."""
    helm_timeout: Seconds = 30.0
    """Seconds one ``helm template`` may run before it is killed (the Manifest then fails)."""
    helm_concurrency: Annotated[int, Field(ge=1, le=16)] = 2
    """``helm template`` processes running at once (each renders one chart)."""
    helm_render_cache_size: Annotated[int, Field(ge=0)] = 256
    """Chart renders kept in memory by chart digest, release and values, shared by all Manifests
    (0: render on every reconcile)."""
    helm_chart_resolve_interval: Annotated[float, Field(ge=0)] = 300.0
    """Seconds a chart version's resolved archive digest is reused before the OCI registry or chart
    repository index is asked again (a ``ref`` digest pins it for good)."""

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("webhook_url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("https://"):
            raise ValueError("must start with https:// (the API server only calls webhooks over TLS)")
        return value

    @field_validator("webhook_urls")
    @classmethod
    def _https_each(cls, value: dict[str, str]) -> dict[str, str]:
        for kyma, url in value.items():
            if not url.startswith("https://"):
                raise ValueError(f"{kyma}: must start with https://")
        return value

    @field_validator("kcp_addr")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"must be host:port, got {value!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> OperatorConfig:
        if self.failure_max_delay < self.failure_base_delay:
            raise ValueError("failure_max_delay must not be smaller than failure_base_delay")
        check_lease_timings(
            self.leader_elect_lease_duration, self.leader_elect_renew_deadline, self.leader_elect_retry_period
        )
        if self.oci_registry_host and self.oci_registry_cred_secret:
            raise ValueError(
                "oci_registry_host and oci_registry_cred_secret must not both be set (upstream: the "
                "registry is the Secret's when it needs credentials)"
            )
        if self.descriptor_retry_max_delay < self.descriptor_retry_base_delay:
            raise ValueError(
                "descriptor_retry_max_delay must not be smaller than descriptor_retry_base_delay"
            )
        if 0 < self.handoff_key_rotation_interval < MIN_ROTATION_INTERVAL:
            raise ValueError(
                f"handoff_key_rotation_interval must be 0 (off) or at least {MIN_ROTATION_INTERVAL:.0f} s"
            )
        if "shard_scoped_caches" in self.model_fields_set and self.shard_scoped_caches and not self.sharding:
            raise ValueError("shard_scoped_caches needs sharding (--sharding)")
        if self.kyma_healthy_interval < self.kyma_unhealthy_interval:
            raise ValueError("kyma_healthy_interval must not be smaller than kyma_unhealthy_interval")
        return self

    # -- the controllers' typed sub-configs (each flag goes to one place) -------------------------

    def _controller_base(self) -> dict[str, Any]:
        """The settings both reconciling controllers share (``common.config.ControllerConfig``)."""
        return {
            "healthy_interval": self.kyma_healthy_interval,
            "unhealthy_interval": self.kyma_unhealthy_interval,
            "failure_base_delay": self.failure_base_delay,
            "failure_max_delay": self.failure_max_delay,
            "event_throttle_window": self.event_throttle_window,
        }

    def leader_election_config(self) -> LeaderElectionConfig | None:
        """The leader Lease's settings; None without ``--leader-elect``."""
        if not self.leader_elect:
            return None
        return LeaderElectionConfig(
            lease_name=self.leader_election_id,
            lease_namespace=self.namespace,
            lease_duration=self.leader_elect_lease_duration,
            renew_deadline=self.leader_elect_renew_deadline,
            retry_period=self.leader_elect_retry_period,
        )

    def sharding_config(self) -> ShardingConfig:
        """The shard coordinator's settings (shard Leases use the leader election's timings)."""
        host = os.environ.get("POD_IP") or self.handoff_host
        address = self.internal_address or f"http://{host}:{self.handoff_port}"
        return ShardingConfig(
            namespace=self.namespace,
            replica_id=self.replica_id or default_replica_id(),
            address=address,
            shards=self.shards,
            lease_duration=self.leader_elect_lease_duration,
            renew_deadline=self.leader_elect_renew_deadline,
            retry_period=self.leader_elect_retry_period,
            request_timeout=request_timeout_for(self.leader_elect_retry_period),
        )

    def kyma_controller(self) -> KymaControllerConfig:
        return KymaControllerConfig(
            **self._controller_base(),
            namespace=self.namespace,
            sync_namespace=self.sync_namespace,
            workers=self.kyma_workers,
            modules=self.kyma_modules,
            restricted_modules=self.restricted_modules,
            module_rollout_max_delay=self.module_upgrade_rollout_max_delay,
            checks_after_write=self.kyma_runtime_checks_after_write,
            heartbeat_sweep_interval=self.heartbeat_sweep_interval,
            skr_image_pull_secret=self.skr_image_pull_secret,
            maintenance_policy_file=self.maintenance_policy_file,
            min_maintenance_window_size=self.min_maintenance_window_size,
        )

    def descriptor_source(self) -> DescriptorSourceConfig:
        """Where descriptors of upstream-form ModuleTemplates come from (the module registry)."""
        return DescriptorSourceConfig(
            registry_host=self.oci_registry_host,
            credentials_secret=self.oci_registry_cred_secret,
            namespace=self.namespace,
            subpath=self.modules_repository_subpath,
            insecure_registries=self.oci_insecure_registries,
            ca_file=self.oci_ca_file,
            concurrency=self.descriptor_fetch_concurrency,
            cache_size=self.descriptor_cache_size,
            retry_base=self.descriptor_retry_base_delay,
            retry_max=self.descriptor_retry_max_delay,
        )

    def manifest_controller(self) -> ManifestControllerConfig:
        return ManifestControllerConfig(
            **self._controller_base(),
            namespace=self.namespace,
            sync_namespace=self.sync_namespace,
            workers=self.manifest_workers,
            processing_interval=self.manifest_processing_interval,
            apply_concurrency=self.manifest_apply_concurrency,
            workload_watches=self.manifest_workload_watches,
            skr_image_pull_secret=self.skr_image_pull_secret,
            inject_data_from_kcp=names.DEPLOYER_MODULE_NAME in self.restricted_modules,
        )


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def _shape(annotation: Any) -> str:
    """``bool``, ``dict``, ``tuple`` or ``scalar`` for a field annotation (unwrapping ``X | None``)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _shape(inner[0]) if len(inner) == 1 else "scalar"
    if origin is Annotated:
        return _shape(typing.get_args(annotation)[0])
    if annotation is bool:
        return "bool"
    if origin is dict:
        return "dict"
    if origin is tuple:
        return "tuple"
    return "scalar"


def _pairs(items: Sequence[str], where: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{where}: expected key=value, got {item!r}")
        result[key.strip()] = value.strip()
    return result


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if value is None or value == {} or value == ():
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, StrEnum):
        return value.value
    return str(value)


def _help(name: str, field: FieldInfo) -> str:
    """One line per flag: what it does, its default and its environment variable."""
    what = " ".join((field.description or "").split())
    env = env_name(name) + (", or KUBECONFIG" if name == "kubeconfig" else "")
    # argparse expands %-formats in help texts.
    return f"{what} (default: {_default(field)}; env {env})".replace("%", "%%")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kyma-operator",
        description="Kyma lifecycle operator: Kyma, Manifest and Watcher controllers, SKR event listener.",
        epilog=f"Every flag can also be set as environment variable {ENV_PREFIX}<FLAG_NAME>.",
    )
    for name, field in OperatorConfig.model_fields.items():
        shape = _shape(field.annotation)
        help_text = _help(name, field)
        if shape == "bool":
            parser.add_argument(
                flag_name(name), dest=name, nargs="?", const="true", default=argparse.SUPPRESS, help=help_text
            )
        elif shape in ("dict", "tuple"):
            parser.add_argument(
                flag_name(name), dest=name, action="append", default=argparse.SUPPRESS, help=help_text
            )
        else:
            parser.add_argument(flag_name(name), dest=name, default=argparse.SUPPRESS, help=help_text)
    return parser


def load_config(argv: Sequence[str], environ: Mapping[str, str]) -> OperatorConfig:
    """Environment first, flags on top; raises ``ConfigError`` (argparse errors exit as usual)."""
    fields = OperatorConfig.model_fields
    values: dict[str, Any] = {}
    if environ.get("KUBECONFIG", "").strip():
        values["kubeconfig"] = environ["KUBECONFIG"].strip()
    for name, field in fields.items():
        raw = environ.get(env_name(name), "").strip()
        if not raw:
            continue
        shape = _shape(field.annotation)
        if shape == "dict":
            values[name] = _pairs(_split(raw), env_name(name))
        elif shape == "tuple":
            values[name] = tuple(_split(raw))
        else:
            values[name] = raw
    flags = vars(build_parser().parse_args(list(argv)))
    for name, raw in flags.items():
        shape = _shape(fields[name].annotation)
        if shape == "dict":
            values[name] = _pairs([p for item in raw for p in _split(item)], flag_name(name))
        elif shape == "tuple":
            values[name] = tuple(p for item in raw for p in _split(item))
        else:
            values[name] = raw
    try:
        return OperatorConfig.model_validate(values)
    except ValidationError as error:
        problems = []
        for item in error.errors(include_url=False):
            loc = item["loc"]
            key = str(loc[0]) if loc else ""
            where = f"{flag_name(key)} / {env_name(key)}" if key in fields else "configuration"
            problems.append(f"{where}: {item['msg'].removeprefix('Value error, ')}")
        raise ConfigError("invalid operator configuration: " + "; ".join(problems)) from None
