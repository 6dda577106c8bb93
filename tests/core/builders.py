"""Builders shared by the decision-core tests: snapshots, specs, states and a virtual-clock fleet.

Every builder takes keyword arguments with the defaults the seeds use (namespace `llm`, model `llama-70b`,
seed 000's recommended thresholds), so a test states only what matters to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapter import engine
from adapter.analyzers.saturation import VariantReplicaState
from adapter.config.configmaps import (
    DEFAULT_CONTROLLER_NAMESPACE,
    SATURATION_CM,
    SCALE_TO_ZERO_CM,
    ConfigSet,
    SaturationConfig,
    ScaleToZeroConfig,
)
from adapter.config.engine import EngineConfig
from adapter.domain.decision import CycleResult, VariantDecision
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import (
    DesiredAlloc,
    ModelTraffic,
    PodMetrics,
    ScaleTarget,
    Snapshot,
    VariantSpec,
    VariantStatus,
    VariantView,
)
from adapter.enforcer.fallback import FallbackVariant
from adapter.enforcer.scale_to_zero import VariantBounds

NS = "llm"
MODEL = "llama-70b"
MODEL_KEY = ModelKey(NS, MODEL)
CONTROLLER_NS = DEFAULT_CONTROLLER_NAMESPACE
T0 = 1_767_225_600.0
"""2026-01-01T00:00:00Z, the virtual clock's origin."""

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"
CORE_FIXTURES = Path(__file__).resolve().parent / "fixtures"

RECOMMENDED_SATURATION = "kvCacheThreshold: 0.80\nqueueLengthThreshold: 5\nkvSpareTrigger: 0.1\nqueueSpareTrigger: 3\n"

# Binary-exact thresholds for boundary tests: every value below is a sum of powers of two, so `>=` and `<`
# are tested on exact equality instead of on float rounding.
EXACT = SaturationConfig(
    kv_cache_threshold=0.75, queue_length_threshold=5.0, kv_spare_trigger=0.25, queue_spare_trigger=3.0
)
RECOMMENDED = SaturationConfig()


def key(name: str, ns: str = NS) -> VariantKey:
    return VariantKey(ns, name)


# ---- analyzer inputs ---------------------------------------------------------------------------------------


def pod(variant: str, name: str, kv: float | None = 0.0, queue: float | None = 0.0, ns: str = NS) -> PodMetrics:
    return PodMetrics(namespace=ns, pod=name, variant=variant, kv_cache_usage=kv, queue_length=queue)


def pods(variant: str, *loads: tuple[float, float], ns: str = NS) -> tuple[PodMetrics, ...]:
    """One pod per (kv, queue) pair, named `<variant>-0`, `<variant>-1`, …"""
    return tuple(pod(variant, f"{variant}-{i}", kv, q, ns) for i, (kv, q) in enumerate(loads))


def same_pods(variant: str, n: int, kv: float, queue: float, ns: str = NS) -> tuple[PodMetrics, ...]:
    return pods(variant, *[(kv, queue)] * n, ns=ns)


def rstate(
    name: str,
    *,
    cost: float = 10.0,
    current: int,
    desired: int = 0,
    pending: int = 0,
    min_replicas: int = 1,
    max_replicas: int = 10,
    since: float | None = None,
) -> VariantReplicaState:
    return VariantReplicaState(
        name=name,
        cost=cost,
        current_replicas=current,
        desired_replicas=desired,
        pending_replicas=pending,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        desired_since_s=since,
    )


# ---- enforcer and fallback inputs -------------------------------------------------------------------------


def bounds(name: str, cost: float = 10.0, min_replicas: int = 1, max_replicas: int = 10) -> VariantBounds:
    return VariantBounds(name, cost, min_replicas, max_replicas)


def s2z(enabled: bool = False, retention_s: float = 300.0) -> ScaleToZeroConfig:
    return ScaleToZeroConfig(enabled=enabled, retention_period_s=retention_s)


def alloc(num: int, *, reason: str = "saturation-only mode: no-change", updated: float | None) -> DesiredAlloc:
    """A previous desiredOptimizedAlloc whose lastUpdate is `updated` (None = never set: the first run)."""
    return DesiredAlloc(
        num_replicas=num,
        reason=reason,
        last_run_time_s=updated if updated is not None else 0.0,
        last_update_s=updated,
    )


def fvariant(
    name: str,
    *,
    cost: float = 10.0,
    min_replicas: int = 1,
    max_replicas: int = 10,
    current: int,
    previous: DesiredAlloc | None = None,
    remembered: bool = False,
    resolved: bool = True,
) -> FallbackVariant:
    return FallbackVariant(
        bounds=bounds(name, cost, min_replicas, max_replicas),
        current_replicas=current,
        target_resolved=resolved,
        previous=previous,
        remembered=remembered,
    )


# ---- snapshots ---------------------------------------------------------------------------------------------


def spec(
    name: str,
    *,
    cost: float = 10.0,
    min_replicas: int = 1,
    max_replicas: int = 10,
    model: str = MODEL,
    ns: str = NS,
    accelerator: str = "L4",
) -> VariantSpec:
    return VariantSpec(
        key=VariantKey(ns, name),
        model_id=model,
        target_kind="Deployment",
        target_name=name,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        cost=cost,
        accelerator=accelerator,
    )


def target(name: str, replicas: int, ready: int | None = None, ns: str = NS) -> ScaleTarget:
    return ScaleTarget(
        kind="Deployment",
        namespace=ns,
        name=name,
        replicas=replicas,
        ready_replicas=replicas if ready is None else ready,
        spec_replicas=replicas,
    )


def configset(
    *,
    saturation: str | None = RECOMMENDED_SATURATION,
    scale_to_zero: str | None = None,
    env: str | None = None,
    extra: Iterable[tuple[str, str, Mapping[str, Any]]] = (),
) -> ConfigSet:
    """Global ConfigMaps with only a `default` entry each (None = that ConfigMap is absent)."""
    raw: list[tuple[str, str, Mapping[str, Any]]] = []
    if saturation is not None:
        raw.append((CONTROLLER_NS, SATURATION_CM, {"default": saturation}))
    if scale_to_zero is not None:
        raw.append((CONTROLLER_NS, SCALE_TO_ZERO_CM, {"default": scale_to_zero}))
    raw.extend(extra)
    return ConfigSet.from_raw(raw, scale_to_zero_env=env)


def s2z_yaml(enabled: bool, retention: str = "5m") -> str:
    return f"enable_scale_to_zero: {str(enabled).lower()}\nretention_period: {retention!r}\n"


@dataclass
class Fleet:
    """A model's VAs on a virtual clock: build a Snapshot per cycle, carry VA status and EngineState.

    `replicas`/`ready` are what the scale targets report; `apply()` plays the external autoscaler (HPA or
    KEDA) by moving them to the last decision. Pods are passed per cycle.
    """

    specs: Sequence[VariantSpec]
    config: EngineConfig = field(default_factory=lambda: EngineConfig(configmaps=configset()))
    replicas: dict[str, int] = field(default_factory=dict)
    ready: dict[str, int] = field(default_factory=dict)
    statuses: dict[VariantKey, VariantStatus] = field(default_factory=dict)
    state: engine.EngineState = field(default_factory=engine.EngineState)
    request_count: float | None = None
    missing_targets: set[str] = field(default_factory=set)
    last: CycleResult | None = None

    def snapshot(self, now_s: float, pods: Sequence[PodMetrics], *, metrics: bool = True) -> Snapshot:
        views = []
        for s in self.specs:
            name = s.key.name
            tgt = None
            if name not in self.missing_targets:
                tgt = target(name, self.replicas.get(name, 0), self.ready.get(name), ns=s.key.namespace)
            views.append(VariantView(spec=s, status=self.statuses.get(s.key, VariantStatus()), target=tgt))
        models = {}
        if self.request_count is not None:
            for s in self.specs:
                models[s.model] = ModelTraffic(key=s.model, request_count=self.request_count)
        return Snapshot(
            taken_at_s=now_s, variants=tuple(views), pods=tuple(pods), models=models, metrics_available=metrics
        )

    def cycle(self, now_s: float, pods: Sequence[PodMetrics] = (), *, metrics: bool = True) -> CycleResult:
        snap = self.snapshot(now_s, pods, metrics=metrics)
        result, self.state = engine.decide(snap, self.state, self.config, now_s)
        self.statuses.update(engine.statuses(result, snap))
        self.last = result
        return result

    def decision(self, name: str) -> VariantDecision:
        assert self.last is not None
        return self.last.decisions[key(name, self.specs[0].key.namespace)]

    def desired(self) -> dict[str, int]:
        assert self.last is not None
        return {k.name: d.desired_replicas for k, d in self.last.decisions.items()}

    def apply(self) -> None:
        """The external autoscaler reaches the last decision and every replica becomes ready."""
        for name, n in self.desired().items():
            self.replicas[name] = n
            self.ready[name] = n

    def restart(self) -> None:
        """A new process (restart or fail-over): memory is gone, VA status survives."""
        self.state = engine.EngineState()


def condition(decision: VariantDecision, kind: str) -> Any:
    return next(c for c in decision.conditions if c.type == kind)


PREPARE_FAILED = "preparing the models at once failed"
"""The cycle warning of an analyzer whose `prepare` raised (engine/pipeline.py `_prepared`)."""


def assert_prepared_decides_as_alone(
    prepared: Sequence[CycleResult], alone: Sequence[CycleResult], *, warned: bool
) -> None:
    """Cycle by cycle, the same decisions and analyses with an analyzer's `prepare` as with each model analysed
    alone (`prepare` doing nothing, or raising: then a cycle warning, never a model's error)."""
    for with_prepare, without in zip(prepared, alone, strict=True):
        assert with_prepare.decisions == without.decisions
        assert with_prepare.analyses == without.analyses
        assert not without.errors
        failed = [w for w in without.warnings if PREPARE_FAILED in w]
        assert bool(failed) is warned
        assert not any(PREPARE_FAILED in w for w in with_prepare.warnings)
