"""Layered process settings: flags > env > config file > ConfigMap > defaults, errors naming their source."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from adapter.config.settings import KNOBS, Settings, add_flags, field_of_key, load
from adapter.domain.errors import ConfigError


def parse_flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return parser.parse_args(list(argv))


def test_defaults_are_seed_001s() -> None:
    settings, origin = load(parse_flags(), env={})
    assert settings.metrics_bind_address == ":8080"
    assert settings.health_probe_bind_address == ":8081"
    assert settings.leader_elect is False
    assert settings.leader_election_lease_duration_s == 60.0
    assert settings.leader_election_renew_deadline_s == 50.0
    assert settings.rest_client_timeout_s == 60.0
    assert settings.watch_namespace == ""
    assert origin == {}


@pytest.mark.parametrize(
    ("flags", "env", "file_text", "configmap", "field", "expected", "source"),
    [
        pytest.param((), {}, None, {"WATCH_NAMESPACE": "cm"}, "watch_namespace", "cm", "ConfigMap", id="configmap"),
        pytest.param(
            (),
            {},
            "watch-namespace: file\n",
            {"WATCH_NAMESPACE": "cm"},
            "watch_namespace",
            "file",
            "config file",
            id="file-beats-configmap",
        ),
        pytest.param(
            (),
            {"WATCH_NAMESPACE": "env"},
            "watch-namespace: file\n",
            None,
            "watch_namespace",
            "env",
            "env WATCH_NAMESPACE",
            id="env-beats-file",
        ),
        pytest.param(
            ("--watch-namespace", "flag"),
            {"WATCH_NAMESPACE": "env"},
            "watch-namespace: file\n",
            None,
            "watch_namespace",
            "flag",
            "flag --watch-namespace",
            id="flag-beats-env",
        ),
        pytest.param(
            ("--leader-elect",),
            {"LEADER_ELECT": "false"},
            None,
            None,
            "leader_elect",
            True,
            "flag --leader-elect",
            id="bare-bool-flag",
        ),
        pytest.param(
            (),
            {"LEADER_ELECTION_LEASE_DURATION": "1m30s"},
            None,
            None,
            "leader_election_lease_duration_s",
            90.0,
            "env",
            id="go-duration",
        ),
    ],
)
def test_precedence_is_flags_env_file_configmap_defaults(
    tmp_path: Path,
    flags: tuple[str, ...],
    env: dict[str, str],
    file_text: str | None,
    configmap: dict[str, str] | None,
    field: str,
    expected: object,
    source: str,
) -> None:
    argv = list(flags)
    if file_text is not None:
        path = tmp_path / "settings.yaml"
        path.write_text(file_text)
        argv += ["--config-file", str(path)]
    settings, origin = load(parse_flags(*argv), env=env, configmap=configmap)
    assert getattr(settings, field) == expected
    assert origin[field].startswith(source)


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        pytest.param(
            (),
            {"LEADER_ELECTION_LEASE_DURATION": "soon"},
            "env LEADER_ELECTION_LEASE_DURATION: 'soon'",
            id="bad-duration-names-env",
        ),
        pytest.param(("--secure-port", "x"), {}, "flag --secure-port: 'x'", id="bad-int-names-flag"),
        pytest.param(("--secure-port", "70000"), {}, "flag --secure-port: 70000", id="port-out-of-range"),
        pytest.param(
            (), {"PROMETHEUS_BASE_URL": "prom:9090"}, "env PROMETHEUS_BASE_URL: 'prom:9090'", id="url-without-scheme"
        ),
        pytest.param((), {"LEADER_ELECT": "maybe"}, "env LEADER_ELECT: 'maybe' — must be true or false", id="bad-bool"),
        pytest.param(("--leader-election-renew-deadline", "70s"), {}, "must be shorter than", id="renew-ge-lease"),
        pytest.param(("--tls-cert-file", "/x.crt"), {}, "must be given together", id="cert-without-key"),
    ],
)
def test_an_invalid_value_names_its_source(flags: tuple[str, ...], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(parse_flags(*flags), env=env)
    assert message in str(info.value)


def test_a_config_file_with_an_unknown_key_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("prometheus-ur1: http://x\n")
    with pytest.raises(ConfigError, match="unknown setting 'prometheus-ur1'"):
        load(parse_flags("--config-file", str(path)), env={})


def test_a_missing_config_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(parse_flags(), env={"WVA_CONFIG_FILE": str(tmp_path / "absent.yaml")})


def test_every_knob_is_a_settings_field_with_a_flag_and_an_env_name() -> None:
    fields = set(Settings.model_fields)
    assert {k.field for k in KNOBS} == fields
    assert len({k.flag for k in KNOBS}) == len(KNOBS)
    assert len({k.env for k in KNOBS}) == len(KNOBS)
    for flag in (
        "--config-file",
        "--metrics-bind-address",
        "--health-probe-bind-address",
        "--leader-elect",
        "--watch-namespace",
        "--leader-election-lease-duration",
        "--leader-election-renew-deadline",
        "--rest-client-timeout",
        "--kubeconfig",
        "--prometheus-url",
        "--secure-port",
        "--keda-grpc-address",
        "--tls-cert-file",
        "--tls-private-key-file",
    ):
        assert flag in {k.flag for k in KNOBS}, flag


@pytest.mark.parametrize(
    ("flags", "ttl_s", "audiences"),
    [
        pytest.param((), 10.0, (), id="defaults-as-k8s-apiserver"),
        pytest.param(("--authentication-token-webhook-cache-ttl=2m",), 120.0, (), id="ttl"),
        pytest.param(("--authentication-token-webhook-cache-ttl=0s",), 0.0, (), id="no-cache"),
        pytest.param(
            ("--authentication-token-audiences=wva, https://kubernetes.default.svc,",),
            10.0,
            ("wva", "https://kubernetes.default.svc"),
            id="audiences",
        ),
    ],
)
def test_token_authentication_settings(flags: tuple[str, ...], ttl_s: float, audiences: tuple[str, ...]) -> None:
    settings, _ = load(parse_flags(*flags), env={})
    assert settings.authentication_token_webhook_cache_ttl_s == ttl_s
    assert settings.token_audiences == audiences


def test_token_cache_ttl_is_bounded() -> None:
    with pytest.raises(ConfigError, match=r"flag --authentication-token-webhook-cache-ttl: 7200\.0"):
        load(parse_flags("--authentication-token-webhook-cache-ttl=2h"), env={})


@pytest.mark.parametrize(
    ("key", "field"),
    [("prometheus-url", "prometheus_url"), ("PROMETHEUS_BASE_URL", "prometheus_url"), ("nope", None)],
)
def test_field_of_key(key: str, field: str | None) -> None:
    assert field_of_key(key) == field
