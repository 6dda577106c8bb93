"""Play a fixture's cycles through the engine, carrying VA status and engine state from cycle to cycle."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from adapter import engine
from adapter.config.configmaps import ConfigSet
from adapter.config.engine import EngineConfig
from adapter.config.va import VariantAutoscaling
from adapter.domain.errors import FixtureError
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import ModelTraffic, NodeGpus, ScaleTarget, Snapshot, VariantStatus, VariantView
from adapter.domain.timefmt import format_rfc3339, parse_rfc3339_s
from adapter.engine.state import StateFormatError, state_from_json
from adapter.reconciler.loop import decide_cycle
from adapter.replay import fixture as fx

RESULT_SCHEMA = "wva-replay-result/v1"


def run(fixture: fx.Fixture, vas: list[VariantAutoscaling], *, scale_to_zero_env: str | None = None) -> dict[str, Any]:
    """Return the `wva-replay-result/v1` document for one fixture (every cycle's result in memory; `play` gives
    them one at a time)."""
    cycles = list(play(fixture, vas, scale_to_zero_env=scale_to_zero_env))
    return result_document(fixture, cycles)


def result_document(fixture: fx.Fixture, cycles: list[dict[str, Any]]) -> dict[str, Any]:
    passed = all(not cycle["mismatches"] for cycle in cycles)
    return {"schema": RESULT_SCHEMA, "name": fixture.name, "cycles": cycles, "passed": passed}


def play(
    fixture: fx.Fixture, vas: list[VariantAutoscaling], *, scale_to_zero_env: str | None = None
) -> Iterator[dict[str, Any]]:
    """Each cycle's result (`wva-replay-result/v1` `cycles[]`) as soon as it is decided, VA status and engine state
    carried from one to the next. A caller that writes each and lets it go holds one cycle's result at a time:
    a cycle of 20,000 VAs is ~110 MB of Python objects, so collecting 30 of them (what `run` does) took 3.8 GB
    (issue 22); the CLI streams them."""
    configmaps = ConfigSet.from_raw(
        fx.configmap_triples(fixture),
        controller_namespace=fixture.controller_namespace,
        scale_to_zero_env=fixture.scale_to_zero_env if fixture.scale_to_zero_env is not None else scale_to_zero_env,
    )
    config = EngineConfig(configmaps=configmaps)
    statuses: dict[VariantKey, VariantStatus] = {va.key: va.to_status() for va in vas}
    specs = {va.key: va.to_spec() for va in vas}
    state = initial_state(fixture)
    targets: dict[tuple[str, str], ScaleTarget] = {}
    models: dict[Any, ModelTraffic] = {}
    nodes: tuple[NodeGpus, ...] = ()
    for cycle in fixture.cycles:
        now_s = cycle.now_s if cycle.now_s is not None else parse_rfc3339_s(cycle.now)
        if cycle.scale_targets is not None:
            targets = {(t.namespace, t.name): fx.scale_target(t) for t in cycle.scale_targets}
        if cycle.models is not None:
            models = {m.key: m for m in map(fx.model_traffic, cycle.models)}
        if cycle.nodes is not None:
            nodes = tuple(map(fx.node, cycle.nodes))
        views = tuple(
            VariantView(
                spec=replace(spec, accelerator=spec.accelerator),
                status=statuses[key],
                target=targets.get((key.namespace, spec.target_name)),
            )
            for key, spec in sorted(specs.items())
        )
        snapshot = Snapshot(
            taken_at_s=now_s,
            variants=views,
            pods=tuple(map(fx.pod_metrics, cycle.pods)),
            models=models,
            nodes=nodes,
            metrics_available=cycle.prometheus == "ok",
            unavailable_models=frozenset(ModelKey(m.namespace, m.model_id) for m in cycle.unavailable_models or ()),
        )
        if cycle.kind == "scale-from-zero":
            result, state = engine.wake(snapshot, state, now_s)
        else:
            result, state = decide_cycle(snapshot, state, config, now_s)
        new_statuses = engine.statuses(result, snapshot)
        statuses.update(new_statuses)
        mismatches = _mismatches(cycle, result.decisions)
        yield (
            {
                "now": format_rfc3339(now_s),
                **({"kind": cycle.kind} if cycle.kind != "decide" else {}),
                "decisions": {
                    str(key): {
                        "desired_replicas": d.desired_replicas,
                        "current_replicas": d.current_replicas,
                        "reason": d.reason,
                        "analyzer": str(d.analyzer),
                        "path": str(d.path),
                        "last_update": _last_update(new_statuses[key]),
                        **(
                            {
                                "recommendation": {
                                    "lower_bound": d.recommendation.lower_bound,
                                    "target": d.recommendation.target,
                                    "upper_bound": d.recommendation.upper_bound,
                                }
                            }
                            if d.recommendation is not None
                            else {}
                        ),
                        **({"notes": list(d.notes)} if d.notes else {}),
                    }
                    for key, d in sorted(result.decisions.items())
                },
                "models": {
                    str(key): {"analyzer": str(a.analyzer), "analysis": dict(a.analysis)}
                    for key, a in sorted(result.analyses.items())
                },
                "mismatches": mismatches,
            }
        )


def initial_state(fixture: fx.Fixture) -> engine.EngineState:
    """The fixture's recorded engine memory, or an empty one. Raises FixtureError at `$.engine_state…`."""
    if fixture.engine_state is None:
        return engine.EngineState()
    try:
        return state_from_json(fixture.engine_state, "$.engine_state")
    except StateFormatError as exc:
        raise FixtureError(exc.path, str(exc).removeprefix(f"{exc.path}: ")) from None


def _mismatches(cycle: fx.FixtureCycle, decisions: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key_text, want in sorted(cycle.expect.items()):
        got = decisions.get(VariantKey.parse(key_text))
        if got is None:
            out.append({"variant": key_text, "field": "decision", "expected": "a decision", "actual": None})
            continue
        if want.desired_replicas is not None and got.desired_replicas != want.desired_replicas:
            out.append(
                {
                    "variant": key_text,
                    "field": "desired_replicas",
                    "expected": want.desired_replicas,
                    "actual": got.desired_replicas,
                }
            )
        if want.reason is not None and want.reason not in got.reason:
            out.append({"variant": key_text, "field": "reason", "expected": want.reason, "actual": got.reason})
    return out


def _last_update(status: VariantStatus) -> str | None:
    desired = status.desired
    if desired is None or desired.last_update_s is None:
        return None
    return format_rfc3339(desired.last_update_s)
