"""Leader election without a server: option checks, identities, callback containment, and the test clock.

Every test of the election itself runs on the real kube-apiserver (tests/e2e_k8s/test_api_leader.py), including
the 409s (a real concurrent writer between our read and our write, four real candidates racing) and renewals
that fail for 51 s (RBAC takes the permission away): none needs the fake server's fault injection any more.
"""

from __future__ import annotations

from typing import cast

import pytest

from adapter.domain.errors import ConfigError
from adapter.k8s.client import KubeClient
from adapter.k8s.leader import LeaderElectionOptions, LeaderElector

OPTS = LeaderElectionOptions(namespace="wva-system")


class Clock:
    """Monotonic and wall time that only move when a test says so."""

    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1767225600.0 + self.t


def test_callback_errors_are_contained() -> None:
    def boom() -> None:
        raise RuntimeError("boom")

    no_server = cast(KubeClient, object())  # the transition below sends no request
    elector = LeaderElector(no_server, OPTS, identity="x", on_started_leading=boom)
    elector._succeeded(0.0, {"holderIdentity": "x"})  # the transition itself, without I/O
    assert elector.is_leader


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lease_duration_s": 50, "renew_deadline_s": 50},
        {"renew_deadline_s": 10, "retry_period_s": 10},
        {"retry_period_s": 0},
    ],
    ids=["deadline-not-below-duration", "retry-not-below-deadline", "zero-retry"],
)
def test_option_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="leader election"):
        LeaderElectionOptions(**kwargs)  # type: ignore[arg-type]


def test_default_identity_is_unique() -> None:
    from adapter.k8s.leader import default_identity

    first, second = default_identity(), default_identity()
    assert first != second
    assert first.split("_")[0] == second.split("_")[0]
