"""Runtime agent: observes admission reviews in an SKR and delivers signed events to KCP."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("kyma-lifecycle")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"
