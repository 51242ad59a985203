"""Runtime agent: observes admission reviews in an SKR and delivers signed events to KCP."""

from importlib import metadata as _metadata


def _version() -> str:
    """The installed distribution's version: the agent's own (``kyma-skr-watcher``, the image), or the
    whole project's (``kyma-lifecycle``, the development venv)."""
    for distribution in ("kyma-skr-watcher", "kyma-lifecycle"):
        try:
            return _metadata.version(distribution)
        except _metadata.PackageNotFoundError:
            continue
    return "0.0.0"  # pragma: no cover - running from a source tree


__version__ = _version()
