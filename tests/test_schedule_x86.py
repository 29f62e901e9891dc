"""Scheduled kernels through the real x86_avx512 code generator: the Kernel IR the schedule
layer emits (guards in vector loops, fused loops, local tiles, vector reductions) is accepted,
compiled and computes what the reference does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from tilecraft import ops, te
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.schedule import apply_config, create_schedule
from tilecraft.schedule.verify import check_schedule
from tilecraft.target.registry import get_target


@pytest.fixture(scope="module")
def x86():
    try:
        target = get_target("x86_avx512")
    except Exception as err:  # noqa: BLE001 - the reason is the skip message
        pytest.skip(f"the x86_avx512 target is not installed: {err}")
    availability = target.available()
    if not availability.execute:
        pytest.skip(f"x86_avx512 cannot execute here: {availability.explain()}")
    return target


def _runner(target, notes: list[str]):
    def run(kernels: Sequence[Kernel], arrays: Mapping[str, np.ndarray]) -> dict:
        namespace = dict(arrays)
        for kernel in kernels:
            for buffer in kernel.params:
                if buffer.name not in namespace:
                    namespace[buffer.name] = np.zeros(buffer.shape, buffer.dtype.numpy)
            source = target.codegen(kernel)
            notes.extend(source.meta.get("notes", []))
            function = target.load(target.build(source))
            function({b.name: namespace[b.name] for b in kernel.params})
        return namespace

    return run


def _rand(seed: int, *shape: int, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _compare(schedule, target, inputs, tolerance: float = 1e-4) -> list[str]:
    notes: list[str] = []
    check_schedule(schedule, inputs, target.spec, run=_runner(target, notes), rtol=tolerance,
                   atol=tolerance)
    return notes


def test_tiled_parallel_matmul_with_tails(x86) -> None:
    A = te.placeholder((13, 7), name="A")
    B = te.placeholder((7, 29), name="B")
    C = ops.matmul(A, B, name="C")
    s = create_schedule(C, x86.spec)
    i, j = s[C].axes
    (k,) = s[C].reduce_axes
    io, jo, ii, ji = s[C].tile(i, j, 4, 16)
    ko, ki = s[C].split(k, factor=3)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].parallel(io)
    s[C].unroll(ki)
    s[C].vectorize(ji)
    notes = _compare(s, x86, {"A": _rand(0, 13, 7), "B": _rand(1, 7, 29)})
    assert not any("scalar loop" in note for note in notes), notes


def test_apply_config_with_cache_write_vectorises(x86) -> None:
    A = te.placeholder((32, 24), name="A")
    B = te.placeholder((24, 48), name="B")
    C = ops.matmul(A, B, name="C")
    s = create_schedule(C, x86.spec)
    apply_config(s, C, {"split": {"i": [4, 2, 4], "j": [3, 1, 16], "k": [6, 4]},
                        "reorder": ["i.0", "j.0", "i.1", "j.1", "k.0", "k.1", "i.2", "j.2"],
                        "fuse_parallel": 2, "unroll": 4, "vectorize": True,
                        "cache_write": "register"})
    notes = _compare(s, x86, {"A": _rand(2, 32, 24), "B": _rand(3, 24, 48)})
    assert not any("scalar loop" in note for note in notes), notes


def test_conv_with_pad_computed_at_a_row_tile(x86) -> None:
    x = te.placeholder((2, 3, 9, 11), name="x")
    w = te.placeholder((4, 3, 3, 3), name="w")
    y = ops.conv2d(x, w, padding=1, name="y")
    s = create_schedule(y, x86.spec)
    pad = y.inputs[0]
    n, f, h, col = s[y].axes
    fused = s[y].fuse(n, f)
    s[y].parallel(fused)
    ho, hi = s[y].split(h, factor=4)
    rc, rh, rw = s[y].reduce_axes
    s[y].reorder(fused, ho, rc, rh, rw, hi, col)
    s[y].vectorize(col)
    s[pad].compute_at(s[y], ho)
    s[pad].vectorize(s[pad].axes[-1])
    _compare(s, x86, {"x": _rand(4, 2, 3, 9, 11), "w": _rand(5, 4, 3, 3, 3)})


def test_softmax_in_one_parallel_kernel_with_vector_reductions(x86) -> None:
    x = te.placeholder((6, 37), name="x")
    y = ops.softmax(x, name="y")
    s = create_schedule(y, x86.spec)
    s["y_sub"].compute_inline()
    s["y_exp"].compute_inline()
    row, col = s["y"].axes
    s["y"].parallel(row)
    s["y"].vectorize(col)
    for name in ("y_max", "y_sum"):
        s[name].compute_at(s["y"], row)
        s[name].vectorize(s[name].reduce_axes[0])
    assert len(s.lower(x86.spec)) == 1
    _compare(s, x86, {"x": _rand(6, 6, 37)}, tolerance=1e-5)


def test_half_precision_and_inlined_chain(x86) -> None:
    A = te.placeholder((9, 20), "float16", name="A")
    B = te.placeholder((20, 7), "float16", name="B")
    C = ops.matmul(A, B, name="C")
    s = create_schedule(C, x86.spec)
    ko, ki = s[C].split(s[C].reduce_axes[0], factor=8)
    s[C].reorder(s[C].axes[0], ko, s[C].axes[1], ki)
    s[C].vectorize(ki)
    s[C].parallel(s[C].axes[0])
    inputs = {"A": _rand(7, 9, 20, dtype=np.float16), "B": _rand(8, 20, 7, dtype=np.float16)}
    _compare(s, x86, inputs, tolerance=1e-3)
    P = te.compute((9, 20), lambda i, j: A[i, j] * 3.3, name="P")
    Q = te.compute((9, 20), lambda i, j: P[i, j] + 1.1, name="Q")
    s = create_schedule(Q, x86.spec)
    s[P].compute_inline()
    s[Q].vectorize(s[Q].axes[1])
    _compare(s, x86, {"A": inputs["A"]}, tolerance=0)
