"""The scale benchmark's own tools: the resync window read from a reconcile trace, the CPU spent in
it, the clone of a stored Kyma (``benchmarks/resync_window.py``, ``benchmarks/etcd_fleet.py``) and
the Lease timings it passes to the operators (``benchmarks/scale_bench.py``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks.etcd_fleet import Cloner, Seed, kyma_key, manifest_key
from benchmarks.lease_probe import summarize
from benchmarks.resync_window import (
    TraceReader,
    cpu_between,
    idle_rate,
    in_reconciles,
    replica_windows,
    resync_window,
)
from benchmarks.scale_bench import DEPLOYMENT_TIMINGS, RunSpec, lease_flags, lease_timings
from kyma_operator.api import names
from kyma_operator.runtime.shardmap import SHARD_LABEL, shard_of


def _line(event: str, subject: str, replica: str, seconds: float) -> str:
    return f"{event} kyma {subject} {replica} {int(seconds * 1e9)}\n"


def test_resync_window_is_the_reconciles_after_the_interval(tmp_path: Path) -> None:
    trace = TraceReader(tmp_path / "trace")
    with (tmp_path / "trace").open("w") as out:
        for i, kyma in enumerate(("ns/a", "ns/b")):  # start-up round
            out.write(_line("start", kyma, "r0", 1 + i))
            out.write(_line("end", kyma, "r0", 1.5 + i))
        out.write("acquired shard 3 r0 5\n")  # not a Kyma line
        out.write(_line("start", "ns/a", "r0", 100))
        out.write(_line("end", "ns/a", "r0", 100.5))
    trace.read()
    assert resync_window(trace, 2, since=90, start_up_done=3) is None  # b not resynced yet
    with (tmp_path / "trace").open("a") as out:
        out.write(_line("start", "ns/b", "r1", 101))
        out.write(_line("end", "ns/b", "r1", 102))
    trace.read()
    window = resync_window(trace, 2, since=90, start_up_done=3)
    assert window is not None
    assert (window.opened, window.closed, window.reconciles, window.before) == (
        100,
        102,
        {"r0": 1, "r1": 1},
        0,
    )


def test_staggered_windows_are_each_replicas_own_resync_of_the_kymas_it_kept(tmp_path: Path) -> None:
    trace = TraceReader(tmp_path / "trace")
    with (tmp_path / "trace").open("w") as out:
        out.write(_line("start", "ns/a", "r0", 1))  # start-up: r0 reconciles a and b, then r1 takes b
        out.write(_line("end", "ns/a", "r0", 1.5))
        out.write(_line("start", "ns/b", "r0", 2))
        out.write(_line("end", "ns/b", "r0", 2.5))
        out.write(_line("start", "ns/b", "r1", 3))
        out.write(_line("end", "ns/b", "r1", 3.5))
        # a reconcile by r0 of b, which it no longer keeps: counted as r0's work, not waited for
        out.write(_line("start", "ns/b", "r0", 90))
        out.write(_line("end", "ns/b", "r0", 90.1))
        out.write(_line("start", "ns/a", "r0", 91))
        out.write(_line("end", "ns/a", "r0", 91.5))
    trace.read()
    since = {"r0": 90.0, "r1": 140.0}
    assert replica_windows(trace, since, start_up_done=4) is None  # r1 has not resynced b yet
    with (tmp_path / "trace").open("a") as out:
        out.write(_line("start", "ns/b", "r1", 141))
        out.write(_line("end", "ns/b", "r1", 142))
    trace.read()
    windows = replica_windows(trace, since, start_up_done=4)
    assert windows is not None
    r0, r1 = windows["r0"], windows["r1"]
    assert (r0.opened, r0.closed, r0.reconciles, r0.before) == (90, 91.5, {"r0": 2}, 0)
    assert (r1.opened, r1.closed, r1.reconciles, r1.before) == (141, 142, {"r1": 1}, 0)


def test_reconciles_cpu_is_read_from_end_lines_within_the_window(tmp_path: Path) -> None:
    trace = TraceReader(tmp_path / "trace")
    with (tmp_path / "trace").open("w") as out:
        out.write(_line("start", "ns/a", "r0", 1))
        out.write(_line("end", "ns/a", "r0", 1.5).rstrip("\n") + " 9000000\n")  # start-up: not in it
        for i, (kyma, cpu_ns) in enumerate((("ns/a", 1_000_000), ("ns/b", 3_000_000), ("ns/c", 2_000_000))):
            out.write(_line("start", kyma, "r0", 100 + i))
            out.write(_line("end", kyma, "r0", 100.5 + i).rstrip("\n") + f" {cpu_ns}\n")
        out.write(_line("start", "ns/d", "r1", 101))
        out.write(_line("end", "ns/d", "r1", 101.5).rstrip("\n") + " 7000000\n")  # another replica
        out.write(_line("end", "ns/e", "r0", 101.7))  # an older operator's end line: no CPU
        out.write("end kyma ns/f r0 101800000000 12 13\n")  # malformed: skipped
    trace.read()
    assert len(trace.ends) == 6  # the five- and six-field end lines; not the malformed one
    spent = in_reconciles(trace, "r0", 100, 103)
    assert spent is not None
    assert (spent.reconciles, spent.median) == (3, 0.002)
    assert spent.total == pytest.approx(0.006)
    assert spent.busy == pytest.approx(0.002)  # 6 ms of reconciles in a 3 s window
    wide, narrow = in_reconciles(trace, "r1", 100, 103), in_reconciles(trace, "r1", 101.5, 101.5)
    assert wide is not None and narrow is not None
    assert (wide.reconciles, wide.median) == (narrow.reconciles, narrow.median) == (1, 0.007)
    assert narrow.busy is None  # a window of no length has no share
    assert in_reconciles(trace, "r2", 100, 103) is None


def test_cpu_between_takes_the_samples_around_the_window() -> None:
    samples = [(0.0, 1.0), (10.0, 1.5), (11.0, 3.0), (12.0, 4.0), (13.0, 4.1)]
    assert cpu_between(samples, 10.5, 11.5) == pytest.approx(2.5)  # 10.0 -> 12.0
    assert idle_rate(samples, 0.0, 10.0) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="no CPU sample"):
        cpu_between(samples, 10.5, 20.0)


def _stored(index: int, shard: int, apply_owns_shard: bool) -> tuple[dict[str, bytes], str]:
    name, runtime, uid = f"kyma-{index:05d}", f"rt-{index:05d}", f"kyma-uid-{index}"
    kyma = {
        "kind": "Kyma",
        "metadata": {
            "name": name,
            "uid": uid,
            "finalizers": [names.KYMA_FINALIZER],
            "labels": {SHARD_LABEL: str(shard), names.RUNTIME_ID_LABEL: runtime},
        },
        "status": {"state": "Ready", "modules": [{"manifest": f"{name}-module-alpha-1"}]},
    }
    labels: dict[str, object] = {f"f:{SHARD_LABEL}": {}} if apply_owns_shard else {}
    manifest = {
        "kind": "Manifest",
        "metadata": {
            "name": f"{name}-module-alpha-1",
            "uid": f"manifest-uid-{index}",
            "labels": {SHARD_LABEL: str(shard), names.KYMA_NAME_LABEL: name},
            "ownerReferences": [{"name": name, "uid": uid}],
            "managedFields": [
                {
                    "operation": "Apply",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": labels, "f:ownerReferences": {f'k:{{"uid":"{uid}"}}': {}}}
                    },
                }
            ],
        },
    }
    stored = {
        kyma_key("/kcp", "ns", name): json.dumps(kyma).encode(),
        manifest_key("/kcp", "ns", manifest["metadata"]["name"]): json.dumps(manifest).encode(),  # type: ignore[index]
    }
    return stored, name


def test_a_clone_is_its_seed_with_name_runtime_uids_and_shard_replaced() -> None:
    zero, _ = _stored(0, shard_of("rt-00000", 16), apply_owns_shard=False)
    one, _ = _stored(1, shard_of("rt-00001", 16), apply_owns_shard=True)
    stored = {**zero, **one}
    cloner = Cloner(Seed.read(stored, "/kcp", "ns", 0), "/kcp", "ns")
    cloner.verify(Seed.read(stored, "/kcp", "ns", 1))  # differs only in uids and who owns the shard label
    (kyma_at, kyma), (manifest_at, manifest) = [(k, json.loads(v)) for k, v in cloner.clone(42)]
    assert kyma_at == kyma_key("/kcp", "ns", "kyma-00042")
    assert manifest_at == manifest_key("/kcp", "ns", "kyma-00042-module-alpha-1")
    assert kyma["metadata"]["labels"] == {
        SHARD_LABEL: str(shard_of("rt-00042", 16)),
        names.RUNTIME_ID_LABEL: "rt-00042",
    }
    assert kyma["status"]["modules"] == [{"manifest": "kyma-00042-module-alpha-1"}]
    assert kyma["metadata"]["uid"] not in ("kyma-uid-0", "kyma-uid-1")
    assert manifest["metadata"]["ownerReferences"] == [{"name": "kyma-00042", "uid": kyma["metadata"]["uid"]}]
    owned = manifest["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:ownerReferences"]
    assert owned == {f'k:{{"uid":"{kyma["metadata"]["uid"]}"}}': {}}


def test_a_clone_for_another_shard_count_carries_that_count_s_shard() -> None:
    stored, _ = _stored(0, shard_of("rt-00000", 48), apply_owns_shard=False)
    cloner = Cloner(Seed.read(stored, "/kcp", "ns", 0), "/kcp", "ns", shards=48)
    ((_, kyma), (_, manifest)) = [(k, json.loads(v)) for k, v in cloner.clone(42)]
    want = str(shard_of("rt-00042", 48))
    assert want != str(shard_of("rt-00042", 16))  # else this would not tell the counts apart
    assert kyma["metadata"]["labels"][SHARD_LABEL] == want == manifest["metadata"]["labels"][SHARD_LABEL]
    assert RunSpec.parse("3scoped", False, 48).shards == 48
    assert RunSpec.parse("3", True).label() == "3 x --sharding --shard-scoped-caches"
    assert RunSpec.parse("3plain", True, 48).label() == "3 x --sharding --shards=48"


def test_a_clone_that_differs_from_its_real_seed_is_refused() -> None:
    zero, _ = _stored(0, shard_of("rt-00000", 16), apply_owns_shard=False)
    one, name = _stored(1, shard_of("rt-00001", 16), apply_owns_shard=False)
    kyma = json.loads(one[kyma_key("/kcp", "ns", name)])
    kyma["status"]["state"] = "Warning"
    one[kyma_key("/kcp", "ns", name)] = json.dumps(kyma).encode()
    cloner = Cloner(Seed.read({**zero, **one}, "/kcp", "ns", 0), "/kcp", "ns")
    with pytest.raises(ValueError, match=r"status\.state"):
        cloner.verify(Seed.read({**zero, **one}, "/kcp", "ns", 1))


def test_an_unconverged_seed_is_refused() -> None:
    stored, name = _stored(0, 3, apply_owns_shard=False)
    kyma = json.loads(stored[kyma_key("/kcp", "ns", name)])
    del kyma["metadata"]["finalizers"]
    stored[kyma_key("/kcp", "ns", name)] = json.dumps(kyma).encode()
    with pytest.raises(ValueError, match="not converged"):
        Cloner(Seed.read(stored, "/kcp", "ns", 0), "/kcp", "ns")


def test_lease_probe_summary_counts_slow_and_failed_renewals(tmp_path: Path) -> None:
    out = tmp_path / "probe"
    out.write_text("1.0 0.010 0.020 ok\n2.5 1.500 0.800 ok\n4.0 0 0 error:500\n9.0 4.000 2.000 ok\n")

    found = summarize(out)

    assert (found.attempts, found.over_2s, found.over_5s, found.errors) == (4, 2, 1, 1)
    assert found.slowest == pytest.approx(6.0)
    assert summarize(tmp_path / "missing").attempts == 0


def test_lease_timings_become_the_operators_flags_and_bad_ones_are_refused() -> None:
    def flags(timings: str | None, deployment: bool = False) -> list[str]:
        parsed = lease_timings(timings) if timings is not None else None
        return lease_flags(argparse.Namespace(lease_timings=parsed, deployment_timings=deployment))

    assert flags("60/40/5", deployment=True) == [
        "--leader-elect-lease-duration=60",
        "--leader-elect-renew-deadline=40",
        "--leader-elect-retry-period=5",
    ]
    assert flags(None, deployment=True) == list(DEPLOYMENT_TIMINGS) and flags(None) == []
    for bad in ("60/40", "60/40/x", "10/20/5", "60/40/40", "60/40/0"):
        with pytest.raises(argparse.ArgumentTypeError):
            lease_timings(bad)
