"""Component archives on disk: written whole or not at all, also by parallel writers of one folder."""

from __future__ import annotations

import threading
from pathlib import Path

from kyma_operator.modules.build import build_component
from kyma_operator.modules.componentarchive import read_archive, write_archive
from tests.registry.modules import sample_config, sample_manifests


def test_parallel_writers_of_one_archive_all_succeed_and_leave_one_whole_archive(tmp_path: Path) -> None:
    """``kyma module create -d shared`` run four times at once: replacing an existing archive takes
    two renames, and without the folder lock one writer moved another's archive away between
    them (FileNotFoundError), in 1 of 5 fresh-clone CI runs. Eight threads (renames release the
    GIL) write the same archive 25 times each."""
    raw, cr = sample_manifests("sample")
    config = sample_config("sample", "1.0.0")
    component = build_component(config, {"manifest.yaml": raw, "default-cr.yaml": cr})
    target = tmp_path / "shared"
    write_archive(target, component, config)
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(25):
                write_archive(target, component, config)
        except BaseException as exc:  # reported below, with every writer's
            failures.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    written, written_config = read_archive(target)
    assert written.descriptor == component.descriptor and written.blobs == component.blobs
    assert written_config == config
    assert sorted(path.name for path in tmp_path.iterdir()) == ["shared"], "no temporary folder left"
