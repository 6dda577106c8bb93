"""The exception tree. Edges wrap library errors (`raise ... from e`) into these.

    AdapterError
    ├── ConfigError              invalid configuration; names the key, the value and the allowed range
    │   └── ManifestError        an invalid VariantAutoscaling or ConfigMap object
    ├── FixtureError             an invalid replay fixture; carries the JSON path
    ├── SourceError              an outside data source failed (temporary: retry next cycle)
    │   ├── PrometheusUnavailable
    │   └── QueryError
    ├── KubeError                the Kubernetes API failed
    │   ├── KubeConflict         409: re-read and retry
    │   ├── KubeNotFound         404
    │   └── KubeGone             410: relist
    ├── ModelError               a numeric model cannot produce an answer (e.g. a target below the bounded region)
    └── ServeError               a request to one of our servers is invalid
        ├── BadRequest           400 / INVALID_ARGUMENT
        ├── NotFound             404 / NOT_FOUND
        ├── Unauthorized         401 / UNAUTHENTICATED
        ├── Forbidden            403 / PERMISSION_DENIED
        └── MethodNotAllowed     405 (HTTP only; carries the methods the resource allows)

We classify by what the caller does next: `SourceError` and `KubeError` are temporary (the reconciler
retries next cycle and the fallback hierarchy decides meanwhile), the others are permanent for that input.
"""

from __future__ import annotations


class AdapterError(Exception):
    """Base of every error wva-adapter raises on purpose."""


class ConfigError(AdapterError):
    """Invalid configuration. The message names the source, key, value and allowed range."""


class ManifestError(ConfigError):
    """An invalid VariantAutoscaling or WVA ConfigMap."""


class FixtureError(AdapterError):
    """An invalid replay fixture or scenario; `path` is a JSON path such as `$.cycles[0].pods[2].metrics`."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.detail = message


class SourceError(AdapterError):
    """A metrics source failed; temporary."""


class PrometheusUnavailable(SourceError):
    """Prometheus could not be reached or answered with an error."""


class QueryError(SourceError):
    """One query failed or returned something we cannot use."""


class KubeError(AdapterError):
    """The Kubernetes API failed."""


class KubeConflict(KubeError):
    """409 Conflict: the object changed under us; re-read and retry."""


class KubeNotFound(KubeError):
    """404 Not Found."""


class KubeGone(KubeError):
    """410 Gone: the watch's resourceVersion is too old; relist."""


class ModelError(AdapterError):
    """A numeric model cannot produce an answer for these inputs."""


class ServeError(AdapterError):
    """A request to one of our servers cannot be answered; subclasses carry the status to return."""

    http_status = 500
    k8s_reason = "InternalError"


class BadRequest(ServeError):
    http_status = 400
    k8s_reason = "BadRequest"


class NotFound(ServeError):
    http_status = 404
    k8s_reason = "NotFound"


class Unauthorized(ServeError):
    http_status = 401
    k8s_reason = "Unauthorized"


class Forbidden(ServeError):
    http_status = 403
    k8s_reason = "Forbidden"


class MethodNotAllowed(ServeError):
    """The path exists but not for this method; `allow` is the `Allow` header's value (RFC 9110 §15.5.6)."""

    http_status = 405
    k8s_reason = "MethodNotAllowed"

    def __init__(self, message: str, *, allow: str) -> None:
        super().__init__(message)
        self.allow = allow
