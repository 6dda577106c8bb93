"""HPA and KEDA emulation on the virtual clock: what turns a served `wva_desired_replicas` into `spec.replicas`.

Both are small state machines. Each `step(now_s, desired=…, targets=…)` reads the metric the adapter serves
per variant (None = the metric could not be read) and each Deployment's `ScaleTarget`, and returns the
`spec.replicas` to apply for the variants whose count changes. They act only when due (HPA sync period, KEDA
polling interval); `next_event_s()` tells a driver loop when that is.

HPA (kube-controller-manager, autoscaling/v2, External metric, target AverageValue; research
k8s-metrics-keda-hpa.md §2):

    usage  = MilliValue(metric)  (rounded up to 1/1000),  target = 1000·averageValue
    ratio  = usage / (target · status.replicas)            (float64)
    proposal = status.replicas            if ratio is within tolerance
               ceil(usage / target)       otherwise

Tolerance test, two forms (`tolerance_mode`):
* `"abs"` (Kubernetes before the configurable-tolerance rework): within ⇔ |1 − ratio| ≤ tol.
  In float64 10 → 11 gives |1 − 1.1| = 0.10000000000000009 > 0.1, so the HPA scales up, while 10 → 9 gives
  |1 − 0.9| = 0.09999999999999998 ≤ 0.1, so the step down is swallowed (research/wva-upstream.md §7.1).
* `"bounds"` (default; Kubernetes ≥ 1.33 `Tolerances.isWithin`): within ⇔ 1 − down ≤ ratio ≤ 1 + up (inclusive);
  there 1.1 ≤ 1 + 0.1 holds exactly, so 10 → 11 is swallowed too.

Then stabilization (scale-up: the lowest proposal within `scale_up_stabilization_s`, default 0; scale-down: the
highest within `scale_down_stabilization_s`, default 300 s — a drop is applied only once every proposal of the
last 5 minutes allows it), rate policies (default up: max(+4 pods, +100 %) per 15 s; down: 100 % per 15 s) and
the [minReplicas, maxReplicas] clamp. A Deployment at 0 replicas is left alone unless minReplicas is 0
(`scale_to_zero`, the HPAScaleToZero gate); otherwise minReplicas is at least 1. A missing metric freezes the
replica count (FailedGetExternalMetric).

KEDA (research §3.4): every `polling_interval_s` it asks IsActive (desired > 0). Active at 0 replicas ⇒
scale to max(minReplicaCount, 1) at once; inactive for `cooldown_s` since the last active poll (or
`initial_cooldown_s` after creation when never active) with minReplicaCount 0 ⇒ scale to 0. Between 1 and N
the HPA KEDA creates (minReplicas = max(minReplicaCount, 1)) decides, as above. With `push=True`
(external-push trigger, StreamIsActive) an activation is acted on at the next step, not the next poll.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from adapter.domain.snapshot import ScaleTarget


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """One HPA `behavior.scale{Up,Down}.policies[]` entry."""

    kind: Literal["pods", "percent"]
    value: int
    period_s: float = 15.0


_DEFAULT_UP = (ScalingPolicy("pods", 4), ScalingPolicy("percent", 100))
_DEFAULT_DOWN = (ScalingPolicy("percent", 100),)


@dataclass(frozen=True, slots=True)
class HpaConfig:
    min_replicas: int = 1
    max_replicas: int = 10
    target_average_value: float = 1.0
    tolerance: float = 0.1
    scale_up_tolerance: float | None = None
    """Per-HPA `behavior.scaleUp.tolerance` (None = `tolerance`)."""
    scale_down_tolerance: float | None = None
    tolerance_mode: Literal["abs", "bounds"] = "bounds"
    sync_period_s: float = 15.0
    scale_up_stabilization_s: float = 0.0
    scale_down_stabilization_s: float = 300.0
    scale_up_policies: tuple[ScalingPolicy, ...] = _DEFAULT_UP
    scale_down_policies: tuple[ScalingPolicy, ...] = _DEFAULT_DOWN
    scale_to_zero: bool = False
    """HPAScaleToZero: allow minReplicas 0 (otherwise it is raised to 1)."""

    def __post_init__(self) -> None:
        if self.max_replicas < 1 or self.min_replicas < 0 or self.min_replicas > self.max_replicas:
            raise ValueError(f"HPA: need 0 <= min ({self.min_replicas}) <= max ({self.max_replicas}), max >= 1")
        if self.target_average_value <= 0:
            raise ValueError("HPA: target_average_value must be > 0")
        for tol in (self.tolerance, self.scale_up_tolerance, self.scale_down_tolerance):
            if tol is not None and tol < 0:
                raise ValueError("HPA: tolerances must be >= 0")
        if self.sync_period_s <= 0:
            raise ValueError("HPA: sync_period_s must be > 0")
        if self.scale_up_stabilization_s < 0 or self.scale_down_stabilization_s < 0:
            raise ValueError("HPA: stabilization windows must be >= 0")

    @property
    def effective_min_replicas(self) -> int:
        return self.min_replicas if self.scale_to_zero else max(1, self.min_replicas)

    def within_tolerance(self, ratio: float) -> bool:
        """The tolerance gate (see module docstring). NaN is never within."""
        up = self.tolerance if self.scale_up_tolerance is None else self.scale_up_tolerance
        down = self.tolerance if self.scale_down_tolerance is None else self.scale_down_tolerance
        if self.tolerance_mode == "bounds":
            return (1.0 - down) <= ratio <= (1.0 + up)
        return abs(1.0 - ratio) <= (up if ratio > 1.0 else down)


def average_value_proposal(metric: float, *, status_replicas: int, config: HpaConfig) -> int:
    """`GetExternalPerPodMetricReplicas`: the replica count the metric asks for, before stabilization.

    Examples (target 1, tol 0.1, abs): (metric 11, status 10) ⇒ ratio 1.1 outside ⇒ 11;
    (9, 10) ⇒ 0.9 within ⇒ 10; (3, 0) ⇒ ratio +inf ⇒ 3; (0, 0) ⇒ NaN ⇒ ceil(0) = 0.
    """
    usage_milli = math.ceil(round(metric * 1000.0, 6))
    target_milli = math.ceil(round(config.target_average_value * 1000.0, 6))
    if status_replicas > 0:
        ratio = float(usage_milli) / (float(target_milli) * float(status_replicas))
    else:
        ratio = math.inf if usage_milli > 0 else math.nan
    if config.within_tolerance(ratio):
        return status_replicas
    return math.ceil(float(usage_milli) / float(target_milli))


@dataclass(slots=True)
class _Rec:
    t_s: float
    replicas: int


@dataclass(slots=True)
class HpaController:
    """One HorizontalPodAutoscaler (one variant). `sync` runs the controller's reconcile once."""

    config: HpaConfig
    recommendations: list[_Rec] = field(default_factory=list)
    up_events: list[_Rec] = field(default_factory=list)
    down_events: list[_Rec] = field(default_factory=list)
    last_reason: str = ""

    def sync(self, now_s: float, *, metric: float | None, spec_replicas: int, status_replicas: int) -> int:
        """Returns the spec.replicas the HPA wants (== spec_replicas when it does nothing)."""
        cfg = self.config
        current = spec_replicas
        lo = cfg.effective_min_replicas
        if current == 0 and lo != 0:
            self.last_reason = "ScalingDisabled"
            return current
        if current > cfg.max_replicas:
            desired, self.last_reason = cfg.max_replicas, "AboveMaxReplicas"
        elif current < lo:
            desired, self.last_reason = lo, "BelowMinReplicas"
        elif metric is None or math.isnan(metric):
            self.last_reason = "FailedGetExternalMetric"
            return current
        else:
            proposal = average_value_proposal(metric, status_replicas=status_replicas, config=cfg)
            stabilized = self._stabilize(now_s, current, proposal)
            desired = self._rate_limit(now_s, current, stabilized)
            self.last_reason = "ValidMetricFound"
        if desired != current:
            events = self.up_events if desired > current else self.down_events
            events.append(_Rec(now_s, abs(desired - current)))
        return desired

    def _stabilize(self, now_s: float, current: int, proposal: int) -> int:
        cfg = self.config
        up_cutoff = now_s - cfg.scale_up_stabilization_s
        down_cutoff = now_s - cfg.scale_down_stabilization_s
        up_rec = down_rec = proposal
        for rec in self.recommendations:
            if rec.t_s > up_cutoff:
                up_rec = min(up_rec, rec.replicas)
            if rec.t_s > down_cutoff:
                down_rec = max(down_rec, rec.replicas)
        result = max(current, up_rec)
        result = min(result, down_rec)
        keep_after = min(up_cutoff, down_cutoff)
        self.recommendations = [r for r in self.recommendations if r.t_s > keep_after]
        self.recommendations.append(_Rec(now_s, proposal))
        return result

    def _rate_limit(self, now_s: float, current: int, desired: int) -> int:
        cfg = self.config
        lo, hi = cfg.effective_min_replicas, cfg.max_replicas
        if desired > current:
            limit = max(self._up_limit(now_s, current), current)
            hi = min(hi, limit)
        elif desired < current:
            limit = min(self._down_limit(now_s, current), current)
            lo = max(lo, limit)
        return min(max(desired, lo), hi)

    def _changes(self, events: list[_Rec], now_s: float, period_s: float) -> int:
        return sum(e.replicas for e in events if e.t_s > now_s - period_s)

    def _up_limit(self, now_s: float, current: int) -> int:
        best = -(2**31)
        for policy in self.config.scale_up_policies:
            start = (
                current
                - self._changes(self.up_events, now_s, policy.period_s)
                + self._changes(self.down_events, now_s, policy.period_s)
            )
            if policy.kind == "pods":
                proposed = start + policy.value
            else:
                proposed = math.ceil(start * (1.0 + policy.value / 100.0))
            best = max(best, proposed)
        return best if self.config.scale_up_policies else current

    def _down_limit(self, now_s: float, current: int) -> int:
        best = 2**31
        for policy in self.config.scale_down_policies:
            start = (
                current
                + self._changes(self.down_events, now_s, policy.period_s)
                - self._changes(self.up_events, now_s, policy.period_s)
            )
            proposed = start - policy.value if policy.kind == "pods" else int(start * (1.0 - policy.value / 100.0))
            best = min(best, proposed)
        return best if self.config.scale_down_policies else current


def _next_on_grid(due_s: float, now_s: float, period_s: float) -> float:
    """The next due time after `now_s` on the grid due_s + k·period: a late step runs one sync, not a burst
    of the missed ones (as a controller's resync would). Example: due 30, now 47, period 15 ⇒ 60."""
    missed = math.floor((now_s - due_s) / period_s + 1e-9)
    return due_s + (max(missed, 0) + 1) * period_s


class Actuator(Protocol):
    """What a simulation driver needs from an actuator emulation."""

    def step(
        self, now_s: float, *, desired: Mapping[str, float | None], targets: Mapping[str, ScaleTarget]
    ) -> dict[str, int]: ...

    def next_event_s(self) -> float: ...


def _spec(target: ScaleTarget) -> int:
    return 1 if target.spec_replicas is None else target.spec_replicas


class HpaEmulator:
    """One HPA per variant, all syncing every `sync_period_s` from `start_s` (the HPAs' creation)."""

    def __init__(self, configs: Mapping[str, HpaConfig], *, start_s: float = 0.0) -> None:
        self.controllers = {name: HpaController(cfg) for name, cfg in configs.items()}
        self._next_sync_s = dict.fromkeys(configs, start_s)

    def next_event_s(self) -> float:
        return min(self._next_sync_s.values(), default=math.inf)

    def step(
        self, now_s: float, *, desired: Mapping[str, float | None], targets: Mapping[str, ScaleTarget]
    ) -> dict[str, int]:
        """Sync every HPA that is due; returns {variant: new spec.replicas} for the ones that change."""
        out: dict[str, int] = {}
        for name, ctl in self.controllers.items():
            if now_s + 1e-9 < self._next_sync_s[name] or name not in targets:
                continue
            self._next_sync_s[name] = _next_on_grid(self._next_sync_s[name], now_s, ctl.config.sync_period_s)
            target = targets[name]
            spec = _spec(target)
            new = ctl.sync(now_s, metric=desired.get(name), spec_replicas=spec, status_replicas=target.replicas)
            if new != spec:
                out[name] = new
        return out


@dataclass(frozen=True, slots=True)
class KedaConfig:
    min_replica_count: int = 0
    max_replica_count: int = 100
    polling_interval_s: float = 30.0
    cooldown_s: float = 300.0
    initial_cooldown_s: float = 0.0
    push: bool = False
    """external-push (StreamIsActive): act on activation immediately instead of at the next poll."""
    hpa: HpaConfig = field(default_factory=HpaConfig)
    """Behaviour of the HPA KEDA creates; its min/max are overridden from the counts above."""

    def __post_init__(self) -> None:
        if self.min_replica_count < 0 or self.max_replica_count < max(1, self.min_replica_count):
            raise ValueError("KEDA: need 0 <= minReplicaCount <= maxReplicaCount, maxReplicaCount >= 1")
        if self.polling_interval_s <= 0 or self.cooldown_s < 0 or self.initial_cooldown_s < 0:
            raise ValueError("KEDA: polling_interval_s > 0, cooldown_s and initial_cooldown_s >= 0")

    @property
    def effective_hpa(self) -> HpaConfig:
        return replace(
            self.hpa,
            min_replicas=max(1, self.min_replica_count),
            max_replicas=self.max_replica_count,
            scale_to_zero=False,
        )


@dataclass(slots=True)
class _KedaState:
    config: KedaConfig
    hpa: HpaController
    created_s: float
    next_poll_s: float
    next_hpa_sync_s: float
    last_active_s: float | None = None
    active: bool = False


class KedaEmulator:
    """One ScaledObject per variant: activation 0↔1 by KEDA, 1↔N by the HPA it owns."""

    def __init__(self, configs: Mapping[str, KedaConfig], *, start_s: float = 0.0) -> None:
        self.states = {
            name: _KedaState(
                config=cfg,
                hpa=HpaController(cfg.effective_hpa),
                created_s=start_s,
                next_poll_s=start_s,
                next_hpa_sync_s=start_s,
            )
            for name, cfg in configs.items()
        }

    def next_event_s(self) -> float:
        return min(
            (min(s.next_poll_s, s.next_hpa_sync_s) for s in self.states.values()),
            default=math.inf,
        )

    def step(
        self, now_s: float, *, desired: Mapping[str, float | None], targets: Mapping[str, ScaleTarget]
    ) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, st in self.states.items():
            if name not in targets:
                continue
            target = targets[name]
            spec = _spec(target)
            metric = desired.get(name)
            new = self._keda(st, now_s, metric, spec)
            hpa_due = now_s + 1e-9 >= st.next_hpa_sync_s
            if hpa_due:
                st.next_hpa_sync_s = _next_on_grid(st.next_hpa_sync_s, now_s, st.hpa.config.sync_period_s)
            if new is None and hpa_due and spec > 0:
                new = st.hpa.sync(now_s, metric=metric, spec_replicas=spec, status_replicas=target.replicas)
            if new is not None and new != spec:
                out[name] = new
        return out

    def _keda(self, st: _KedaState, now_s: float, metric: float | None, spec: int) -> int | None:
        """KEDA's executor: returns a replica count when it scales 0↔1, else None (leave it to the HPA)."""
        cfg = st.config
        poll_due = now_s + 1e-9 >= st.next_poll_s
        pushed = cfg.push and metric is not None and metric > 0 and spec == 0
        if not (poll_due or pushed):
            return None
        if poll_due:
            st.next_poll_s = _next_on_grid(st.next_poll_s, now_s, cfg.polling_interval_s)
        if metric is None or math.isnan(metric):
            return None  # scaler error: KEDA neither activates nor scales to zero
        st.active = metric > 0
        if st.active:
            st.last_active_s = now_s
            if spec == 0:
                return max(1, cfg.min_replica_count)
            return None
        if spec > 0 and cfg.min_replica_count == 0:
            if st.last_active_s is None:
                idle_since, wait = st.created_s, cfg.initial_cooldown_s
            else:
                idle_since, wait = st.last_active_s, cfg.cooldown_s
            if now_s + 1e-9 >= idle_since + wait:
                return 0
        return None


class DirectActuator:
    """No HPA at all: every `period_s` the served desired count is applied as is (clamped to [min, max]).
    Useful as a baseline and for tests of the engine without actuation lag."""

    def __init__(self, bounds: Mapping[str, tuple[int, int]], *, period_s: float = 15.0, start_s: float = 0.0) -> None:
        self.bounds = dict(bounds)
        self.period_s = period_s
        self._next_s = start_s

    def next_event_s(self) -> float:
        return self._next_s

    def step(
        self, now_s: float, *, desired: Mapping[str, float | None], targets: Mapping[str, ScaleTarget]
    ) -> dict[str, int]:
        if now_s + 1e-9 < self._next_s:
            return {}
        self._next_s = _next_on_grid(self._next_s, now_s, self.period_s)
        out: dict[str, int] = {}
        for name, target in targets.items():
            value = desired.get(name)
            if value is None or math.isnan(value):
                continue
            lo, hi = self.bounds.get(name, (0, 2**31 - 1))
            new = min(max(math.ceil(value), lo), hi)
            if new != _spec(target):
                out[name] = new
        return out


class ScheduleActuator:
    """The clairvoyant oracle in the loop (`simulate --policy oracle`): a schedule fixed in advance, n_vb
    replicas of variant v in bin b = [start + b·Δ, start + (b+1)·Δ), actuated on `spec.replicas` directly (no
    HPA), each replica requested its lead L_v ahead of the first bin that needs it and kept until the last one
    ends:

        spec_v(t) = max{ n_vb : bin b overlaps [t, t + L_v] }     (bins past the last hold the last count)

    Replicas then start, become ready, drain and are paid like any other pod. Example: Δ 30 s, L 300 s,
    n = 1 everywhere but 3 in bins 10–13 (300–420 s): spec 3 from t = 300 − 300 = 0 until 420 s, then 1.
    It acts at every bin boundary and every boundary minus a lead, i.e. wherever spec_v can change.
    """

    def __init__(
        self,
        schedule: Mapping[str, Sequence[int]],
        *,
        interval_s: float,
        leads_s: Mapping[str, float],
        start_s: float = 0.0,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        for name, row in schedule.items():
            if not row:
                raise ValueError(f"schedule of {name!r} is empty")
            if leads_s.get(name, 0.0) < 0:
                raise ValueError(f"lead of {name!r} must be >= 0, got {leads_s[name]}")
        self.schedule = {name: tuple(int(n) for n in row) for name, row in schedule.items()}
        self.interval_s = interval_s
        self.leads_s = {name: float(leads_s.get(name, 0.0)) for name in schedule}
        self.start_s = start_s
        self._next_s = start_s

    def spec_at(self, name: str, t_s: float) -> int:
        row = self.schedule[name]
        return max(row[self._bin(row, t_s) : self._bin(row, t_s + self.leads_s[name]) + 1])

    def _bin(self, row: tuple[int, ...], t_s: float) -> int:
        return min(max(0, math.floor((t_s - self.start_s) / self.interval_s + 1e-9)), len(row) - 1)

    def next_event_s(self) -> float:
        return self._next_s

    def step(
        self, now_s: float, *, desired: Mapping[str, float | None], targets: Mapping[str, ScaleTarget]
    ) -> dict[str, int]:
        del desired  # the schedule is fixed in advance
        if now_s + 1e-9 < self._next_s:
            return {}
        self._next_s = self._after(now_s)
        out: dict[str, int] = {}
        for name, target in targets.items():
            if name in self.schedule:
                spec = self.spec_at(name, now_s)
                if spec != _spec(target):
                    out[name] = spec
        return out

    def _after(self, now_s: float) -> float:
        """The first change point after `now_s`: a bin boundary, or a bin boundary minus some lead."""
        best = math.inf
        for lead in {0.0, *self.leads_s.values()}:
            k = math.floor((now_s + lead - self.start_s) / self.interval_s + 1e-9) + 1
            best = min(best, self.start_s + k * self.interval_s - lead)
        return best


def actuator_from_spec(
    spec: Mapping[str, object],
    *,
    bounds: Mapping[str, tuple[int, int]],
    scale_to_zero: bool = False,
    start_s: float = 0.0,
) -> HpaEmulator | KedaEmulator | DirectActuator:
    """Build from a scenario's `actuation:` mapping (DESIGN §3.3) and each variant's (min, max) replicas.

    hpa: `sync_period_s, tolerance, tolerance_mode, scale_down_stabilization_s, scale_up_stabilization_s`;
    keda: `polling_interval_s, cooldown_s, initial_cooldown_s, push` plus the same HPA keys;
    direct: `period_s`. For KEDA minReplicaCount is 0 when `scale_to_zero` else the variant's min.
    """
    data = dict(spec)
    kind = str(data.pop("kind", "hpa"))

    def num(key: str, default: float) -> float:
        value = data.pop(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"actuation.{key}: expected a number, got {value!r}")
        return float(value)

    if kind == "direct":
        actuator = DirectActuator(bounds, period_s=num("period_s", 15.0), start_s=start_s)
        _no_extra(data)
        return actuator
    mode = str(data.pop("tolerance_mode", "bounds"))
    if mode not in ("abs", "bounds"):
        raise ValueError(f"actuation.tolerance_mode: expected abs|bounds, got {mode!r}")
    hpa_base = HpaConfig(
        tolerance=num("tolerance", 0.1),
        tolerance_mode="bounds" if mode == "bounds" else "abs",
        sync_period_s=num("sync_period_s", 15.0),
        scale_down_stabilization_s=num("scale_down_stabilization_s", 300.0),
        scale_up_stabilization_s=num("scale_up_stabilization_s", 0.0),
    )
    if kind == "hpa":
        _no_extra(data)
        return HpaEmulator(
            {
                name: replace(hpa_base, min_replicas=lo, max_replicas=max(hi, 1), scale_to_zero=scale_to_zero)
                for name, (lo, hi) in bounds.items()
            },
            start_s=start_s,
        )
    if kind == "keda":
        polling = num("polling_interval_s", 30.0)
        cooldown = num("cooldown_s", 300.0)
        initial = num("initial_cooldown_s", 0.0)
        push = bool(data.pop("push", False))
        _no_extra(data)
        return KedaEmulator(
            {
                name: KedaConfig(
                    min_replica_count=0 if scale_to_zero else lo,
                    max_replica_count=max(hi, 1),
                    polling_interval_s=polling,
                    cooldown_s=cooldown,
                    initial_cooldown_s=initial,
                    push=push,
                    hpa=hpa_base,
                )
                for name, (lo, hi) in bounds.items()
            },
            start_s=start_s,
        )
    raise ValueError(f"actuation.kind: expected hpa|keda|direct, got {kind!r}")


def _no_extra(data: Mapping[str, object]) -> None:
    if data:
        raise ValueError(f"actuation: unknown keys {sorted(data)}")
