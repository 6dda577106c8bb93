"""Benchmarks that measure in a child process, so that each measurement has its own heap and peak RSS and the
benchmarks after it keep theirs: the child prints its figures as one marked JSON line, the parent reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

MARK = "BENCH-CHILD-JSON "


def report(figures: Any) -> None:
    """In the child: print `figures` for the parent (other output on stdout is ignored)."""
    print(MARK + json.dumps(figures), flush=True)


def run(module: str, *argv: str) -> Any:
    """In the parent: `python -m module --child argv...`, and the figures it reported."""
    command = [sys.executable, "-m", module, "--child", *argv]
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=os.environ).stdout
    line = next(x for x in out.splitlines() if x.startswith(MARK))
    return json.loads(line[len(MARK) :])
