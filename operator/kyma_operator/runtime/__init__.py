"""A small asyncio controller runtime (informers, work queue, controllers, manager, leader election).

No Python library offers controller-runtime's model (targeted ``Request``s from any source into a
deduplicating, rate-limited queue; ``reconcile -> Result``; Lease leader election), so the operator
carries its own. ``KubeClient`` (httpx on the loop, ``runtime.kubeconfig``) is its one door to the API.
"""

from kyma_operator.runtime.backoff import ReconnectBackoff
from kyma_operator.runtime.clock import Clock, FakeClock, RealClock, settle
from kyma_operator.runtime.controller import (
    AnnotationsChanged,
    AnyOf,
    Controller,
    DeletionTimestampChanged,
    EnqueueForObject,
    EnqueueForOwner,
    EnqueueMapped,
    FuncPredicate,
    GenerationChanged,
    LabelsChanged,
    Predicate,
    Reconciler,
    RequestMapper,
    ResourceVersionChanged,
    StatusChanged,
    TerminalError,
)
from kyma_operator.runtime.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    KubeTransportError,
    MethodNotAllowed,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    UnsupportedMediaType,
    WatchListUnsupported,
)
from kyma_operator.runtime.informer import (
    EventHandler,
    FuncHandler,
    IndexFunc,
    Informer,
    ListWatcher,
    index_by_label,
    index_by_namespace,
    index_by_owner_uid,
    lean_object,
    object_key,
    strip_managed_fields,
)
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.kube import KubeClient, ObjectList, WatchEvent
from kyma_operator.runtime.leader import LeaderElectionConfig, LeaderElector
from kyma_operator.runtime.manager import LeaderElectionLost, Manager, ManagerFailed, Runnable
from kyma_operator.runtime.metrics import RuntimeMetrics
from kyma_operator.runtime.queue import QueueShutDown, WorkQueue
from kyma_operator.runtime.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.resources import Resource
from kyma_operator.runtime.source import Enqueuer, InformerSource, RunnableSource, Source
from kyma_operator.runtime.triggers import TriggerLog, current_triggers

__all__ = [
    "AlreadyExists",
    "AnnotationsChanged",
    "AnyOf",
    "BadRequest",
    "BucketRateLimiter",
    "Clock",
    "Conflict",
    "Controller",
    "DeletionTimestampChanged",
    "EnqueueForObject",
    "EnqueueForOwner",
    "EnqueueMapped",
    "Enqueuer",
    "EventHandler",
    "FakeClock",
    "Forbidden",
    "FuncHandler",
    "FuncPredicate",
    "GenerationChanged",
    "Gone",
    "IndexFunc",
    "Informer",
    "InformerSource",
    "Intake",
    "Invalid",
    "ItemExponentialFailureRateLimiter",
    "KubeClient",
    "KubeError",
    "KubeTransportError",
    "LabelsChanged",
    "LeaderElectionConfig",
    "LeaderElectionLost",
    "LeaderElector",
    "ListWatcher",
    "Manager",
    "ManagerFailed",
    "MaxOfRateLimiter",
    "MethodNotAllowed",
    "NotFound",
    "ObjectList",
    "Predicate",
    "QueueShutDown",
    "RateLimiter",
    "RealClock",
    "Reconciler",
    "ReconnectBackoff",
    "Request",
    "RequestMapper",
    "Resource",
    "ResourceVersionChanged",
    "Result",
    "Runnable",
    "RunnableSource",
    "RuntimeMetrics",
    "ServerError",
    "Source",
    "StatusChanged",
    "TerminalError",
    "TooManyRequests",
    "TriggerLog",
    "Unauthorized",
    "UnsupportedMediaType",
    "WatchEvent",
    "WatchListUnsupported",
    "WorkQueue",
    "current_triggers",
    "default_controller_rate_limiter",
    "index_by_label",
    "index_by_namespace",
    "index_by_owner_uid",
    "lean_object",
    "object_key",
    "settle",
    "strip_managed_fields",
]
