"""Process settings for `serve`, layered: flags > environment > config file > ConfigMap > defaults (seed 001).

Every field has one name per source, derived from one table so the spellings cannot drift:

    field              flag                  env (upstream's names)   file / ConfigMap key
    prometheus_url     --prometheus-url      PROMETHEUS_BASE_URL      prometheus-url or PROMETHEUS_BASE_URL

An invalid value names the source that supplied it: `env LEADER_ELECTION_LEASE_DURATION: 'soon' — …`.
Durations are Go duration strings ("60s", "1m30s") everywhere and seconds (`_s`) inside.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from adapter.config.configmaps import DEFAULT_CONTROLLER_NAMESPACE
from adapter.config.files import MAX_CONFIG_FILE_BYTES, read_bounded
from adapter.config.names import LABEL_RULE, DnsLabel, DnsSubdomain, is_dns1123_label
from adapter.config.safeload import excerpt, load_yaml
from adapter.domain.errors import ConfigError
from adapter.domain.timefmt import parse_duration_s

MAIN_CONFIGMAP = "wva-variantautoscaling-config"
HOUR_S = 3600.0
DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class _Knob:
    field: str
    flag: str
    env: str
    kind: str  # "str" | "int" | "bool" | "duration" | "path"
    help: str


KNOBS: tuple[_Knob, ...] = (
    _Knob("config_file", "--config-file", "WVA_CONFIG_FILE", "path", "YAML file of settings (keys as flag names)"),
    _Knob("kubeconfig", "--kubeconfig", "KUBECONFIG", "path", "kubeconfig; in-cluster config when unset"),
    _Knob("prometheus_url", "--prometheus-url", "PROMETHEUS_BASE_URL", "str", "Prometheus base URL"),
    _Knob("prometheus_bearer_token", "--prometheus-bearer-token", "PROMETHEUS_BEARER_TOKEN", "str", "bearer token"),
    _Knob("prometheus_token_path", "--prometheus-token-path", "PROMETHEUS_TOKEN_PATH", "path", "file with the token"),
    _Knob("prometheus_ca_file", "--prometheus-ca-file", "PROMETHEUS_CA_CERT_PATH", "path", "CA bundle"),
    _Knob("prometheus_client_cert", "--prometheus-client-cert", "PROMETHEUS_CLIENT_CERT_PATH", "path", "client cert"),
    _Knob("prometheus_client_key", "--prometheus-client-key", "PROMETHEUS_CLIENT_KEY_PATH", "path", "client key"),
    _Knob(
        "prometheus_insecure_skip_verify",
        "--prometheus-insecure-skip-verify",
        "PROMETHEUS_TLS_INSECURE_SKIP_VERIFY",
        "bool",
        "skip TLS verification of Prometheus (not for production)",
    ),
    _Knob("prometheus_timeout_s", "--prometheus-timeout", "PROMETHEUS_QUERY_TIMEOUT", "duration", "per-query timeout"),
    _Knob(
        "prometheus_compression",
        "--prometheus-compression",
        "WVA_PROMETHEUS_COMPRESSION",
        "bool",
        "ask Prometheus for gzip answers (fewer bytes, more CPU on both sides; off: plain JSON)",
    ),
    _Knob(
        "saturation_window_s",
        "--saturation-window",
        "WVA_SATURATION_WINDOW",
        "duration",
        "max_over_time window of KV-cache usage and queue length (upstream: 1m)",
    ),
    _Knob("metrics_bind_address", "--metrics-bind-address", "METRICS_BIND_ADDRESS", "str", "own /metrics address"),
    _Knob(
        "health_probe_bind_address",
        "--health-probe-bind-address",
        "HEALTH_PROBE_BIND_ADDRESS",
        "str",
        "/healthz and /readyz address",
    ),
    _Knob("secure_port", "--secure-port", "WVA_SECURE_PORT", "int", "HTTPS port of the External Metrics API"),
    _Knob("bind_address", "--bind-address", "WVA_BIND_ADDRESS", "str", "HTTPS bind address"),
    _Knob("keda_grpc_address", "--keda-grpc-address", "WVA_KEDA_GRPC_ADDRESS", "str", "KEDA external scaler address"),
    _Knob("tls_cert_file", "--tls-cert-file", "WVA_TLS_CERT_FILE", "path", "serving certificate"),
    _Knob("tls_private_key_file", "--tls-private-key-file", "WVA_TLS_PRIVATE_KEY_FILE", "path", "serving key"),
    _Knob("leader_elect", "--leader-elect", "LEADER_ELECT", "bool", "elect a leader through a Lease"),
    _Knob("leader_election_id", "--leader-election-id", "LEADER_ELECTION_ID", "str", "Lease name"),
    _Knob(
        "leader_election_lease_duration_s",
        "--leader-election-lease-duration",
        "LEADER_ELECTION_LEASE_DURATION",
        "duration",
        "Lease duration",
    ),
    _Knob(
        "leader_election_renew_deadline_s",
        "--leader-election-renew-deadline",
        "LEADER_ELECTION_RENEW_DEADLINE",
        "duration",
        "how long the leader keeps trying to renew before giving up",
    ),
    _Knob(
        "leader_election_retry_period_s",
        "--leader-election-retry-period",
        "LEADER_ELECTION_RETRY_PERIOD",
        "duration",
        "time between Lease attempts",
    ),
    _Knob(
        "rest_client_timeout_s", "--rest-client-timeout", "REST_CLIENT_TIMEOUT", "duration", "Kubernetes API timeout"
    ),
    _Knob("watch_namespace", "--watch-namespace", "WATCH_NAMESPACE", "str", "only this namespace (all when empty)"),
    _Knob("controller_namespace", "--controller-namespace", "POD_NAMESPACE", "str", "where global ConfigMaps live"),
    _Knob("engine_interval_s", "--engine-interval", "GLOBAL_OPT_INTERVAL", "duration", "time between engine cycles"),
    _Knob("scale_to_zero", "--scale-to-zero", "WVA_SCALE_TO_ZERO", "bool", "default of enable_scale_to_zero"),
    _Knob(
        "scale_from_zero_interval_s",
        "--scale-from-zero-interval",
        "WVA_SCALE_FROM_ZERO_INTERVAL",
        "duration",
        "EPP queue polling period for VAs at zero",
    ),
    _Knob("record_dir", "--record-dir", "WVA_RECORD_DIR", "path", "flight recorder: save each cycle as a fixture"),
    _Knob("record_max_bytes", "--record-max-bytes", "WVA_RECORD_MAX_BYTES", "int", "flight recorder ring size, bytes"),
    _Knob("epp_bearer_token", "--epp-bearer-token", "EPP_METRIC_READER_BEARER_TOKEN", "str", "token for EPP /metrics"),
    _Knob(
        "authentication_token_webhook_cache_ttl_s",
        "--authentication-token-webhook-cache-ttl",
        "WVA_AUTHENTICATION_TOKEN_WEBHOOK_CACHE_TTL",
        "duration",
        "how long TokenReview answers (allowed and denied) for bearer tokens are cached",
    ),
    _Knob(
        "authentication_token_audiences",
        "--authentication-token-audiences",
        "WVA_AUTHENTICATION_TOKEN_AUDIENCES",
        "str",
        "comma-separated audiences bearer tokens must be for (empty: kube-apiserver's own)",
    ),
    _Knob(
        "authentication_skip_lookup",
        "--authentication-skip-lookup",
        "WVA_AUTHENTICATION_SKIP_LOOKUP",
        "bool",
        "do not read kube-system/extension-apiserver-authentication",
    ),
)
_BY_FIELD = {k.field: k for k in KNOBS}
_BY_FILE_KEY = {k.flag.removeprefix("--"): k for k in KNOBS} | {k.env: k for k in KNOBS}


def field_of_key(key: str) -> str | None:
    """The setting a config-file or ConfigMap key names (`prometheus-url` or `PROMETHEUS_BASE_URL` →
    `prometheus_url`), None for an unknown key."""
    knob = _BY_FILE_KEY.get(key)
    return knob.field if knob is not None else None


class Settings(BaseModel):
    """Validated process settings. Every field documents its default and unit."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    config_file: Path | None = None
    kubeconfig: Path | None = None
    prometheus_url: str | None = None
    prometheus_bearer_token: str | None = None
    prometheus_token_path: Path | None = None
    prometheus_ca_file: Path | None = None
    prometheus_client_cert: Path | None = None
    prometheus_client_key: Path | None = None
    prometheus_insecure_skip_verify: bool = False
    prometheus_timeout_s: float = Field(default=10.0, gt=0, le=HOUR_S)
    prometheus_compression: bool = False
    """Off: the collector asks for `Accept-Encoding: identity` (Prometheus gzips its answers for any client that
    accepts gzip, as requests does by default: at 10,000 VAs that cost this process ~0.2 s of a cycle's collect, and
    Prometheus the compressing; docs/benchmarks/scale.md, item 29). On: gzip, for a Prometheus behind a slow link."""
    saturation_window_s: float = Field(default=60.0, gt=0, le=DAY_S)
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    secure_port: int = Field(default=6443, ge=0, le=65535)
    bind_address: str = "0.0.0.0"
    keda_grpc_address: str = ":50051"
    tls_cert_file: Path | None = None
    tls_private_key_file: Path | None = None
    leader_elect: bool = False
    leader_election_id: DnsSubdomain = "72dd1cf1.llm-d.ai"
    leader_election_lease_duration_s: float = Field(default=60.0, gt=0, le=HOUR_S)
    leader_election_renew_deadline_s: float = Field(default=50.0, gt=0, le=HOUR_S)
    leader_election_retry_period_s: float = Field(default=10.0, gt=0, le=HOUR_S)
    rest_client_timeout_s: float = Field(default=60.0, gt=0, le=HOUR_S)
    watch_namespace: str = ""
    """One namespace (a DNS-1123 label), or "" for all."""
    controller_namespace: DnsLabel = DEFAULT_CONTROLLER_NAMESPACE
    engine_interval_s: float = Field(default=30.0, gt=0, le=DAY_S)
    scale_to_zero: bool = False
    scale_from_zero_interval_s: float = Field(default=0.1, gt=0, le=HOUR_S)
    epp_bearer_token: str | None = None
    authentication_skip_lookup: bool = False
    authentication_token_webhook_cache_ttl_s: float = Field(default=10.0, ge=0, le=3600)
    """TokenReview answers are cached this long (k8s.io/apiserver's default, 10 s); 0 disables the cache."""
    authentication_token_audiences: str = ""

    @property
    def token_audiences(self) -> tuple[str, ...]:
        """`authentication_token_audiences` split on commas, blanks dropped."""
        return tuple(a.strip() for a in self.authentication_token_audiences.split(",") if a.strip())

    record_dir: Path | None = None
    """Off by default: the leader writes each cycle as a wva-replay/v1 fixture into this directory (a ring)."""
    record_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1024, le=1 << 40)

    @field_validator("watch_namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if value and not is_dns1123_label(value):
            raise ValueError(LABEL_RULE)
        return value

    @field_validator("prometheus_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _leader_timings(self) -> Settings:
        if not self.leader_election_renew_deadline_s < self.leader_election_lease_duration_s:
            raise ValueError(
                f"leader-election-renew-deadline ({self.leader_election_renew_deadline_s:g}s) must be shorter than "
                f"leader-election-lease-duration ({self.leader_election_lease_duration_s:g}s)"
            )
        if (self.tls_cert_file is None) != (self.tls_private_key_file is None):
            raise ValueError("--tls-cert-file and --tls-private-key-file must be given together (or neither)")
        return self


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Register every knob as a flag whose default is None, so only explicit flags take precedence."""
    for knob in KNOBS:
        if knob.kind == "bool":
            parser.add_argument(
                knob.flag, dest=knob.field, nargs="?", const="true", default=None, metavar="BOOL", help=knob.help
            )
        else:
            parser.add_argument(knob.flag, dest=knob.field, default=None, help=f"{knob.help} (env {knob.env})")


def _convert(knob: _Knob, raw: Any, source: str) -> Any:
    """One raw value from one source into the field's type; errors name the source."""
    try:
        if knob.kind == "duration":
            return raw if isinstance(raw, int | float) and not isinstance(raw, bool) else parse_duration_s(str(raw))
        if knob.kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off", ""):
                return False
            raise ValueError("must be true or false")
        if knob.kind == "int":
            if isinstance(raw, bool):
                raise ValueError("must be an integer")
            return int(raw)
        return str(raw)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: {excerpt(raw)} — {exc}") from None


def _file_layer(path: Path, label: str) -> dict[str, tuple[Any, str]]:
    data = read_bounded(path, what=label, max_bytes=MAX_CONFIG_FILE_BYTES)
    doc = load_yaml(data, what=f"{label} {path}", max_bytes=MAX_CONFIG_FILE_BYTES)
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{label} {path}: must be a mapping of settings")
    return _mapping_layer(doc, f"{label} {path}")


def _mapping_layer(doc: Mapping[str, Any], label: str) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    for key, raw in doc.items():
        knob = _BY_FILE_KEY.get(str(key))
        if knob is None:
            raise ConfigError(f"{label}: unknown setting {excerpt(key)}; expected a flag name such as 'prometheus-url'")
        source = f"{label} key {key}"
        out[knob.field] = (_convert(knob, raw, source), source)
    return out


def load(
    flags: argparse.Namespace | Mapping[str, Any],
    *,
    env: Mapping[str, str],
    configmap: Mapping[str, str] | None = None,
) -> tuple[Settings, dict[str, str]]:
    """Resolve settings; returns them and, per field, the source that decided it (for the startup log).

    `configmap` is the data of `wva-variantautoscaling-config` (env-style keys), when the caller has it.
    """
    explicit = dict(vars(flags) if isinstance(flags, argparse.Namespace) else flags)
    layers: list[dict[str, tuple[Any, str]]] = []
    if configmap:
        layers.append(_mapping_layer(configmap, f"ConfigMap {MAIN_CONFIGMAP}"))
    env_layer = {
        knob.field: (_convert(knob, env[knob.env], f"env {knob.env}"), f"env {knob.env}")
        for knob in KNOBS
        if knob.env in env
    }
    flag_layer = {
        knob.field: (_convert(knob, explicit[knob.field], f"flag {knob.flag}"), f"flag {knob.flag}")
        for knob in KNOBS
        if explicit.get(knob.field) is not None
    }
    config_file = (flag_layer.get("config_file") or env_layer.get("config_file") or (None, ""))[0]
    if config_file is not None:
        layers.append(_file_layer(Path(config_file), "config file"))
    layers += [env_layer, flag_layer]
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for layer in layers:
        for name, (value, source) in layer.items():
            merged[name], origin[name] = value, source
    try:
        settings = Settings(**merged)
    except ValidationError as exc:
        messages = []
        for err in exc.errors(include_url=False):
            loc = err.get("loc") or ()
            name = str(loc[0]) if loc else ""
            where = origin.get(name) or (f"setting {_BY_FIELD[name].flag}" if name in _BY_FIELD else "settings")
            value = err.get("input") if loc else ""
            msg = str(err.get("msg")).removeprefix("Value error, ")
            messages.append(f"{where}: {excerpt(value)} — {msg}" if loc else f"{where}: {msg}")
        raise ConfigError("; ".join(messages)) from None
    return settings, origin


def from_environ() -> dict[str, str]:
    """The process environment (the edge that reads it; the core never does)."""
    return dict(os.environ)
