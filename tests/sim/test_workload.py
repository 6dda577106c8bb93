"""Workload generators and trace loaders (adapter/sim/workload.py)."""

from __future__ import annotations

import gzip
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"
AZURE_CONV = TRACES / "azure_llm_2023_conv.csv.gz"
AZURE_CODE = TRACES / "azure_llm_2023_code.csv.gz"
MOONCAKE_CONV = TRACES / "mooncake_conversation_trace.jsonl.gz"
MOONCAKE_SYN = TRACES / "mooncake_synthetic_trace.jsonl.gz"


def _expected_count(process: object, t0: float, t1: float) -> float:
    """∫ λ(t) dt over [t0, t1) by the midpoint rule on a fine grid."""
    grid = np.linspace(t0, t1, 20001)
    mid = (grid[:-1] + grid[1:]) / 2
    return float(np.sum(process.rate_at(mid)) * (grid[1] - grid[0]))  # type: ignore[attr-defined]


PROCESSES = [
    pytest.param(PoissonArrivals(rate_rps=5.0), 3600.0, id="poisson-5rps"),
    pytest.param(PoissonArrivals(rate_rps=0.2), 3600.0, id="poisson-0.2rps"),
    pytest.param(DiurnalArrivals(base_rps=2.0, peak_rps=10.0, period_s=1800.0), 3600.0, id="diurnal-2-10"),
    pytest.param(StepArrivals(steps=((0.0, 2.0), (600.0, 8.0), (1200.0, 1.0))), 1800.0, id="step-2-8-1"),
    pytest.param(
        BurstArrivals(base_rps=1.0, burst_rps=30.0, burst_start_s=300, burst_duration_s=60, burst_every_s=600),
        1800.0,
        id="burst-1-30",
    ),
]


@pytest.mark.parametrize(("process", "duration_s"), PROCESSES)
@pytest.mark.parametrize("seed", [1, 2])
def test_rate_statistics_match_the_rate_function(process: object, duration_s: float, seed: int) -> None:
    reqs = list(synthetic_requests(process, duration_s=duration_s, seed=seed))  # type: ignore[arg-type]
    times = np.array([r.arrival_s for r in reqs])
    # whole run and each sixth of it: Poisson counts, so allow 4 standard deviations
    edges = np.linspace(0.0, duration_s, 7)
    for t0, t1 in [(0.0, duration_s), *itertools.pairwise(edges)]:
        expected = _expected_count(process, t0, t1)
        got = int(np.count_nonzero((times >= t0) & (times < t1)))
        assert abs(got - expected) <= 4 * math.sqrt(max(expected, 1.0)) + 1, (t0, t1, got, expected)


def test_poisson_interarrival_times_are_exponential() -> None:
    reqs = list(synthetic_requests(PoissonArrivals(10.0), duration_s=2000.0, seed=7))
    gaps = np.diff([r.arrival_s for r in reqs])
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # CV of an exponential is 1


@pytest.mark.parametrize(
    ("tokens", "n"),
    [
        pytest.param(TokenLengths(1000, 200), 20000, id="1000-200"),
        pytest.param(TokenLengths(4096, 1024, input_sigma=0.3, output_sigma=0.3), 20000, id="4096-1024-narrow"),
        pytest.param(TokenLengths(100, 50, input_sigma=0.0, output_sigma=0.0), 100, id="fixed-100-50"),
    ],
)
def test_token_lengths_are_lognormal_around_the_mean(tokens: TokenLengths, n: int) -> None:
    n_in, n_out = tokens.draw(np.random.default_rng(3), n)
    assert n_in.mean() == pytest.approx(tokens.input_mean_tokens, rel=0.03)
    assert n_out.mean() == pytest.approx(tokens.output_mean_tokens, rel=0.03)
    assert n_in.min() >= 1
    assert n_out.min() >= 1
    assert n_in.max() <= tokens.max_input_tokens
    assert n_out.max() <= tokens.max_output_tokens


def test_same_seed_same_stream_other_seed_other_stream() -> None:
    wl = SyntheticWorkload(PoissonArrivals(3.0), duration_s=300.0, seed=11)
    assert list(wl) == list(wl)
    other = SyntheticWorkload(PoissonArrivals(3.0), duration_s=300.0, seed=12)
    assert list(wl) != list(other)


def test_unbounded_stream_is_lazy() -> None:
    first = list(itertools.islice(synthetic_requests(PoissonArrivals(50.0), duration_s=None, seed=1), 10))
    assert len(first) == 10


@settings(max_examples=40, deadline=None)
@given(
    base=st.floats(0.0, 20.0),
    extra=st.floats(0.0, 20.0),
    period=st.floats(10.0, 1000.0),
    duration=st.floats(1.0, 200.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_arrivals_are_sorted_and_inside_the_duration(
    base: float, extra: float, period: float, duration: float, seed: int
) -> None:
    reqs = list(synthetic_requests(DiurnalArrivals(base, base + extra, period), duration_s=duration, seed=seed))
    times = [r.arrival_s for r in reqs]
    assert times == sorted(times)
    assert all(0.0 <= t < duration for t in times)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda: PoissonArrivals(-1.0), "rate_rps", id="negative-rate"),
        pytest.param(lambda: DiurnalArrivals(5.0, 2.0, 60.0), "peak_rps", id="peak-below-base"),
        pytest.param(lambda: StepArrivals(((10.0, 1.0), (5.0, 2.0))), "steps[1]", id="steps-unsorted"),
        pytest.param(
            lambda: BurstArrivals(1.0, 5.0, burst_duration_s=60, burst_every_s=30), "burst_every_s", id="burst-overlap"
        ),
        pytest.param(lambda: TokenLengths(0.5, 10), "token means", id="token-mean"),
    ],
)
def test_invalid_processes_are_rejected(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=re_escape(message)):
        make()  # type: ignore[operator]


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


# --------------------------------------------------------------------------------------------------- traces


def test_azure_conv_first_rows() -> None:
    rows = list(load_trace(AZURE_CONV, max_requests=3))
    assert rows[0] == Request(0.0, 374, 44)
    # 18:15:50.9951690 − 18:15:46.6805900 = 4.314579 s (the 7th fractional digit is dropped)
    assert rows[1].arrival_s == pytest.approx(4.314579, abs=1e-6)
    assert (rows[1].input_tokens, rows[1].output_tokens) == (396, 109)
    assert len(rows) == 3


def test_azure_code_first_rows() -> None:
    rows = list(load_trace(AZURE_CODE, max_requests=2))
    assert rows[0] == Request(0.0, 4808, 10)
    assert rows[1].arrival_s == pytest.approx(0.052, abs=1e-6)
    assert rows[1].input_tokens == 3180


def test_mooncake_first_rows() -> None:
    rows = list(load_trace(MOONCAKE_CONV, max_requests=4))
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in rows[:3]] == [
        (0.0, 6758, 500),
        (0.0, 7322, 490),
        (0.0, 7236, 794),
    ]
    assert rows[3].input_tokens == 2290


@pytest.mark.parametrize(
    ("path", "rows", "span_s", "mean_rps"),
    [
        pytest.param(AZURE_CONV, 19366, 3502.0, 5.53, id="azure-conv"),
        pytest.param(AZURE_CODE, 8819, 3436.0, 2.57, id="azure-code"),
        pytest.param(MOONCAKE_SYN, 3993, 1022.0, 3.91, id="mooncake-synthetic"),
    ],
)
def test_whole_trace_matches_the_readme_statistics(path: Path, rows: int, span_s: float, mean_rps: float) -> None:
    reqs = list(load_trace(path))
    assert len(reqs) == rows
    assert reqs[-1].arrival_s == pytest.approx(span_s, abs=1.0)
    assert trace_duration_s(path) == pytest.approx(span_s, abs=1.0)
    assert len(reqs) / reqs[-1].arrival_s == pytest.approx(mean_rps, rel=0.02)


def test_time_scale_compresses_the_timeline() -> None:
    plain = list(load_trace(AZURE_CONV, max_requests=50))
    fast = list(load_trace(AZURE_CONV, max_requests=50, time_scale=0.5))
    assert [r.arrival_s / 2 for r in plain] == pytest.approx([r.arrival_s for r in fast])


@pytest.mark.parametrize("rate_scale", [0.5, 2.0, 2.5])
def test_rate_scale_thins_or_replicates_and_stays_sorted(rate_scale: float) -> None:
    base = list(load_trace(AZURE_CONV, duration_s=1200.0))
    scaled = list(load_trace(AZURE_CONV, duration_s=1200.0, rate_scale=rate_scale, seed=5))
    assert len(scaled) == pytest.approx(len(base) * rate_scale, rel=0.05)
    times = [r.arrival_s for r in scaled]
    assert times == sorted(times)
    assert all(0.0 <= t < 1200.0 for t in times)


def test_start_and_duration_window() -> None:
    rows = list(load_trace(AZURE_CONV, start_s=600.0, duration_s=60.0))
    assert rows
    assert all(0.0 <= r.arrival_s < 60.0 for r in rows)
    everything = list(load_trace(AZURE_CONV, duration_s=660.0))
    assert len(rows) == sum(1 for r in everything if r.arrival_s >= 600.0)


def test_loading_is_streamed(tmp_path: Path) -> None:
    """A broken row after the part that is read is never reached."""
    path = tmp_path / "t.csv"
    good = "".join(f"2023-11-16 18:00:{i:02d}.0000000,10,5\n" for i in range(10))
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + good + "garbage\n")
    assert len(list(load_trace(path, max_requests=5))) == 5
    assert len(list(load_trace(path, duration_s=4.5))) == 5
    with pytest.raises(TraceFormatError, match=r"t\.csv:12:"):
        list(load_trace(path))


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
PLAIN_HEADER = "timestamp_s,input_tokens,output_tokens\n"
GOOD_ROW = "2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize(
    ("name", "text", "line", "fragment"),
    [
        pytest.param("a.csv", AZURE_HEADER + GOOD_ROW + "yesterday,1,2\n", 3, "TIMESTAMP", id="csv-bad-timestamp"),
        pytest.param(
            "a.csv", AZURE_HEADER + GOOD_ROW + "2023-11-16 18:15:47,abc,2\n", 3, "ContextTokens", id="csv-bad-int"
        ),
        pytest.param("a.csv", AZURE_HEADER + "2023-11-16 18:15:47,5,-2\n", 2, "GeneratedTokens", id="csv-negative"),
        pytest.param(
            "a.csv", AZURE_HEADER + GOOD_ROW + GOOD_ROW + "2023-11-16 18:15:47,5\n", 4, "3 columns", id="csv-short-row"
        ),
        pytest.param("a.csv", "time,in,out\n" + GOOD_ROW, 1, "header", id="csv-bad-header"),
        pytest.param("a.csv", "", 1, "empty", id="csv-empty"),
        pytest.param(
            "a.csv",
            AZURE_HEADER + "2023-11-16 18:15:50,1,1\n2023-11-16 18:15:40,1,1\n",
            3,
            "backwards",
            id="csv-unsorted",
        ),
        pytest.param(
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1,\n',
            2,
            "invalid JSON",
            id="jsonl-bad-json",
        ),
        pytest.param("m.jsonl", '{"timestamp": 0, "input_length": 5}\n', 1, "output_length", id="jsonl-missing-key"),
        pytest.param(
            "m.jsonl",
            '{"timestamp": "x", "input_length": 5, "output_length": 1}\n',
            1,
            "timestamp",
            id="jsonl-bad-timestamp",
        ),
        pytest.param("m.jsonl", "\n[1, 2]\n", 2, "JSON object", id="jsonl-not-object"),
        pytest.param("p.csv", PLAIN_HEADER + "0,5,2\n1.5,x,2\n", 3, "column input_tokens", id="plain-bad-int"),
        pytest.param("p.csv", PLAIN_HEADER + "0,5,2\nsoon,5,2\n", 3, "column timestamp_s", id="plain-bad-time"),
        pytest.param("p.csv", PLAIN_HEADER + "nan,5,2\n", 2, "column timestamp_s", id="plain-nan-time"),
        pytest.param("p.csv", PLAIN_HEADER + "-1,5,2\n", 2, "column timestamp_s", id="plain-negative-time"),
        pytest.param("p.csv", PLAIN_HEADER + "0,5,-2\n", 2, "column output_tokens", id="plain-negative-tokens"),
        pytest.param("p.csv", PLAIN_HEADER + "3,5,2\n1,5,2\n", 3, "backwards", id="plain-unsorted"),
        pytest.param("p.csv", PLAIN_HEADER + "3,5\n", 2, "3 columns", id="plain-short-row"),
        pytest.param("p.csv", "timestamp_s;input_tokens;output_tokens\n0;1;1\n", 1, "neither", id="plain-semicolons"),
        pytest.param(
            "m.jsonl",
            '{"timestamp": 0, "input_length": 2.5, "output_length": 1}\n',
            1,
            "input_length",
            id="jsonl-fractional",
        ),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path: Path, name: str, text: str, line: int, fragment: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceFormatError) as info:
        list(load_trace(path))
    message = str(info.value)
    assert message.startswith(f"{path}:{line}:"), message
    assert fragment in message


def test_plain_csv_offsets_from_the_first_row(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text(PLAIN_HEADER + "10,512,128\n10.5,1024,0\n\n12,1,1\n")
    rows = list(load_trace(path))
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in rows] == [
        (0.0, 512, 128),
        (0.5, 1024, 1),
        (2.0, 1, 1),
    ]


@pytest.mark.parametrize("name", ["p.csv", "m.jsonl"])
def test_gzip_reads_the_same_rows(tmp_path: Path, name: str) -> None:
    text = (
        PLAIN_HEADER + "0,5,2\n1,6,3\n"
        if name.endswith(".csv")
        else '{"timestamp": 0, "input_length": 5, "output_length": 2}\n'
        '{"timestamp": 1000, "input_length": 6, "output_length": 3}\n'
    )
    plain, packed = tmp_path / name, tmp_path / f"{name}.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    assert list(load_trace(packed)) == list(load_trace(plain)) == [Request(0.0, 5, 2), Request(1.0, 6, 3)]


def test_gzip_broken_stream_is_a_trace_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(TraceFormatError, match=r"t\.csv\.gz"):
        list(load_trace(path))


def test_missing_file_and_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="cannot open"):
        list(load_trace(tmp_path / "nope.csv"))
    with pytest.raises(TraceFormatError, match="unknown trace format"):
        list(load_trace(tmp_path / "trace.parquet"))


# --------------------------------------------------------------------------------------------------- specs


def test_workload_from_spec_trace_resolves_relative_paths() -> None:
    wl = workload_from_spec(
        {"trace": "azure_llm_2023_conv.csv.gz", "time_scale": 0.5, "max_requests": 7}, base_dir=TRACES
    )
    assert isinstance(wl, TraceWorkload)
    assert wl.path == AZURE_CONV
    assert len(list(wl)) == 7


@pytest.mark.parametrize(
    ("spec", "rate"),
    [
        pytest.param({"kind": "poisson", "rate_rps": 4, "seed": 3}, 4.0, id="poisson"),
        pytest.param({"kind": "step", "steps": [[0, 2], [50, 6]]}, 4.0, id="step"),
        pytest.param({"kind": "diurnal", "base_rps": 1, "peak_rps": 7, "period_s": 100}, 4.0, id="diurnal"),
        pytest.param(
            {"kind": "burst", "base_rps": 3, "burst_rps": 13, "burst_start_s": 0, "burst_duration_s": 10},
            4.0,
            id="burst",
        ),
    ],
)
def test_workload_from_spec_synthetic(spec: dict[str, object], rate: float) -> None:
    wl = workload_from_spec({**spec, "input_tokens": 500, "output_tokens": 50}, duration_s=100.0)
    reqs = list(wl)
    assert len(reqs) == pytest.approx(rate * 100, abs=4 * math.sqrt(rate * 100))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({"kind": "gamma"}, "workload.kind", id="unknown-kind"),
        pytest.param({"kind": "poisson"}, "workload.rate_rps", id="missing-rate"),
        pytest.param({"kind": "poisson", "rate_rps": "fast"}, "workload.rate_rps", id="rate-not-number"),
        pytest.param({"kind": "step", "steps": [[0, 1, 2]]}, "workload.steps[0]", id="bad-step"),
    ],
)
def test_workload_from_spec_errors_name_the_key(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re_escape(message)):
        workload_from_spec(spec)
