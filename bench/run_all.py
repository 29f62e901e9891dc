"""Runs the benchmark scripts of bench/ in turn (`make bench`): the kernel and target ones, then
the whole-network ones (issue 16: networks against onnxruntime / PyTorch, a layer's products,
Fig. 4.6's overlap designs, the torch.compile backend), which take longer (bench_networks.py
compiles and times eight networks in five frameworks at 1 and 2 threads).
``run_all.py --skip-networks`` leaves those out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPTS = ["bench_default_schedules.py", "bench_gemm.py", "bench_chains.py",
           "bench_conv_chains.py", "bench_search.py", "bench_mapping_counts.py", "bench_conv.py",
           "bench_int8_bf16.py", "bench_mali.py", "bench_ascend.py", "bench_fpga.py",
           "bench_nvidia.py", "bench_tileflow.py",
           "accuracy_cachegrind.py"]
NETWORK_SCRIPTS = ["bench_networks.py", "bench_layer_products.py", "bench_overlap.py",
                   "bench_torch_backend.py"]


def main() -> int:
    here = Path(__file__).parent
    failed = []
    scripts = SCRIPTS + ([] if "--skip-networks" in sys.argv[1:] else NETWORK_SCRIPTS)
    for script in scripts:
        print(f"\n# {script}", flush=True)
        result = subprocess.run([sys.executable, str(here / script)])
        if result.returncode:
            failed.append(script)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
