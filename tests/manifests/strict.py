"""Strict checks of rendered manifests: built-in kinds against the `kubernetes` client's models, and
VariantAutoscalings against the CRD's openAPIV3Schema (a small walker; `jsonschema` is not a dependency).

`ApiClient.deserialize` ignores fields it does not know, so a misspelled `readOnlyRootFileSystem` would pass it
silently and the API server would then prune or reject it. `strict_errors` walks each model's `openapi_types`
and `attribute_map` instead and reports every unknown field and every wrongly typed value with its path.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import kubernetes.client as k8s

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")

# Fields the client types as `object` that Kubernetes defines as IntOrString.
INT_OR_STRING = frozenset(
    {
        ("V1HTTPGetAction", "port"),
        ("V1TCPSocketAction", "port"),
        ("V1ServicePort", "target_port"),
        ("V1NetworkPolicyPort", "port"),
        ("V1PodDisruptionBudgetSpec", "min_available"),
        ("V1PodDisruptionBudgetSpec", "max_unavailable"),
        ("V1RollingUpdateDeployment", "max_surge"),
        ("V1RollingUpdateDeployment", "max_unavailable"),
    }
)
# Fields the client types as `str` that Kubernetes defines as resource.Quantity (a YAML number is fine there).
QUANTITY = frozenset(
    {
        ("V1ResourceRequirements", "limits"),
        ("V1ResourceRequirements", "requests"),
        ("V1EmptyDirVolumeSource", "size_limit"),
        ("V2MetricTarget", "average_value"),
        ("V2MetricTarget", "value"),
        ("V2HPAScalingRules", "tolerance"),
    }
)
_SCHEMA_OBJECT_FIELDS = frozenset({("V1JSONSchemaProps", "items"), ("V1JSONSchemaProps", "additional_properties")})

# (apiVersion, kind) -> client model for every built-in kind the manifests may contain.
BUILTIN_MODELS: dict[tuple[str, str], str] = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "Service"): "V1Service",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
    ("apiregistration.k8s.io/v1", "APIService"): "V1APIService",
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): "V1CustomResourceDefinition",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2HorizontalPodAutoscaler",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def strict_errors(value: Any, type_name: str, path: str = "$") -> list[str]:
    """Every unknown field and wrongly typed value of `value` read as the client type `type_name`."""
    errors: list[str] = []
    _check(value, type_name, path, errors, None)
    return errors


def _check(value: Any, type_name: str, path: str, errors: list[str], field: tuple[str, str] | None) -> None:
    if value is None:  # null means "unset" to the API server
        return
    if match := _LIST.match(type_name):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check(item, match.group(1), f"{path}[{i}]", errors, field)
        return
    if match := _DICT.match(type_name):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping, got {type(value).__name__}")
            return
        for key, item in value.items():
            _check(item, match.group(1), f"{path}.{key}", errors, field)
        return
    primitive: dict[str, Callable[[Any], bool]] = {
        "str": lambda v: isinstance(v, str) or (field in QUANTITY and _is_number(v)),
        "bytes": lambda v: isinstance(v, str),
        "int": _is_int,
        "float": _is_number,
        "bool": lambda v: isinstance(v, bool),
        "datetime": lambda v: isinstance(v, str),
        "date": lambda v: isinstance(v, str),
    }
    if type_name in primitive:
        if not primitive[type_name](value):
            errors.append(f"{path}: expected {type_name}, got {type(value).__name__} {value!r}")
        return
    if type_name == "object":
        if field in INT_OR_STRING and not (_is_int(value) or isinstance(value, str)):
            errors.append(f"{path}: expected an int or a string, got {type(value).__name__}")
        elif field in _SCHEMA_OBJECT_FIELDS and not isinstance(value, bool):
            _check(value, "V1JSONSchemaProps", path, errors, None)
        return
    model = getattr(k8s, type_name, None)
    if model is None or not hasattr(model, "attribute_map"):
        errors.append(f"{path}: the checker does not know the client type {type_name!r}")
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a {type_name} mapping, got {type(value).__name__}")
        return
    by_key = {key: attr for attr, key in model.attribute_map.items()}
    for key, item in value.items():
        attr = by_key.get(key)
        if attr is None:
            known = ", ".join(sorted(by_key))
            errors.append(f"{path}.{key}: unknown field of {type_name} (known: {known})")
            continue
        _check(item, model.openapi_types[attr], f"{path}.{key}", errors, (type_name, attr))


_API_CLIENT = k8s.ApiClient()


def deserialize(obj: Mapping[str, Any], type_name: str) -> Any:
    """Deserialize through the client's models, which enforce required fields and value types."""
    return _API_CLIENT.deserialize(json.dumps(obj), type_name, "application/json")


# ---- the CRD schema walker ---------------------------------------------------------------------------------

CelRule = Callable[[Mapping[str, Any]], bool]


def _min_le_max(spec: Mapping[str, Any]) -> bool:
    # CEL: a missing field is an evaluation error, which rejects the object, like a KeyError here.
    return "minReplicas" not in spec or spec["minReplicas"] <= spec["maxReplicas"]


# Each CEL rule of the CRD, translated by hand. A rule missing here fails validation loudly.
CEL_RULES: dict[str, CelRule] = {
    "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas": _min_le_max,
}

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def apply_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """Structural defaulting as the API server does it: a missing property with a `default` gets it."""
    value = copy.deepcopy(value)
    if schema.get("type") == "object" and isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(value[name], sub)
    elif schema.get("type") == "array" and isinstance(value, list) and "items" in schema:
        value = [apply_defaults(item, schema["items"]) for item in value]
    return value


def schema_errors(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Validate `value` against an OpenAPI v3 structural schema (the subset CRDs use)."""
    errors: list[str] = []
    _validate(value, schema, path, errors)
    return errors


def _validate(value: Any, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    kind = schema.get("type")
    type_ok = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": _is_int,
        "number": _is_number,
        "boolean": lambda v: isinstance(v, bool),
    }
    if kind not in type_ok:
        errors.append(f"{path}: schema has no usable type ({kind!r})")
        return
    if not type_ok[kind](value):
        errors.append(f"{path}: expected {kind}, got {type(value).__name__} {value!r}")
        return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if kind == "string":
        _validate_string(value, schema, path, errors)
    elif kind in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} is less than the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} is greater than the maximum {schema['maximum']}")
        low, high = _INT_RANGES.get(schema.get("format", ""), (None, None))
        if low is not None and high is not None and not low <= value <= high:
            errors.append(f"{path}: {value} does not fit {schema['format']}")
    elif kind == "array":
        _validate_array(value, schema, path, errors)
    elif kind == "object":
        _validate_object(value, schema, path, errors)


def _validate_string(value: str, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: {value!r} is shorter than minLength {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than maxLength {schema['maxLength']}")
    # Kubernetes evaluates patterns with Go's RE2, where \d is ASCII only: hence re.ASCII.
    if "pattern" in schema and not re.search(schema["pattern"], value, re.ASCII):
        errors.append(f"{path}: {value!r} does not match the pattern {schema['pattern']}")
    if schema.get("format") == "date-time":
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            errors.append(f"{path}: {value!r} is not an RFC 3339 date-time")


def _validate_array(value: list[Any], schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    items = schema.get("items")
    if items is None:
        errors.append(f"{path}: array schema without items")
        return
    for i, item in enumerate(value):
        _validate(item, items, f"{path}[{i}]", errors)
    if schema.get("x-kubernetes-list-type") == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen: set[tuple[Any, ...]] = set()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = tuple(item.get(k) for k in keys)
            if key in seen:
                errors.append(f"{path}[{i}]: duplicate list-map key {dict(zip(keys, key, strict=True))}")
            seen.add(key)


def _validate_object(value: dict[str, Any], schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(f"{path}: missing required field {name!r}")
    if props is None and extra is None:
        # `metadata` at the root is validated by the API server itself; anything else would be pruned.
        if path != "$.metadata" and not schema.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(f"{path}: object schema without properties would prune everything")
        return
    for key, item in value.items():
        if props is not None and key in props:
            _validate(item, props[key], f"{path}.{key}", errors)
        elif isinstance(extra, dict):
            _validate(item, extra, f"{path}.{key}", errors)
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(f"{path}.{key}: unknown field")
    for rule in schema.get("x-kubernetes-validations") or []:
        check = CEL_RULES.get(rule["rule"])
        if check is None:
            errors.append(f"{path}: no Python translation of the CEL rule {rule['rule']!r} in CEL_RULES")
            continue
        try:
            ok = check(value)
        except (KeyError, TypeError):
            ok = False
        if not ok:
            errors.append(f"{path}: {rule.get('message', rule['rule'])}")


# ---- custom resources of other projects (their CRDs are not installed here) --------------------------------

SCALED_OBJECT_SPEC_KEYS = {
    "scaleTargetRef",
    "pollingInterval",
    "cooldownPeriod",
    "initialCooldownPeriod",
    "idleReplicaCount",
    "minReplicaCount",
    "maxReplicaCount",
    "fallback",
    "advanced",
    "triggers",
}
TRIGGER_KEYS = {"type", "name", "metadata", "authenticationRef", "metricType", "useCachedMetrics"}
ADVANCED_KEYS = {"restoreToOriginalReplicaCount", "horizontalPodAutoscalerConfig", "scalingModifiers"}
FALLBACK_KEYS = {"failureThreshold", "replicas", "behavior"}


def scaled_object_errors(obj: dict[str, Any]) -> list[str]:
    """A hand-written shape check of keda.sh/v1alpha1 ScaledObject (KEDA's CRD is not installed here)."""
    errors = strict_errors(obj["metadata"], "V1ObjectMeta", "$.metadata")
    spec = obj["spec"]
    errors += [f"$.spec.{k}: unknown field" for k in set(spec) - SCALED_OBJECT_SPEC_KEYS]
    errors += strict_errors(spec["scaleTargetRef"], "V2CrossVersionObjectReference", "$.spec.scaleTargetRef")
    for key in ("pollingInterval", "cooldownPeriod", "minReplicaCount", "maxReplicaCount"):
        if key in spec and not (isinstance(spec[key], int) and spec[key] >= 0):
            errors.append(f"$.spec.{key}: expected a non-negative int")
    errors += [f"$.spec.fallback.{k}: unknown field" for k in set(spec.get("fallback", {})) - FALLBACK_KEYS]
    advanced = spec.get("advanced", {})
    errors += [f"$.spec.advanced.{k}: unknown field" for k in set(advanced) - ADVANCED_KEYS]
    hpa_config = advanced.get("horizontalPodAutoscalerConfig", {})
    errors += [f"$.spec.advanced.hpaConfig.{k}: unknown field" for k in set(hpa_config) - {"name", "behavior"}]
    if "behavior" in hpa_config:
        path = "$.spec.advanced.horizontalPodAutoscalerConfig.behavior"
        errors += strict_errors(hpa_config["behavior"], "V2HorizontalPodAutoscalerBehavior", path)
    for i, trigger in enumerate(spec.get("triggers") or []):
        errors += [f"$.spec.triggers[{i}].{k}: unknown field" for k in set(trigger) - TRIGGER_KEYS]
        for key, value in (trigger.get("metadata") or {}).items():
            if not isinstance(value, str):
                errors.append(f"$.spec.triggers[{i}].metadata.{key}: KEDA metadata values must be strings")
    if not spec.get("triggers"):
        errors.append("$.spec.triggers: at least one trigger is required")
    return errors


CERTIFICATE_SPEC_KEYS = {
    "secretName",
    "secretTemplate",
    "commonName",
    "literalSubject",
    "subject",
    "dnsNames",
    "ipAddresses",
    "uris",
    "emailAddresses",
    "otherNames",
    "duration",
    "renewBefore",
    "renewBeforePercentage",
    "privateKey",
    "usages",
    "issuerRef",
    "isCA",
    "keystores",
    "revisionHistoryLimit",
    "additionalOutputFormats",
    "nameConstraints",
    "encodeUsagesInRequest",
}
PRIVATE_KEY_KEYS = {"algorithm", "size", "encoding", "rotationPolicy"}
KEY_USAGES = {
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement", "data encipherment",
    "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth", "client auth", "code signing",
    "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
    "microsoft sgc", "netscape sgc",
}  # fmt: skip
ISSUER_TYPES = {"selfSigned", "ca", "acme", "vault", "venafi"}


def _duration_errors(spec: dict[str, Any], path: str) -> list[str]:
    return [
        f"{path}.{key}: expected a Go duration such as 2160h"
        for key in ("duration", "renewBefore")
        if key in spec and not re.fullmatch(r"(\d+(\.\d+)?(h|m|s|ms))+", str(spec[key]))
    ]


def cert_manager_errors(obj: dict[str, Any]) -> list[str]:
    """A hand-written shape check of cert-manager.io/v1 Certificate and Issuer (cert-manager's CRDs are not
    installed here): known fields, required ones, the enumerations."""
    errors = strict_errors(obj["metadata"], "V1ObjectMeta", "$.metadata")
    spec = obj.get("spec") or {}
    if obj["kind"] == "Issuer":
        types = set(spec) & ISSUER_TYPES
        errors += [f"$.spec.{k}: unknown field" for k in set(spec) - ISSUER_TYPES]
        if len(types) != 1:
            errors.append(f"$.spec: exactly one issuer type of {sorted(ISSUER_TYPES)} is required")
        if "ca" in spec and not (spec["ca"] or {}).get("secretName"):
            errors.append("$.spec.ca.secretName: required")
        return errors
    errors += [f"$.spec.{k}: unknown field" for k in set(spec) - CERTIFICATE_SPEC_KEYS]
    if not spec.get("secretName"):
        errors.append("$.spec.secretName: required")
    ref = spec.get("issuerRef") or {}
    if not ref.get("name"):
        errors.append("$.spec.issuerRef.name: required")
    errors += [f"$.spec.issuerRef.{k}: unknown field" for k in set(ref) - {"name", "kind", "group"}]
    key = spec.get("privateKey") or {}
    errors += [f"$.spec.privateKey.{k}: unknown field" for k in set(key) - PRIVATE_KEY_KEYS]
    if key.get("algorithm", "RSA") not in {"RSA", "ECDSA", "Ed25519"}:
        errors.append(f"$.spec.privateKey.algorithm: {key.get('algorithm')!r} is not RSA, ECDSA or Ed25519")
    errors += [f"$.spec.usages: unknown usage {u!r}" for u in spec.get("usages") or [] if u not in KEY_USAGES]
    errors += _duration_errors(spec, "$.spec")
    for field in ("dnsNames", "usages"):
        if field in spec and not all(isinstance(v, str) for v in spec[field]):
            errors.append(f"$.spec.{field}: expected a list of strings")
    return errors


def foreign_errors(obj: dict[str, Any]) -> list[str] | None:
    """Errors of a custom resource of another project we ship (KEDA, cert-manager); None for other kinds."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key == ("keda.sh/v1alpha1", "ScaledObject"):
        return scaled_object_errors(obj)
    if key in {("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "Issuer")}:
        return cert_manager_errors(obj)
    return None
