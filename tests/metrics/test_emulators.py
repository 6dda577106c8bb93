"""The emulators expose real metric names and labels (what the e2e test's assertions rest on)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from adapter.sim.replica import PerfParams, ReplicaSim, SimRequest
from adapter.sim.workload import Request

from .emulators import EppPod, SimDrivenPod, VllmPod


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_vllm_pod_current_names_and_lazy_counters() -> None:
    clock = Clock()
    pod = VllmPod("m", clock=clock)
    pod.set_load(kv_cache_usage=0.4, waiting=3, running=7, success_rps=2)
    clock.now_s += 5
    got = samples(pod.render())
    lab = (("engine", "0"), ("model_name", "m"))
    assert got[("vllm:kv_cache_usage_perc", lab)] == 0.4
    assert got[("vllm:num_requests_waiting", lab)] == 3
    assert got[("vllm:num_requests_running", lab)] == 7
    stop = tuple(sorted((*lab, ("finished_reason", "stop"))))
    length = tuple(sorted((*lab, ("finished_reason", "length"))))
    assert got[("vllm:request_success_total", stop)] == 10
    assert got[("vllm:request_success_total", length)] == 0  # vLLM creates every child at start-up
    assert got[("vllm:request_prompt_tokens_count", lab)] == 10
    assert got[("vllm:request_prompt_tokens_sum", lab)] == 2000
    assert got[("vllm:inter_token_latency_seconds_count", lab)] == 10
    assert got[("vllm:prefix_cache_queries_total", lab)] == 2000
    info = next(k for k in got if k[0] == "vllm:cache_config_info")
    assert ("block_size", "16") in info[1]
    assert ("num_gpu_blocks", "1024") in info[1]
    assert not any(name.startswith("vllm:gpu_") for name, _ in got)


def test_vllm_pod_legacy_names() -> None:
    clock = Clock()
    pod = VllmPod("m", legacy=True, clock=clock)
    pod.set_load(kv_cache_usage=0.2, success_rps=1)
    clock.now_s += 3
    names = {name for name, _ in samples(pod.render())}
    assert {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_count", "vllm:request_success"} <= names
    assert {
        "vllm:kv_cache_usage_perc",
        "vllm:inter_token_latency_seconds_count",
        "vllm:request_success_total",
    }.isdisjoint(names)


def test_epp_pod_families() -> None:
    clock = Clock()
    legacy, new, both = (
        EppPod(pool="p", clock=clock),
        EppPod(pool="p", new_names=True, clock=clock),
        EppPod(pool="p", both=True, clock=clock),
    )
    for epp in (legacy, new, both):
        epp.set_queue("m", 2, 20)
        epp.set_dispatch_rate(namespace="ns", pod="pod-0", model="m", rps=4)
    clock.now_s += 2
    legacy_names = {n for n, _ in samples(legacy.render())}
    new_samples = samples(new.render())
    assert "inference_extension_flow_control_queue_size" in legacy_names
    assert "inference_extension_scheduler_attempts_total" in legacy_names
    attempts = next(v for (n, lab), v in new_samples.items() if n == "llm_d_epp_scheduler_attempts_total")
    assert attempts == 8
    assert any(("endpoint_name", "pod-0") in lab for n, lab in new_samples if n == "llm_d_epp_scheduler_attempts_total")
    both_names = {n for n, _ in samples(both.render())}
    assert {"llm_d_epp_flow_control_queue_size", "inference_extension_flow_control_queue_size"} <= both_names


def test_sim_driven_pod_reports_the_replica_state() -> None:
    clock = Clock()
    sim = ReplicaSim(PerfParams(kv_cache_tokens=4000, max_num_seqs=2), start_s=0.0)
    for rid in range(5):
        sim.enqueue(SimRequest(rid, Request(0.0, input_tokens=500, output_tokens=2000), arrival_s=0.0))
    pod = SimDrivenPod("m", sim, clock=clock)
    clock.now_s += 1.0
    got = samples(pod.render())
    lab = (("engine", "0"), ("model_name", "m"))
    assert got[("vllm:num_requests_running", lab)] == 2  # max_num_seqs
    assert got[("vllm:num_requests_waiting", lab)] == 3
    assert 0 < got[("vllm:kv_cache_usage_perc", lab)] <= 1
    assert sim.clock_s >= 1.0


def test_vllm_pod_latency_histograms_and_their_names() -> None:
    """vLLM's default TTFT and ITL-family edges; the per-request TPOT histogram on current pods; the deprecated
    per-token name beside the current ones (0.11) or instead of them (legacy); `set_latencies` cycles."""
    clock = Clock()
    lab = (("engine", "0"), ("model_name", "m"))
    current = VllmPod("m", clock=clock, also_deprecated_tpot=True)
    current.set_load(success_rps=1)
    current.set_latencies(ttft_s=[0.3, 1.5, 3.0, 0.3], tpot_s=[0.02, 0.2], itl_s=[0.3])
    clock.now_s += 8
    got = samples(current.render())
    assert current.observed["ttft"] == [0.3, 1.5, 3.0, 0.3] * 2
    assert current.observed["tpot"] == [0.02, 0.2] * 4

    def bucket(name: str, le: str) -> float:
        return got[(f"{name}_bucket", tuple(sorted((*lab, ("le", le)))))]

    ttft = "vllm:time_to_first_token_seconds"
    assert [bucket(ttft, le) for le in ("0.25", "0.5", "1.0", "2.5", "5.0", "2560.0", "+Inf")] == [0, 4, 4, 6, 8, 8, 8]
    tpot = "vllm:request_time_per_output_token_seconds"
    assert [bucket(tpot, le) for le in ("0.01", "0.025", "0.15", "0.2", "+Inf")] == [0, 4, 4, 8, 8]
    assert bucket("vllm:time_per_output_token_seconds", "0.3") == 8  # the deprecated twin of the per-token ITL
    assert bucket("vllm:inter_token_latency_seconds", "0.2") == 0
    legacy = VllmPod("m", clock=clock, legacy=True)
    names = {name for name, _ in samples(legacy.render())}
    assert "vllm:time_per_output_token_seconds_bucket" in names
    assert "vllm:request_time_per_output_token_seconds_bucket" not in names
    assert "vllm:inter_token_latency_seconds_bucket" not in names
