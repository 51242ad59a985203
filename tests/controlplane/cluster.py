"""Start and stop real local Kubernetes control planes: one etcd and N kube-apiservers on 127.0.0.1.

Each API server gets its own etcd prefix, serving certificate, client CA and admin kubeconfig, so a
KCP and several SKRs run side by side from one etcd. Everything binds to 127.0.0.1 on free ports.
Children are started in their own process group with a parent-death signal, and ``ControlPlane``
stops them on exit, on exceptions and on Ctrl-C; a killed parent does not leave them running.

An API server alone stores objects and nothing acts on them: a Deployment never gets a ReplicaSet,
an owner's deletion leaves its dependents, a deleted namespace stays Terminating. That is what most
tests want (fast, nothing moves behind their back). A *living* cluster (``living=`` names, see
``living.py``) adds kube-controller-manager, kube-scheduler and kwok with a few simulated nodes to
an API server, so workloads roll out and become Ready, garbage collection and namespace deletion
work; it costs a few seconds and ~150 MiB more per cluster, so only the tests and the local run
that need it ask for it.
"""

from __future__ import annotations

import contextlib
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tests.controlplane import living, pki
from tests.controlplane.binaries import Binaries, LivingBinaries, find_or_build, find_or_build_living
from tests.controlplane.living import COMPONENTS as LIVING_COMPONENTS
from tests.controlplane.process import ControlPlaneError, Process, free_port

__all__ = ["APIServer", "ControlPlane", "ControlPlaneError", "free_port", "rss_bytes", "running"]


@dataclass
class APIServer:
    """A running kube-apiserver: where it listens and how to reach it as cluster admin."""

    name: str
    port: int
    ca_pem: bytes
    kubeconfig: bytes
    kubeconfig_path: Path
    admin: pki.KeyPair
    process: Process = field(repr=False)
    components: dict[str, Process] = field(default_factory=dict, repr=False)
    """Processes beside the API server in a living cluster, by program name."""

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def living(self) -> bool:
        return bool(self.components)

    def pids(self) -> dict[str, int]:
        """Every running process of this cluster by program name (kube-apiserver first)."""
        processes = {"kube-apiserver": self.process, **self.components}
        return {name: p.pid for name, p in processes.items() if p.pid is not None}

    def ssl_context(self) -> ssl.SSLContext:
        """An SSL context trusting this server and presenting the admin client certificate."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            self.admin.write(cert, key)
            context.load_cert_chain(cert, key)
        return context

    def is_ready(self, context: ssl.SSLContext) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False


class ControlPlane:
    """One etcd plus one kube-apiserver per requested name; the ``living`` ones come alive.

    Use as a context manager (or call ``start``/``stop``)::

        with ControlPlane(["kcp", "skr-a", "skr-b"]) as cp:
            cp["kcp"].kubeconfig_path

    ``living``: ``True`` for all, or the names whose API server gets kube-controller-manager,
    kube-scheduler and kwok with ``nodes`` simulated nodes; ``start`` returns once their controllers
    run and every node is Ready and schedulable. ``living_args``: extra flags per living component
    (``kube-controller-manager``, ``kube-scheduler``, ``kwok``), e.g. short node-monitor periods.
    """

    def __init__(
        self,
        names: Sequence[str],
        *,
        binaries: Binaries | None = None,
        workdir: Path | None = None,
        extra_apiserver_args: dict[str, list[str]] | None = None,
        ready_timeout: float = 90.0,
        living: bool | Collection[str] = False,
        nodes: int = 3,
        living_binaries: LivingBinaries | None = None,
        living_args: dict[str, list[str]] | None = None,
    ) -> None:
        if not names or len(set(names)) != len(names):
            raise ValueError("need at least one API server name, all distinct")
        self._names = list(names)
        self._living = set(self._names) if living is True else set(living or ())
        unknown = self._living - set(self._names)
        if unknown:
            raise ValueError(f"living clusters must be among the names: {', '.join(sorted(unknown))}")
        if self._living and nodes < 1:
            raise ValueError("a living cluster needs at least one node")
        unknown_programs = set(living_args or {}) - set(LIVING_COMPONENTS)
        if unknown_programs:
            allowed, given = ", ".join(LIVING_COMPONENTS), ", ".join(sorted(unknown_programs))
            raise ValueError(f"living_args are for {allowed}, not {given}")
        self._living_args = dict(living_args or {})
        self._nodes = nodes
        self._binaries = binaries
        self._living_binaries = living_binaries
        self._authorities: dict[str, pki.CertificateAuthority] = {}
        self._own_workdir = workdir is None
        self._workdir = workdir or Path(tempfile.mkdtemp(prefix="kyma-controlplane-"))
        self._extra = extra_apiserver_args or {}
        self._ready_timeout = ready_timeout
        self._processes: list[Process] = []
        self.servers: dict[str, APIServer] = {}
        self.etcd_url = ""

    def __getitem__(self, name: str) -> APIServer:
        return self.servers[name]

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def etcd_pid(self) -> int | None:
        """The shared etcd's pid (it is always the first process started)."""
        return self._processes[0].pid if self._processes else None

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        binaries = self._binaries or find_or_build()
        etcd = self._start_etcd(binaries)
        self._wait(lambda: self._etcd_ready(), [etcd], "etcd")
        for name in self._names:
            self.servers[name] = self._start_apiserver(binaries, name)
        for name, server in self.servers.items():
            context = server.ssl_context()
            self._wait(lambda s=server, c=context: s.is_ready(c), [etcd, server.process], name)
        if not self._living:
            return
        tools = self._living_binaries or find_or_build_living()
        started = [
            living.start_components(
                tools,
                self.servers[name],
                self._authorities[name],
                self._workdir / name,
                nodes=self._nodes,
                processes=self._processes,
                component_args=self._living_args,
            )
            for name in self._names
            if name in self._living
        ]
        for cluster in started:
            processes = [etcd, cluster.server.process, *cluster.server.components.values()]
            self._wait(cluster.ready, processes, f"living cluster {cluster.server.name}")

    def _wait(self, ready: object, processes: list[Process], what: str) -> None:
        deadline = time.monotonic() + self._ready_timeout
        delay = 0.05
        while True:
            for process in processes:
                process.check_alive()
            if callable(ready) and ready():
                return
            if time.monotonic() > deadline:
                # one process waited for: its log; a living cluster: each component's last lines
                tail = (
                    processes[-1].log_tail()
                    if len(processes) <= 2
                    else "\n".join(f"--- {p.name}:\n{p.log_tail(10)}" for p in processes[1:])
                )
                raise ControlPlaneError(
                    f"{what} not ready within {self._ready_timeout:.0f}s; log tail:\n{tail}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _start_etcd(self, binaries: Binaries) -> Process:
        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        data = self._workdir / "etcd"
        data.mkdir(parents=True, exist_ok=True)
        process = Process(
            "etcd",
            [
                str(binaries.etcd),
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            self._workdir / "etcd.log",
        )
        process.start()
        self._processes.append(process)
        return process

    def _etcd_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def _start_apiserver(self, binaries: Binaries, name: str) -> APIServer:
        directory = self._workdir / name
        directory.mkdir(parents=True, exist_ok=True)
        ca = pki.CertificateAuthority(f"{name}-ca")
        self._authorities[name] = ca
        serving = ca.issue(
            "kube-apiserver",
            dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ip_addresses=("127.0.0.1",),
            server=True,
        )
        admin = ca.issue("admin", organization="system:masters", client=True)
        sa_private, sa_public = pki.service_account_key_pem()
        (directory / "ca.crt").write_bytes(ca.cert_pem)
        serving.write(directory / "apiserver.crt", directory / "apiserver.key")
        (directory / "sa.key").write_bytes(sa_private)
        (directory / "sa.pub").write_bytes(sa_public)
        port = free_port()
        kubeconfig = pki.kubeconfig(name, f"https://127.0.0.1:{port}", ca.cert_pem, admin)
        kubeconfig_path = directory / "kubeconfig"
        kubeconfig_path.write_bytes(kubeconfig)
        kubeconfig_path.chmod(0o600)
        argv = [
            str(binaries.kube_apiserver),
            f"--etcd-servers={self.etcd_url}",
            f"--etcd-prefix=/{name}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={directory}",
            f"--tls-cert-file={directory / 'apiserver.crt'}",
            f"--tls-private-key-file={directory / 'apiserver.key'}",
            f"--client-ca-file={directory / 'ca.crt'}",
            f"--service-account-key-file={directory / 'sa.pub'}",
            f"--service-account-signing-key-file={directory / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            "--endpoint-reconciler-type=none",
            "--v=1",
            *self._extra.get(name, []),
        ]
        process = Process(f"kube-apiserver {name}", argv, directory / "kube-apiserver.log")
        process.start()
        self._processes.append(process)
        return APIServer(name, port, ca.cert_pem, kubeconfig, kubeconfig_path, admin, process)

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        if self._own_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ControlPlaneError(f"no VmRSS for pid {pid}")


@contextlib.contextmanager
def running(names: Sequence[str], **kwargs: object) -> Iterator[ControlPlane]:
    plane = ControlPlane(names, **kwargs)  # type: ignore[arg-type]
    with plane:
        yield plane
