"""The Helm hook policy: install/upgrade hooks become module objects, tests are left out,
delete/rollback hooks are reported as not run."""

from __future__ import annotations

from typing import Any

from kyma_operator.controllers.manifest.helm.hooks import apply_hook_policy, hook_events


def obj(kind: str, name: str, hook: str | None = None, namespace: str = "ns") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if hook is not None:
        meta["annotations"] = {"helm.sh/hook": hook}
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


def test_hook_events_are_split_trimmed_and_lower_cased() -> None:
    assert hook_events(obj("Job", "j", " Pre-Install , post-upgrade")) == ("pre-install", "post-upgrade")
    assert hook_events(obj("ConfigMap", "c")) == ()


def test_objects_without_hooks_pass_unchanged_and_in_order() -> None:
    objects = [obj("ConfigMap", "a"), obj("Service", "b")]
    report = apply_hook_policy(objects)
    assert report.objects == objects
    assert report.ok
    assert report.condition() == (True, "HooksSupported", "the chart has no hooks")


def test_install_and_upgrade_hooks_are_installed_as_module_objects() -> None:
    hook = obj("ConfigMap", "installed", "post-install,post-upgrade")
    report = apply_hook_policy([obj("ConfigMap", "a"), hook])
    assert report.objects[1] is hook
    ok, reason, message = report.condition()
    assert (ok, reason) == (True, "HooksSupported")
    assert "ConfigMap ns/installed (post-install, post-upgrade)" in message


def test_tests_are_left_out_without_a_warning() -> None:
    report = apply_hook_policy([obj("Pod", "t", "test"), obj("Pod", "old", "test-success")])
    assert report.objects == []
    ok, _, message = report.condition()
    assert ok
    assert "chart tests not installed: Pod ns/t (test), Pod ns/old (test-success)" in message


def test_delete_and_rollback_hooks_are_skipped_and_reported() -> None:
    report = apply_hook_policy(
        [obj("Job", "cleanup", "pre-delete"), obj("Job", "back", "post-rollback"), obj("ConfigMap", "keep")]
    )
    assert [o["metadata"]["name"] for o in report.objects] == ["keep"]
    ok, reason, message = report.condition()
    assert (ok, reason) == (False, "HooksSkipped")
    assert "Job ns/cleanup (pre-delete)" in message and "Job ns/back (post-rollback)" in message


def test_an_install_hook_that_is_also_a_delete_hook_is_installed_and_its_delete_part_reported() -> None:
    both = obj("Job", "both", "post-install,pre-delete")
    report = apply_hook_policy([both])
    assert report.objects == [both]
    assert report.skipped == ["Job ns/both (pre-delete)"]
    assert not report.ok


def test_unknown_hook_events_are_not_installed_and_reported() -> None:
    report = apply_hook_policy([obj("Job", "odd", "pre-instal")])
    assert report.objects == []
    assert not report.ok
    assert "Job ns/odd (pre-instal)" in report.condition()[2]
