"""Simulated world for `demo` and `simulate`: workloads, a vLLM fleet on a virtual clock, HPA/KEDA emulation.

Nothing here reads the wall clock: every call takes `now_s` / `until_s`. The fleet produces domain
`Snapshot`s (the demo) and scrapes (`metricspath.SeriesStore`, the simulated Prometheus `simulate` queries
through the collector), and accepts replica counts. `simulate` runs the reconciler `serve` runs
(`pipeline`), selects policies (`policies`), prices the clairvoyant oracle (`oracle`) and plots (`plot`);
see docs/simulator.md.
"""

from adapter.sim.actuators import (
    Actuator,
    DirectActuator,
    HpaConfig,
    HpaController,
    HpaEmulator,
    KedaConfig,
    KedaEmulator,
    ScalingPolicy,
    actuator_from_spec,
    average_value_proposal,
)
from adapter.sim.fleet import (
    FleetConfig,
    FleetUsage,
    MetricWindows,
    PodState,
    RequestOutcomes,
    ScaleEvent,
    SimulatedFleet,
    StartupTime,
    TimelinePoint,
    VariantConfig,
    VariantUsage,
)
from adapter.sim.replica import PerfParams, ReplicaSim
from adapter.sim.workload import (
    BurstArrivals,
    DiurnalArrivals,
    PoissonArrivals,
    Request,
    StepArrivals,
    SyntheticWorkload,
    TokenLengths,
    TraceFormatError,
    TraceWorkload,
    load_trace,
    synthetic_requests,
    trace_duration_s,
    workload_from_spec,
)

__all__ = [
    "Actuator",
    "BurstArrivals",
    "DirectActuator",
    "DiurnalArrivals",
    "FleetConfig",
    "FleetUsage",
    "HpaConfig",
    "HpaController",
    "HpaEmulator",
    "KedaConfig",
    "KedaEmulator",
    "MetricWindows",
    "PerfParams",
    "PodState",
    "PoissonArrivals",
    "ReplicaSim",
    "Request",
    "RequestOutcomes",
    "ScaleEvent",
    "ScalingPolicy",
    "SimulatedFleet",
    "StartupTime",
    "StepArrivals",
    "SyntheticWorkload",
    "TimelinePoint",
    "TokenLengths",
    "TraceFormatError",
    "TraceWorkload",
    "VariantConfig",
    "VariantUsage",
    "actuator_from_spec",
    "average_value_proposal",
    "load_trace",
    "synthetic_requests",
    "trace_duration_s",
    "workload_from_spec",
]
