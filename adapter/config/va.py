"""The VariantAutoscaling custom resource (`llmd.ai/v1alpha1`), validated.

Spec fields follow seed 001 (scaleTargetRef, modelID, minReplicas 1, maxReplicas 2, variantCost "10.0");
status follows seed 002 (desiredOptimizedAlloc, actuation.applied, conditions).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from adapter.config.errors import describe
from adapter.config.names import INT32_MAX, ApiVersion, DnsLabel, DnsSubdomain, FreeText, Labels
from adapter.domain.errors import ManifestError
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import (
    Condition,
    ConditionType,
    DecisionPath,
    DesiredAlloc,
    Recommendation,
    VariantSpec,
    VariantStatus,
)
from adapter.domain.text import plain
from adapter.domain.timefmt import format_rfc3339, parse_rfc3339_s

GROUP = "llmd.ai"
VERSION = "v1alpha1"
KIND = "VariantAutoscaling"
PLURAL = "variantautoscalings"
ACCELERATOR_LABEL = "inference.optimization/acceleratorName"
SCALE_TARGET_KINDS = ("Deployment", "StatefulSet", "LeaderWorkerSet")
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)
MAX_VARIANT_COST = 1_000_000.0
"""Per replica-hour. The CRD only asks for a decimal string; a cost of 1e53 would make the exact optimizer's
coefficients meaningless (HiGHS treats 1e20 as infinite), so we bound it, like the simulator's scenarios do."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class ScaleTargetRef(_Strict):
    kind: Literal["Deployment", "StatefulSet", "LeaderWorkerSet"]
    name: DnsSubdomain = Field(min_length=1)
    api_version: ApiVersion = Field(default="apps/v1", alias="apiVersion")


class VASpec(_Strict):
    """The CRD's spec, with what Kubernetes would enforce on top (adapter.config.names): int32 replica bounds,
    object names, and ours on free text (no control characters) and on the cost (a bounded decimal)."""

    scale_target_ref: ScaleTargetRef = Field(alias="scaleTargetRef")
    model_id: FreeText = Field(alias="modelID", min_length=1)
    min_replicas: StrictInt = Field(default=1, ge=0, le=INT32_MAX, alias="minReplicas")
    max_replicas: StrictInt = Field(default=2, ge=1, le=INT32_MAX, alias="maxReplicas")
    variant_cost: StrictStr = Field(default="10.0", alias="variantCost")
    variant_id: FreeText | None = Field(default=None, alias="variantID")
    """Accepted for compatibility with seed 002's examples; not used for decisions."""

    @field_validator("variant_cost")
    @classmethod
    def _cost_is_decimal(cls, value: str) -> str:
        if len(value) > 32 or not _DECIMAL.fullmatch(value):
            raise ValueError(
                'must be a non-negative decimal string of at most 32 characters such as "5.0" '
                "(pattern ^[0-9]+(\\.[0-9]+)?$)"
            )
        if float(value) > MAX_VARIANT_COST:
            raise ValueError(f"must be at most {MAX_VARIANT_COST:,.0f} (per replica-hour)")
        return value

    @model_validator(mode="after")
    def _min_le_max(self) -> VASpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas ({self.min_replicas}) must be less than or equal to maxReplicas ({self.max_replicas})"
            )
        return self


class VAMetadata(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    name: DnsSubdomain = Field(min_length=1)
    namespace: DnsLabel = Field(default="default", min_length=1)
    labels: Labels = Field(default_factory=dict)
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    deletion_timestamp: str | None = Field(default=None, alias="deletionTimestamp")


class VariantAutoscaling(BaseModel):
    """A VA object as the API server returns it. Unknown status fields are kept out of the way (ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    api_version: Literal["llmd.ai/v1alpha1"] = Field(default="llmd.ai/v1alpha1", alias="apiVersion")
    kind: Literal["VariantAutoscaling"] = "VariantAutoscaling"
    metadata: VAMetadata
    spec: VASpec
    status: dict[str, Any] | None = None

    @property
    def key(self) -> VariantKey:
        return VariantKey(self.metadata.namespace, self.metadata.name)

    def to_spec(self) -> VariantSpec:
        ref = self.spec.scale_target_ref
        return VariantSpec(
            key=self.key,
            model_id=self.spec.model_id,
            target_kind=ref.kind,
            target_name=ref.name,
            target_api_version=ref.api_version,
            min_replicas=self.spec.min_replicas,
            max_replicas=self.spec.max_replicas,
            cost=float(self.spec.variant_cost),
            accelerator=self.metadata.labels.get(ACCELERATOR_LABEL, ""),
        )

    def to_status(self) -> VariantStatus:
        return status_from_dict(self.status or {})


def parse_va(obj: Mapping[str, Any], *, source: str = "VariantAutoscaling") -> VariantAutoscaling:
    """Validate one VA object; raise ManifestError with every problem, each naming its field and value."""
    try:
        return VariantAutoscaling.model_validate(obj)
    except ValidationError as exc:
        name = obj.get("metadata", {}).get("name") if isinstance(obj.get("metadata"), dict) else None
        label = f"{source} {plain(name, 80)}" if isinstance(name, str) and name else source
        messages = describe(exc, source=label)
        spec = obj.get("spec")
        if isinstance(spec, Mapping):
            lo, hi = spec.get("minReplicas", 1), spec.get("maxReplicas", 2)
            bounds_msg = f"minReplicas ({lo}) must be less than or equal to maxReplicas ({hi})"
            ints = type(lo) is int and type(hi) is int
            if ints and lo > hi and not any(bounds_msg in m for m in messages):
                messages.append(f"{label}.spec: {bounds_msg}")
        raise ManifestError("; ".join(messages)) from None


def _time(value: Any) -> float | None:
    if value in (None, ""):
        return None
    return parse_rfc3339_s(str(value))


def _path(value: Any) -> DecisionPath:
    """The persisted path; a status without one (an older release, upstream WVA) reads as unknown."""
    try:
        return DecisionPath(value)
    except ValueError:
        return DecisionPath.UNKNOWN


def status_from_dict(raw: Mapping[str, Any]) -> VariantStatus:
    """Read `status` as the API returns it. Malformed timestamps raise ValueError naming the value."""
    alloc = raw.get("desiredOptimizedAlloc") or {}
    desired = None
    if alloc.get("numReplicas") is not None:
        last_run = _time(alloc.get("lastRunTime"))
        desired = DesiredAlloc(
            num_replicas=int(alloc["numReplicas"]),
            reason=str(alloc.get("reason", "")),
            last_run_time_s=last_run if last_run is not None else 0.0,
            last_update_s=_time(alloc.get("lastUpdate")),
            accelerator=str(alloc.get("accelerator", "")),
            path=_path(alloc.get("path")),
        )
    conditions = []
    for cond in raw.get("conditions") or []:
        try:
            kind = ConditionType(cond.get("type"))
        except ValueError:
            continue
        conditions.append(
            Condition(
                type=kind,
                status=str(cond.get("status")) == "True",
                reason=str(cond.get("reason", "")),
                message=str(cond.get("message", "")),
                last_transition_s=_time(cond.get("lastTransitionTime")),
            )
        )
    applied = (raw.get("actuation") or {}).get("applied")
    rec = raw.get("recommendation")
    recommendation = None
    if isinstance(rec, Mapping) and all(type(rec.get(k)) is int for k in ("lowerBound", "target", "upperBound")):
        recommendation = Recommendation(int(rec["lowerBound"]), int(rec["target"]), int(rec["upperBound"]))
    learned = raw.get("learned")
    return VariantStatus(
        desired=desired,
        applied=applied,
        conditions=tuple(conditions),
        recommendation=recommendation,
        learned=dict(learned) if isinstance(learned, Mapping) else {},
    )


# ---- rendering status (the inverse of status_from_dict; used by the k8s writer and the flight recorder) ----

_REASON: Final = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_WORD: Final = re.compile(r"[A-Za-z0-9]+")
REASON_MAX_CHARS: Final = 1024
MESSAGE_MAX_CHARS: Final = 32768


def condition_reason(text: str) -> str:
    """A valid metav1.Condition reason: `text` if it already is one, else its words in CamelCase
    ("metrics missing" → "MetricsMissing"); never empty ("Unknown")."""
    if _REASON.fullmatch(text) and len(text) <= REASON_MAX_CHARS:
        return text
    camel = "".join(word[:1].upper() + word[1:] for word in _WORD.findall(text)).lstrip("0123456789")
    return camel[:REASON_MAX_CHARS] or "Unknown"


def status_to_dict(status: VariantStatus, *, previous: Mapping[str, Any] | None = None, now_s: float) -> dict[str, Any]:
    """The CRD's `status` for `status`. `previous` is the stored status (for lastTransitionTime); `now_s`
    stamps conditions that change without a time of their own. Inverse of `adapter.config.va.status_from_dict`
    for whole-second times."""
    out: dict[str, Any] = {}
    desired = status.desired
    if desired is not None:
        alloc: dict[str, Any] = {
            "numReplicas": desired.num_replicas,
            "lastRunTime": format_rfc3339(desired.last_run_time_s),
            "reason": desired.reason,
        }
        if desired.last_update_s is not None:
            alloc["lastUpdate"] = format_rfc3339(desired.last_update_s)
        if desired.accelerator:
            alloc["accelerator"] = desired.accelerator
        if desired.path is not DecisionPath.UNKNOWN:
            alloc["path"] = str(desired.path)
        out["desiredOptimizedAlloc"] = alloc
    if status.applied is not None:
        out["actuation"] = {"applied": status.applied}
    if status.conditions:
        stored = {
            c.get("type"): c
            for c in ((previous or {}).get("conditions") or [])
            if isinstance(c, Mapping) and c.get("type")
        }
        conditions: list[dict[str, Any]] = []
        seen: set[str] = set()
        for condition in status.conditions:
            kind = str(condition.type)
            if kind in seen:  # a list-map keyed by type: the API rejects duplicates
                continue
            seen.add(kind)
            value = "True" if condition.status else "False"
            old = stored.get(kind)
            if old is not None and old.get("status") == value and old.get("lastTransitionTime"):
                transition = str(old["lastTransitionTime"])
            else:
                at_s = condition.last_transition_s if condition.last_transition_s is not None else now_s
                transition = format_rfc3339(at_s)
            conditions.append(
                {
                    "type": kind,
                    "status": value,
                    "reason": condition_reason(condition.reason),
                    "message": condition.message[:MESSAGE_MAX_CHARS],
                    "lastTransitionTime": transition,
                }
            )
        out["conditions"] = conditions
    if status.recommendation is not None:
        rec = status.recommendation
        out["recommendation"] = {"lowerBound": rec.lower_bound, "target": rec.target, "upperBound": rec.upper_bound}
    if status.learned:
        out["learned"] = dict(status.learned)
    return out
