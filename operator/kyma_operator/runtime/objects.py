"""The one alias for a Kubernetes object as the API returns it: plain JSON in a dict.

Controllers pass objects around as dicts (informer caches, SSA bodies) and validate with pydantic
only at their boundaries; one name for that type keeps signatures readable and greppable.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
"""A Kubernetes object (or part of one) as decoded JSON."""
