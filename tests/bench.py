"""`make bench`: every benchmark, one after the other; each prints its own JSON document with medians and ratios.

Benchmarks print figures measured in one run; they never assert on time (the machine is shared and noisy).
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = (
    ("External Metrics API vs bare aiohttp (no authentication)", "tests.servers.em_bench", []),
    ("External Metrics API vs bare aiohttp (front-proxy authentication)", "tests.servers.em_bench", ["--auth"]),
    ("KEDA GetMetrics vs bare gRPC servicer", "tests.servers.keda_bench", []),
    ("One cycle at 100 / 1,000 / 10,000 VAs: collect -> decide -> publish", "tests.bench_collect", []),
    ("Allocation greedy vs exact; decide at 1,000 VAs (V1, V2, limiter, exact)", "tests.bench_pipeline", []),
)


def main() -> int:
    only = sys.argv[1:]
    for title, module, argv in BENCHMARKS:
        if only and not any(word in module for word in only):
            continue
        print(f"== {title}", flush=True)
        importlib.import_module(module).main(argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
