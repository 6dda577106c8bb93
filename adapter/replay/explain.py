"""`wva-adapter explain FIXTURE [--va NS/NAME]`: one recorded cycle, told to a person.

The account is built from the same replay the `replay` verb runs, so it states the same facts: per model, the
inputs that mattered (per variant replicas, readiness, cost, bounds, pod figures), the analyzer's figures, the
allocation, and per variant the path taken (optimizer, fallback, last resort, scale-from-zero), the rule that
fired with its numbers (the reason) and the final count within its bounds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from adapter.domain.ids import VariantKey
from adapter.domain.latency import ModelLatency
from adapter.domain.text import excerpt, plain
from adapter.replay import fixture as fx
from adapter.replay import runner

_FIGURES = (
    ("total_supply", "supply"),
    ("total_demand", "demand"),
    ("utilization", "utilisation"),
    ("required_capacity", "required"),
    ("spare_capacity", "spare"),
    ("total_arrival_rps", "arrival (req/s)"),
    ("total_replicas", "replicas reporting"),
    ("non_saturated_count", "not saturated"),
    ("avg_spare_kv", "avg spare KV"),
    ("avg_spare_queue", "avg spare queue"),
    ("should_scale_up", "scale-up triggered"),
    ("scale_down_safe", "scale-down safe"),
)


def explain(fixture: fx.Fixture, vas: Sequence[Any], *, only: VariantKey | None = None) -> str:
    return "".join(f"{line}\n" for line in explain_lines(fixture, vas, only=only))


def explain_lines(fixture: fx.Fixture, vas: Sequence[Any], *, only: VariantKey | None = None) -> Iterator[str]:
    """The account line by line, each cycle told as soon as it is replayed (the CLI prints as it goes, so a
    long fixture never sits in memory as a whole)."""
    specs = {va.key: va.to_spec() for va in vas}
    yield f"{plain(fixture.name, 200) if fixture.name else '(unnamed fixture)'}"
    problems = fx.configmap_problems(fixture)
    if problems:
        yield "Configuration problems (each invalid entry is dropped; the rest of its ConfigMap applies):"
        yield from (f"  ! {problem}" for problem in problems)
    targets: dict[tuple[str, str], fx.FixtureScaleTarget] = {}
    traffic: dict[str, fx.FixtureModel] = {}
    passed = True
    replayed = runner.cycles(fixture, list(vas))
    for index, (cycle, out) in enumerate(zip(fixture.cycles, replayed, strict=True)):
        lines: list[str] = [""]
        passed = passed and not out["mismatches"]
        if cycle.kind == "scale-from-zero":
            lines.append(f"Cycle {index + 1} at {out['now']} — scale-from-zero poll (EPP queues of idle models)")
            lines.extend(_wake_lines(cycle, out, only))
            yield from lines
            continue
        lines.append(f"Cycle {index + 1} at {out['now']} — Prometheus {cycle.prometheus}")
        pods_by_variant: dict[str, list[fx.FixturePod]] = {}
        for pod in cycle.pods:
            pods_by_variant.setdefault(f"{pod.namespace}/{pod.variant}", []).append(pod)
        if cycle.scale_targets is not None:  # a cycle without them inherits the previous cycle's, as replay does
            targets = {(t.namespace, t.name): t for t in cycle.scale_targets}
        if cycle.models is not None:
            traffic = {f"{m.namespace}/{m.model_id}": m for m in cycle.models}
        for model_key, model in out["models"].items():
            told = _model_lines(
                model_key,
                model,
                out,
                specs=specs,
                targets=targets,
                pods_by_variant=pods_by_variant,
                recorded=traffic.get(model_key),
                only=only,
            )
            if not told:
                continue  # another model than the one asked about
            lines.extend(told)
            for mismatch in out["mismatches"]:
                lines.append(
                    f"    ! recorded {mismatch['field']} {excerpt(mismatch['expected'], 200)}, "
                    f"replayed {excerpt(mismatch['actual'], 200)}"
                )
        yield from lines
    verdict = "the replay reproduces the recorded decisions" if passed else "the replay DIFFERS from the record"
    yield ""
    yield f"Replay check: {verdict}."


def _model_lines(
    model_key: str,
    model: Mapping[str, Any],
    out: Mapping[str, Any],
    *,
    specs: Mapping[VariantKey, Any],
    targets: Mapping[tuple[str, str], fx.FixtureScaleTarget],
    pods_by_variant: Mapping[str, list[fx.FixturePod]],
    recorded: fx.FixtureModel | None,
    only: VariantKey | None,
) -> list[str]:
    """One model of one cycle: its inputs, the analyzer's figures and the decisions."""
    lines: list[str] = []
    keys = [k for k, spec in specs.items() if f"{k.namespace}/{spec.model_id}" == model_key]
    if only is not None and only not in keys:
        return lines
    lines.append(f"  Model {model_key} — analyzer {model['analyzer']}")
    lines.append("    Inputs:")
    for key in sorted(keys):
        spec = specs[key]
        target = targets.get((key.namespace, spec.target_name))
        where = f"replicas {target.replicas} (ready {target.ready_replicas})" if target else "scale target not found"
        bounds = f"bounds [{spec.min_replicas}, {spec.max_replicas}]"
        pods = _pod_summary(pods_by_variant.get(str(key), []))
        startup = _startup_summary(target.startup_s if target else None)
        lines.append(f"      {key.name}: {where}, cost {spec.cost:g}/h, {bounds}{pods}{startup}")
    if recorded is not None and recorded.latency is not None:
        lines.append(_latency_line(fx.model_latency(recorded.latency), model["analysis"]))
    lines.extend(_analysis_lines(model["analysis"]))
    lines.append("    Decisions:")
    for key in sorted(keys):
        if only is not None and key != only:
            continue
        d = out["decisions"].get(str(key))
        if d is None:
            continue
        move = f"{d['current_replicas']} → {d['desired_replicas']}"
        lines.append(f"      {key.name}: {move}  [{d['path']}]  {d['reason']}")
        for note in d.get("notes", []):
            lines.append(f"        note: {note}")
    return lines


def _wake_lines(cycle: fx.FixtureCycle, out: Mapping[str, Any], only: VariantKey | None) -> list[str]:
    """A scale-from-zero poll: each idle model's EPP queue, and what it woke."""
    lines = []
    for model in cycle.models or ():
        queue = "unknown" if model.epp_queue_size is None else _fmt(model.epp_queue_size)
        lines.append(f"  Model {model.namespace}/{model.model_id} — EPP queue {queue}")
    for key, d in out["decisions"].items():
        if only is None or key == str(only):
            move = f"{d['current_replicas']} → {d['desired_replicas']}"
            lines.append(f"      {VariantKey.parse(key).name}: {move}  [{d['path']}]  {d['reason']}")
    return lines


def _pod_summary(pods: Sequence[fx.FixturePod]) -> str:
    if not pods:
        return "; no pod reports metrics"
    kv = [p.metrics.kv_cache_usage for p in pods if p.metrics.kv_cache_usage is not None]
    queue = [p.metrics.queue_length for p in pods if p.metrics.queue_length is not None]
    rate = [p.metrics.arrival_rate_rps for p in pods if p.metrics.arrival_rate_rps is not None]
    parts = [f"{len(pods)} pod(s) reporting"]
    if kv:
        parts.append(f"KV {min(kv):.2f}–{max(kv):.2f}")
    if queue:
        parts.append(f"queue {min(queue):g}–{max(queue):g}")
    if rate:
        parts.append(f"arrival {sum(rate):.3g} req/s")
    return "; " + ", ".join(parts)


def _startup_summary(startup_s: Sequence[float] | None) -> str:
    """`; startup 90–120 s (2 ready pods)`: creation → Ready of the target's ready pods, when recorded."""
    if not startup_s:
        return ""
    low, high = min(startup_s), max(startup_s)
    span = f"{low:g} s" if low == high else f"{low:g}–{high:g} s"
    return f"; startup {span} ({len(startup_s)} ready pod{'s' if len(startup_s) > 1 else ''})"


def _latency_line(latency: ModelLatency, analysis: Mapping[str, Any]) -> str:
    """The model's latency histograms: observations per second, and the fractions within the SLO's targets when
    the analysis names them ("exact" at a bucket edge, else interpolated)."""
    parts = []
    slo = analysis.get("slo") if isinstance(analysis.get("slo"), Mapping) else None
    targets = {"TTFT": "target_ttft_ms", "TPOT": "target_itl_ms"}
    for label, histogram in (("TTFT", latency.ttft), ("TPOT", latency.tpot)):
        if histogram is None:
            parts.append(f"{label} no series")
            continue
        text = f"{label} {histogram.total_rps:.3g}/s"
        target_ms = slo.get(targets[label]) if slo is not None else None
        if isinstance(target_ms, int | float) and not isinstance(target_ms, bool):
            within = histogram.fraction_within(target_ms / 1000.0)
            exact = "exact" if histogram.is_edge(target_ms / 1000.0) else "interpolated"
            text += f", within {target_ms:g} ms " + ("n/a" if within is None else f"{within:.1%} ({exact})")
        parts.append(text)
    return f"    Latency over {latency.window_s:g} s: " + "; ".join(parts)


def _analysis_lines(analysis: Mapping[str, Any]) -> list[str]:
    lines = []
    figures = [f"{label} {_fmt(analysis[key])}" for key, label in _FIGURES if key in analysis]
    if "reason" in analysis:
        lines.append(f"    No analysis: {analysis['reason']}")
    if figures:
        lines.append("    Analysis: " + ", ".join(figures))
    slo = analysis.get("slo")
    if isinstance(slo, Mapping):
        lines.append(
            f"    SLO: TTFT {slo.get('target_ttft_ms')} ms, ITL {slo.get('target_itl_ms')} ms ({slo.get('source')})"
        )
    lines.extend(_predictive_lines(analysis))
    variants = analysis.get("variants")
    if isinstance(variants, Mapping):
        for name, figs in sorted(variants.items()):
            if isinstance(figs, Mapping):
                shown = ", ".join(f"{k} {_fmt(v)}" for k, v in figs.items() if v is not None)
                lines.append(f"      {name}: {shown}")
    allocation = analysis.get("allocation")
    if isinstance(allocation, Mapping):
        unmet = allocation.get("unmet_capacity")
        lines.append(
            f"    Allocation: {allocation.get('optimizer')} → {dict(allocation.get('targets', {}))}"
            + (f", unmet {_fmt(unmet)}" if unmet else "")
        )
    return lines


def _predictive_lines(analysis: Mapping[str, Any]) -> list[str]:
    """The predictive analyzer's figures: the demand and its forecast over the lead, the headroom and the
    attainment feedback behind it, and any advice."""
    lines = []
    demand = analysis.get("demand")
    if isinstance(demand, Mapping):
        raw = demand.get("forecast")
        forecast: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        period = forecast.get("period_s")
        seasonal = forecast.get("seasonal_rps")
        season = f"period {_fmt(period)} s, seasonal {_fmt(seasonal)} req/s" if period else "no period"
        if forecast.get("rise_foreseen"):
            season += " (the season foresaw the present rise: the slope is not extrapolated)"
        if forecast.get("seen_rise_rps") is not None:
            season += (
                f" (a rise seen before: the trend extrapolated to at most {_fmt(forecast.get('seen_rise_rps'))} req/s,"
                " where it went)"
            )
        lines.append(
            f"    Demand: {_fmt(demand.get('demand_rps'))} req/s = max(arrivals {_fmt(demand.get('arrival_rps'))}, "
            f"forecast peak {_fmt(forecast.get('peak_rps'))} over the lead {_fmt(demand.get('lead_s'))} s) + backlog "
            f"{_fmt(demand.get('backlog'))} requests ({_fmt(demand.get('backlog_rps'))} req/s to drain)"
        )
        lines.append(
            f"    Forecast: trend {_fmt(forecast.get('trend_rps'))} req/s (level {_fmt(forecast.get('level_rps'))}, "
            f"slope {_fmt(forecast.get('slope_rps_per_s'))} req/s per s, σ {_fmt(forecast.get('sigma_rps'))}), "
            + f"{season}; {forecast.get('points')} points of history"
        )
    if analysis.get("held_rps") is not None:
        lines.append(
            f"    Scale-down keeps room for {_fmt(analysis.get('held_rps'))} req/s: from about the present rate the "
            "load has risen that far within a startup again and again"
        )
    if analysis.get("pending_removal_rps") is not None:
        lines.append(
            f"    Scale-down asked last cycle, not applied yet: {_fmt(analysis.get('pending_removal_rps'))} req/s of "
            "replicas, still asked while the fleet without them holds the demand (no margin while it waits)"
        )
    headroom = analysis.get("headroom")
    if isinstance(headroom, Mapping):
        measured = headroom.get("measured_attainment")
        bracket = headroom.get("bucket_bracket")
        between = (
            f", between {100 * bracket[0]:.2f} and {100 * bracket[1]:.2f} % by the bucket edges"
            if isinstance(bracket, list) and len(bracket) == 2
            else ""
        )
        lines.append(
            f"    Headroom: {_fmt(headroom.get('value'))} (attainment measured "
            f"{'–' if measured is None else f'{100 * measured:.2f} %'}{between} over "
            f"{_fmt(headroom.get('completions_in_window'))} requests, target {_fmt(headroom.get('target'))}"
            + (f"; held: {headroom.get('hold')}" if headroom.get("hold") else "")
            + ")"
        )
    for tip in analysis.get("advice") or ():
        lines.append(f"    Advice: {tip}")
    return lines


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)
