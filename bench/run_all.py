"""Runs every benchmark script of bench/ in turn (`make bench`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPTS = ["bench_default_schedules.py", "bench_gemm.py", "bench_chains.py",
           "bench_conv_chains.py", "bench_search.py", "bench_mapping_counts.py", "bench_conv.py",
           "bench_int8_bf16.py", "bench_mali.py", "bench_ascend.py", "bench_fpga.py",
           "bench_nvidia.py", "bench_tileflow.py",
           "accuracy_cachegrind.py"]


def main() -> int:
    here = Path(__file__).parent
    failed = []
    for script in SCRIPTS:
        print(f"\n# {script}", flush=True)
        result = subprocess.run([sys.executable, str(here / script)])
        if result.returncode:
            failed.append(script)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
