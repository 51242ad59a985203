"""The Manifest controller's look-again delay while the runtime removes what was deleted."""

from __future__ import annotations

from kyma_operator.controllers.manifest.reconciler import ManifestControllerConfig, removal_delay


def test_removal_is_watched_closely_at_first_then_every_second() -> None:
    config = ManifestControllerConfig()
    delays = [removal_delay(step, config.removal_poll_initial, config.removal_poll_max) for step in range(5)]
    assert delays == [0.2, 0.4, 0.8, 1.0, 1.0]
    assert removal_delay(10_000, 0.2, 5.0) == 5.0  # no overflow however long it waits
