"""Fixtures of the x86_avx512 plugin's tests.

Compiling is the slow part (~50 ms per kernel), so tests put many cases into one kernel and
share compiled kernels through module-scoped fixtures. ``x86_kernels`` (next to this file)
builds Kernel IR by hand.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tilecraft_x86_avx512.target import X86Avx512Target  # noqa: E402

from tilecraft.kernel_ir.nodes import Kernel  # noqa: E402


@pytest.fixture(scope="session")
def target() -> X86Avx512Target:
    """The target (code generation works everywhere)."""
    return X86Avx512Target()


@pytest.fixture(scope="session")
def native(target: X86Avx512Target) -> X86Avx512Target:
    """The target, skipping the test where this machine cannot run AVX-512 code."""
    availability = target.available()
    if not availability.execute:
        pytest.skip(f"x86_avx512 cannot execute here: {availability.explain()}")
    return target


@pytest.fixture(scope="session")
def run(native: X86Avx512Target) -> Callable[..., dict[str, np.ndarray]]:
    """``run(kernel, arrays)``: compile (cached by source), call, return the arrays."""

    def run_kernel(kernel: Kernel, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        function = native.compile_kernel(kernel)
        arrays = dict(arrays)
        function(arrays)
        return arrays

    return run_kernel
