"""Thesis Table 5.3: the number of distinct mappings found for each operator on a Tensor Core
WMMA 16x16x16 (fp16 -> fp32), with the time to enumerate them (matching) and to verify them
all (Algorithm 4 plus the basic-match structure), and the time to generate and execute one
(Kernel IR intrinsic calls run by their declared semantics, checked against the reference).

Run: `make bench` or `.venv/bin/python bench/bench_mapping_counts.py`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from common import print_table  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft import ops, te  # noqa: E402
from tilecraft.intrin import execute, generate, match, verify  # noqa: E402
from tilecraft.intrin.examples import wmma  # noqa: E402
from tilecraft.ops.conv_transpose import conv_transpose2d_zero_insert  # noqa: E402
from tilecraft.ops.conv_variants import batched_conv2d  # noqa: E402
from tilecraft.ops.linalg import grouped_dense  # noqa: E402

F32 = "float32"


def h(*shape: int, name: str) -> te.Tensor:
    return te.placeholder(shape, "float16", name=name)


#: (operator, thesis count, builder): small shapes of each operator's structure
OPERATORS: list[tuple[str, int, Callable[[], te.Tensor]]] = [
    ("GMV", 1, lambda: ops.gemv(h(64, 96, name="A"), h(96, name="x"), out_dtype=F32)),
    ("GMM", 1, lambda: ops.matmul(h(64, 96, name="A"), h(96, 48, name="B"), out_dtype=F32)),
    ("C1D", 6, lambda: ops.conv1d(h(2, 16, 30, name="x"), h(32, 16, 3, name="w"),
                                  out_dtype=F32)),
    ("C2D", 35, lambda: ops.conv2d(h(2, 16, 14, 14, name="x"), h(32, 16, 3, 3, name="w"),
                                   padding=1, out_dtype=F32)),
    ("C3D", 180, lambda: ops.conv3d(h(1, 8, 6, 6, 6, name="x"), h(16, 8, 3, 3, 3, name="w"),
                                    out_dtype=F32)),
    ("T2D", 7, lambda: conv_transpose2d_zero_insert(h(2, 16, 7, 7, name="x"),
                                                    h(16, 32, 3, 3, name="w"), stride=2,
                                                    padding=1, out_dtype=F32)),
    ("GRP", 35, lambda: ops.conv2d(h(2, 16, 14, 14, name="x"), h(32, 4, 3, 3, name="w"),
                                   groups=4, padding=1, out_dtype=F32)),
    ("DIL", 35, lambda: ops.conv2d(h(2, 16, 14, 14, name="x"), h(32, 16, 3, 3, name="w"),
                                   dilation=2, out_dtype=F32)),
    ("DEP", 11, lambda: ops.depthwise_conv2d(h(2, 16, 14, 14, name="x"),
                                             h(16, 1, 3, 3, name="w"), padding=1,
                                             out_dtype=F32)),
    ("CAP", 105, lambda: ops.capsule_conv2d(h(2, 8, 12, 12, name="x"),
                                            h(16, 8, 3, 3, 4, name="w"), out_dtype=F32)),
    ("BCV", 11, lambda: batched_conv2d(h(2, 16, 14, 14, name="x"),
                                       h(2, 32, 16, 3, 3, name="w"), padding=1,
                                       out_dtype=F32)),
    ("GFC", 1, lambda: grouped_dense(h(8, 4, 64, name="x"), h(4, 32, 64, name="w"),
                                     out_dtype=F32)),
]


def inputs_for(compute: te.Tensor) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {t.name: rng.standard_normal(t.shape).astype(np.float16)
            for t in tc.Graph.from_outputs([compute]).inputs}


def main() -> int:
    intrinsic = wmma(16, 16, 16)
    rows, failures = [], 0
    for operator, expected, build in OPERATORS:
        compute = build()
        start = time.perf_counter()
        result = match(compute, intrinsic)
        enumerated = time.perf_counter() - start
        start = time.perf_counter()
        verified = sum(verify(compute, intrinsic, m).ok for m in result.mappings)
        checking = time.perf_counter() - start
        # execute the mapping with the most software loops on the intrinsic (best utilisation)
        best = max(result.mappings, key=lambda m: generate(compute, intrinsic, m,
                                                           check=False).utilisation)
        physical = generate(compute, intrinsic, best, check=False)
        inputs = inputs_for(compute)
        start = time.perf_counter()
        got = execute(physical, inputs)
        executed = time.perf_counter() - start
        error = float(np.abs(got - tc.reference.run(compute, inputs)).max())
        ok = len(result.mappings) == expected == verified and error < 1e-2
        failures += not ok
        rows.append([operator, str(expected), str(len(result.mappings)),
                     str(len(result.basic_matches)), f"{enumerated * 1e3:.1f}",
                     f"{checking * 1e3:.1f}", f"{physical.utilisation:.1%}",
                     f"{executed:.2f}", f"{error:.1e}", "ok" if ok else "MISMATCH"])
    print_table(f"Table 5.3: mappings onto {intrinsic.name} (fp16 -> fp32)",
                ["op", "thesis", "found", "basic", "enumerate ms", "verify all ms",
                 "best util", "execute s", "max |err|", ""], rows)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
