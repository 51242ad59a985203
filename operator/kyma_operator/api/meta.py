"""Building blocks shared by all CRD models: the base model, ObjectMeta, Condition, LabelSelector, State.

Why: Kubernetes objects arrive as camelCase JSON in which API servers add fields we do not model
(managedFields, new API fields). Every kind needs the same rules to read such objects without losing
anything and to write them back without inventing values, so they are defined once here:

- camelCase aliases, Python names accepted too;
- unknown fields are kept and written back unchanged;
- ``to_object()`` writes a field only if it was present in the input, set by code, or differs from
  its default. Reading an object and writing it back therefore reproduces it exactly, and a model
  built in code does not claim server-side defaults it never set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from functools import cache
from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kyma_operator.api.names import ResourceInfo


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with second precision, as ``metav1.Time`` serialises."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# A ``metav1.Time``: timezone-aware on input, written as ``2026-11-21T10:00:00Z``.
Time = Annotated[AwareDatetime, PlainSerializer(format_time, return_type=str, when_used="json")]


class InvalidObjectError(ValueError):
    """An object does not match the model of its kind; the message names the object and the fields."""


class KubeModel(BaseModel):
    """Base of every model: camelCase aliases, unknown fields kept, defaults not invented on output."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    @model_serializer(mode="wrap")
    def _omit_untouched_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        fields_set = self.model_fields_set
        for name, alias, default in optional_fields(type(self)):
            if name in fields_set:
                continue
            key = alias if info.by_alias else name
            if key in data and getattr(self, name) == default:
                del data[key]
        return data


@cache
def optional_fields(model: type[BaseModel]) -> tuple[tuple[str, str, Any], ...]:
    """``(name, alias, default)`` of every field of ``model`` that has a default, computed once per
    model class; the defaults are only compared against, never handed out, so one instance each is
    enough.

    Why cached: pydantic's ``FieldInfo.get_default(call_default_factory=True)`` inspects the
    factory's signature on every call (``inspect.signature`` of ``list``/``dict`` parses their text
    signature), and every dump of every object paid that per defaulted field: 18 % of a resync
    reconcile's CPU (a py-spy profile, issue 28), and ``apply_body`` of the upstream Manifest
    fixture took 219 us against 33 us. Every factory here is deterministic (``list``, ``dict``,
    model classes); ``tests/unit/kyma_operator/api/test_meta.py`` holds the cache to pydantic's
    answer for every model."""
    return tuple(
        (name, field.alias or name, field.get_default(call_default_factory=True))
        for name, field in model.model_fields.items()
        if not field.is_required()
    )


class State(StrEnum):
    """Lifecycle state of Kymas, Manifests, Watchers and module entries (upstream ``shared.State``)."""

    PROCESSING = "Processing"
    DELETING = "Deleting"
    READY = "Ready"
    ERROR = "Error"
    EMPTY = ""
    WARNING = "Warning"
    UNMANAGED = "Unmanaged"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(KubeModel):
    """A standard ``metav1.Condition``."""

    type: str
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: Time
    observed_generation: int | None = None


def find_condition(conditions: Iterable[Condition], condition_type: str) -> Condition | None:
    return next((c for c in conditions if c.type == condition_type), None)


def set_condition(conditions: list[Condition], condition: Condition) -> bool:
    """Add or update ``condition`` in place, like ``meta.SetStatusCondition``; True if anything changed.

    The last transition time only moves when the status changes.
    """
    for index, existing in enumerate(conditions):
        if existing.type != condition.type:
            continue
        transition = (
            condition.last_transition_time
            if existing.status != condition.status
            else existing.last_transition_time
        )
        updated = condition.model_copy(update={"last_transition_time": transition})
        if updated == existing:
            return False
        conditions[index] = updated
        return True
    conditions.append(condition)
    return True


class LastOperation(KubeModel):
    operation: str
    last_update_time: Time | None = None


class LabelSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(KubeModel):
    key: str
    operator: LabelSelectorOperator
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> Self:
        with_values = self.operator in (LabelSelectorOperator.IN, LabelSelectorOperator.NOT_IN)
        if with_values and not self.values:
            raise ValueError(f"operator {self.operator.value} needs at least one value (key {self.key!r})")
        if not with_values and self.values:
            raise ValueError(f"operator {self.operator.value} takes no values (key {self.key!r})")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case LabelSelectorOperator.IN:
                return present and labels[self.key] in self.values
            case LabelSelectorOperator.NOT_IN:
                return not present or labels[self.key] not in self.values
            case LabelSelectorOperator.EXISTS:
                return present
            case LabelSelectorOperator.DOES_NOT_EXIST:
                return not present

    def to_query(self) -> str:
        values = ",".join(sorted(self.values))
        match self.operator:
            case LabelSelectorOperator.IN:
                return f"{self.key} in ({values})"
            case LabelSelectorOperator.NOT_IN:
                return f"{self.key} notin ({values})"
            case LabelSelectorOperator.EXISTS:
                return self.key
            case LabelSelectorOperator.DOES_NOT_EXIST:
                return f"!{self.key}"


class LabelSelector(KubeModel):
    """A ``metav1.LabelSelector``: all ``matchLabels`` and all ``matchExpressions`` must hold."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` are selected; an empty selector selects everything."""
        return all(labels.get(key) == value for key, value in self.match_labels.items()) and all(
            requirement.matches(labels) for requirement in self.match_expressions
        )

    def to_query(self) -> str:
        """The selector in the ``labelSelector`` query syntax of list and watch requests."""
        parts = [f"{key}={value}" for key, value in sorted(self.match_labels.items())]
        parts.extend(requirement.to_query() for requirement in self.match_expressions)
        return ",".join(parts)


class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    """The parts of ``metav1.ObjectMeta`` the controllers read or write; the rest is kept as is."""

    name: str = ""
    generate_name: str | None = None
    namespace: str = ""
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)


class KubeObject(KubeModel):
    """A whole object of one kind; subclasses set ``RESOURCE`` and declare ``spec``/``status``."""

    RESOURCE: ClassVar[ResourceInfo]

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @model_validator(mode="before")
    @classmethod
    def _default_type_meta(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if not (data.get("apiVersion") or data.get("api_version")):
                data["apiVersion"] = cls.RESOURCE.api_version
            if not data.get("kind"):
                data["kind"] = cls.RESOURCE.kind
        return data

    @model_validator(mode="after")
    def _check_type_meta(self) -> Self:
        if self.kind != self.RESOURCE.kind:
            raise ValueError(f"kind is {self.kind!r}, expected {self.RESOURCE.kind!r}")
        if not self.RESOURCE.accepts(self.api_version):
            raise ValueError(f"apiVersion {self.api_version!r} is not a version of {self.RESOURCE.crd_name}")
        return self

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Self:
        """Parse an object as returned by the API server; raises ``InvalidObjectError``."""
        try:
            return cls.model_validate(obj)
        except ValidationError as error:
            metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
            where = ""
            if isinstance(metadata, Mapping):
                where = f" {metadata.get('namespace') or ''}/{metadata.get('name') or ''}"
            problems = "; ".join(
                f"{'.'.join(str(part) for part in e['loc']) or '<object>'}: {e['msg']}"
                for e in error.errors()
            )
            raise InvalidObjectError(f"invalid {cls.RESOURCE.kind}{where}: {problems}") from error

    def to_object(self) -> dict[str, Any]:
        """The object as JSON-ready dict with camelCase keys (for create, update, apply)."""
        data: dict[str, Any] = self.model_dump(mode="json", by_alias=True)
        return data

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels

    @property
    def annotations(self) -> dict[str, str]:
        return self.metadata.annotations

    def is_deleting(self) -> bool:
        return self.metadata.deletion_timestamp is not None
