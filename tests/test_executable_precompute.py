"""Kernels of an Executable that read only constants (a template packing a constant weight) run
once, when the kernels are installed; calls read what they wrote and equal the reference."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.target.registry import get_target

pytestmark = pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                                reason="x86_avx512 cannot execute on this machine")


def _program(weight_constant: bool):
    rng = np.random.default_rng(0)
    x = te.placeholder((61, 129), name="x")  # primes and odd sizes: no tile divides them
    value = rng.standard_normal((129, 257)).astype(np.float32)
    w = te.constant(value, name="w") if weight_constant else te.placeholder(value.shape,
                                                                            name="w")
    y = ops.relu(ops.matmul(x, w, name="mm"), name="y")
    return y, value


def test_a_constant_weight_is_packed_once():
    y, value = _program(weight_constant=True)
    exe = tc.compile(y, target="x86_avx512")
    compiled = [c.kernel.name for c in exe.compiled]
    stepped = [step.report.name for step in exe._steps]
    packs = [name for name in compiled if name not in stepped]
    assert packs and all("pack" in name for name in packs)
    assert set(exe._plan.precomputed) == {o for c in exe.compiled if c.kernel.name in packs
                                          for o in c.kernel.outputs}
    rng = np.random.default_rng(1)
    for _ in range(3):
        a = rng.standard_normal((61, 129)).astype(np.float32)
        np.testing.assert_allclose(exe(a), np.maximum(a @ value, 0), rtol=1e-4, atol=1e-4)
    reports = {k.name: k for k in exe.report.kernels}
    assert all(len(reports[name].run_seconds) == 1 for name in packs)
    # the GEMM's kernel (with the ReLU as its epilogue on x86: named for the result it writes)
    (main,) = stepped
    assert main in ("mm", "y") and len(reports[main].run_seconds) == 3
    # concurrent calls share the packed weight (read only)
    inputs = [rng.standard_normal((61, 129)).astype(np.float32) for _ in range(4)]
    results: list[np.ndarray | None] = [None] * 4

    def call(index: int) -> None:
        results[index] = exe(inputs[index])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for a, got in zip(inputs, results):
        np.testing.assert_allclose(got, np.maximum(a @ value, 0), rtol=1e-4, atol=1e-4)


def test_a_weight_that_is_an_input_is_packed_at_every_call():
    y, value = _program(weight_constant=False)
    exe = tc.compile(y, target="x86_avx512")
    assert not exe._plan.precomputed
    assert len(exe._steps) == len(exe.compiled)
    a = np.random.default_rng(2).standard_normal((61, 129)).astype(np.float32)
    np.testing.assert_allclose(exe(a, value), np.maximum(a @ value, 0), rtol=1e-4, atol=1e-4)
