"""`wva-adapter capacity` (DESIGN §3.4): the JSON contract, the table, and exit 2 with the flag named on every
invalid input. Error cases run in-process through `adapter.cli.main`; the happy paths also as a subprocess of the
installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adapter.analyzers.queueing import QueueModel, RequestSize, ServiceParams
from adapter.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI = REPO_ROOT / ".venv" / "bin" / "wva-adapter"
KEYS = {"max_rps", "ttft_ms", "itl_ms", "rho", "throughput_rps"}
MODEL = ["--alpha-ms", "20", "--beta-ms", "0.08", "--gamma-ms", "0.0002", "--input-tokens", "512", "--output-tokens"]
BASE = [*MODEL, "128"]
TARGETS = ["--ttft-ms", "2000", "--itl-ms", "100"]
EXAMPLE = QueueModel(ServiceParams(20, 0.08, 0.0002), RequestSize(512, 128))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(CLI)] if CLI.exists() else [sys.executable, "-m", "adapter"]
    return subprocess.run([*command, *args], check=False, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(["capacity", *args])
    except SystemExit as exc:  # argparse errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


# ---- subprocess: the user's view ---------------------------------------------------------------------------------


def test_subprocess_json_with_targets_is_lambda_star():
    result = run_cli("capacity", *BASE, *TARGETS, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == KEYS
    expected = EXAMPLE.max_rate(2000, 100)
    assert doc["max_rps"] == pytest.approx(expected.rate_rps, rel=1e-12)
    assert doc["max_rps"] == pytest.approx(11.9650, rel=1e-5)
    assert doc["itl_ms"] == pytest.approx(100.0, rel=1e-6)
    assert doc["ttft_ms"] == pytest.approx(expected.ttft_ms, rel=1e-12)
    assert doc["rho"] == pytest.approx(expected.rho, rel=1e-12)
    assert doc["throughput_rps"] == pytest.approx(expected.throughput_rps, rel=1e-12)


def test_subprocess_json_with_rate_reports_the_maximum_sustainable_rate():
    result = run_cli("capacity", *BASE, "--rate", "5", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == KEYS
    assert doc["max_rps"] == pytest.approx(EXAMPLE.rate_range_rps.max_rps, rel=1e-12)
    assert doc["ttft_ms"] == pytest.approx(102.512, rel=1e-5)
    assert doc["itl_ms"] == pytest.approx(31.0807, rel=1e-5)
    assert doc["throughput_rps"] == pytest.approx(5.0, rel=1e-9)


def test_subprocess_table_without_json():
    result = run_cli("capacity", *BASE, *TARGETS)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["max_rps", "ttft_ms", "itl_ms", "rho", "throughput_rps"]
    assert float(lines[0].split()[1]) == pytest.approx(11.965, rel=1e-4)


def test_subprocess_error_exits_2_naming_the_flag():
    result = run_cli("capacity", *MODEL, "0", *TARGETS, "--json")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "--output-tokens" in result.stderr


# ---- in-process ----------------------------------------------------------------------------------------------------


def test_json_key_set_is_exact_in_both_modes(capsys):
    for extra in (
        TARGETS,
        ["--rate", "1"],
        ["--ttft-ms", "0", "--itl-ms", "60"],
        ["--ttft-ms", "500", "--itl-ms", "0"],
    ):
        code, out, err = run_main(capsys, *BASE, *extra, "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert set(doc) == KEYS
        assert all(isinstance(v, float) for v in doc.values())
        assert 0.0 <= doc["rho"] <= 1.0
        assert doc["throughput_rps"] <= doc["max_rps"] * (1 + 1e-12)


def test_max_batch_and_max_queue_are_used(capsys):
    code, out, _ = run_main(capsys, *BASE, *TARGETS, "--max-batch", "64", "--max-queue", "10", "--json")
    assert code == 0
    expected = QueueModel(ServiceParams(20, 0.08, 0.0002), RequestSize(512, 128), max_batch=64, max_queue=10)
    assert json.loads(out)["max_rps"] == pytest.approx(expected.max_rate(2000, 100).rate_rps, rel=1e-12)


def with_value(flag: str, value: str) -> list[str]:
    """BASE + TARGETS with one flag's value replaced."""
    args = [*BASE, *TARGETS]
    args[args.index(flag) + 1] = value
    return args


ERRORS = [
    pytest.param(with_value("--alpha-ms", "-1"), "--alpha-ms", id="alpha-negative"),
    pytest.param(with_value("--alpha-ms", "0"), "--alpha-ms", id="alpha-zero"),
    pytest.param(with_value("--alpha-ms", "nan"), "--alpha-ms", id="alpha-nan"),
    pytest.param(with_value("--beta-ms", "-0.1"), "--beta-ms", id="beta-negative"),
    pytest.param(with_value("--beta-ms", "inf"), "--beta-ms", id="beta-inf"),
    pytest.param(with_value("--gamma-ms", "-1e-6"), "--gamma-ms", id="gamma-negative"),
    pytest.param(with_value("--gamma-ms", "abc"), "--gamma-ms", id="gamma-not-a-number"),
    pytest.param(with_value("--input-tokens", "-5"), "--input-tokens", id="input-negative"),
    pytest.param(with_value("--output-tokens", "0"), "--output-tokens", id="output-zero"),
    pytest.param(with_value("--output-tokens", "nan"), "--output-tokens", id="output-nan"),
    pytest.param([*BASE, *TARGETS, "--max-batch", "0"], "--max-batch", id="max-batch-zero"),
    pytest.param([*BASE, *TARGETS, "--max-batch", "2.5"], "--max-batch", id="max-batch-float"),
    pytest.param([*BASE, *TARGETS, "--max-queue", "-1"], "--max-queue", id="max-queue-negative"),
    pytest.param(with_value("--ttft-ms", "-1"), "--ttft-ms", id="ttft-negative"),
    pytest.param(with_value("--itl-ms", "nan"), "--itl-ms", id="itl-nan"),
    pytest.param(with_value("--ttft-ms", "50"), "--ttft-ms", id="ttft-below-bounded-region"),
    pytest.param(with_value("--itl-ms", "10"), "--itl-ms", id="itl-below-bounded-region"),
    pytest.param([*BASE, "--ttft-ms", "0", "--itl-ms", "0"], "--ttft-ms/--itl-ms", id="both-targets-zero"),
    pytest.param([*BASE, *TARGETS, "--rate", "1"], "--rate", id="both-targets-and-rate"),
    pytest.param(BASE, "--rate", id="neither-targets-nor-rate"),
    pytest.param([*BASE, "--ttft-ms", "2000"], "--itl-ms", id="ttft-without-itl"),
    pytest.param([*BASE, "--itl-ms", "100"], "--ttft-ms", id="itl-without-ttft"),
    pytest.param([*BASE, "--rate", "0"], "--rate", id="rate-zero"),
    pytest.param([*BASE, "--rate", "-3"], "--rate", id="rate-negative"),
    pytest.param([*BASE, "--rate", "nan"], "--rate", id="rate-nan"),
    pytest.param([*BASE, "--rate", "14"], "--rate", id="rate-above-max"),
    pytest.param([*MODEL[:-2], "--rate", "1"], "--output-tokens", id="output-tokens-missing"),
]


@pytest.mark.parametrize(("args", "flag"), ERRORS)
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_invalid_input_exits_2_naming_the_flag(capsys, args, flag, as_json):
    code, out, err = run_main(capsys, *args, *(["--json"] if as_json else []))
    assert code == 2
    assert out == ""
    assert flag in err
    assert "Traceback" not in err


def test_below_region_message_names_target_and_minimum(capsys):
    code, _, err = run_main(capsys, *with_value("--ttft-ms", "50"), "--json")
    assert code == 2
    minimum = EXAMPLE.analyze(EXAMPLE.rate_range_rps.min_rps).ttft_ms
    assert "below the bounded region" in err
    assert "target 50 ms" in err
    assert f"{minimum:.6g} ms" in err


def test_rate_above_max_message_names_the_maximum(capsys):
    code, _, err = run_main(capsys, *BASE, "--rate", "14")
    assert code == 2
    assert f"{EXAMPLE.rate_range_rps.max_rps:.6g}" in err
