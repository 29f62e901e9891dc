"""Checking a schedule against the reference: what every schedule must preserve.

A schedule changes how a program is computed, never what: :func:`check_schedule` lowers it,
runs the kernels (with the Kernel IR interpreter, or any ``run(kernels, arrays)``, e.g. a
target's compiled kernels) and compares every output with the numpy reference interpreter.

>>> import numpy as np
>>> from tilecraft import te
>>> from tilecraft.schedule import create_schedule
>>> A = te.placeholder((7,), name="A")
>>> B = te.compute((7,), lambda i: A[i] * 3.0, name="B")
>>> s = create_schedule(B)
>>> _ = s[B].split(s[B].axes[0], factor=3)
>>> got = check_schedule(s, {"A": np.arange(7, dtype=np.float32)})
>>> got["B"]
array([ 0.,  3.,  6.,  9., 12., 15., 18.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.kernel_ir.nodes import Kernel

Runner = Callable[[Sequence[Kernel], Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


def check_schedule(schedule: Any, inputs: Mapping[str, np.ndarray], target: Any = None,
                   run: Runner | None = None, rtol: float = 1e-5,
                   atol: float = 1e-5) -> dict[str, np.ndarray]:
    """Lower ``schedule`` for ``target``, run its kernels on ``inputs`` (by placeholder name)
    with ``run`` (default: the Kernel IR interpreter) and compare each program output with the
    reference; raise :class:`~tilecraft.errors.LoweringError` naming the first output that
    differs. Returns the outputs by name."""
    from tilecraft.reference import run as reference_run

    kernels = schedule.lower(target)
    arrays = {name: np.array(value, copy=True) for name, value in inputs.items()}
    results = dict((run or run_kernels)(kernels, arrays))
    outputs = list(schedule.outputs)
    expected = reference_run(outputs, inputs=inputs)
    if not isinstance(expected, tuple):
        expected = (expected,)
    got = {}
    for tensor, want in zip(outputs, expected):
        value = np.asarray(results[tensor.name])
        if not np.allclose(value.astype(np.float64), np.asarray(want).astype(np.float64),
                           rtol=rtol, atol=atol, equal_nan=True):
            worst = np.nanmax(np.abs(value.astype(np.float64) - want.astype(np.float64)))
            raise LoweringError(f"schedule of {tensor.name}: the lowered kernels compute "
                                f"{tensor.name} differently from the reference (largest "
                                f"difference {worst}); the schedule is wrong:\n"
                                + "\n".join(str(k) for k in kernels))
        got[tensor.name] = value
    return got


__all__ = ["Runner", "check_schedule"]
