"""Executing a physical mapping on the Kernel IR interpreter: the kernel
:func:`~tilecraft.intrin.lowering.lower_mapped` builds (``IntrinsicCall``s on zero-padded
operand tiles), each call run by the intrinsic's declared semantics. It is the proof that a
verified mapping computes what the compute computes; targets compile the same kernel
(``tilecraft.compile(..., tensorize=...)``).

>>> import numpy as np
>>> from tilecraft import te, ops
>>> from tilecraft.intrin import generate, match
>>> from tilecraft.intrin.examples import wmma
>>> A = te.placeholder((2, 2), "float16", name="A")
>>> B = te.placeholder((2, 2), "float16", name="B")
>>> C = ops.matmul(A, B, out_dtype="float32", name="C")
>>> mma = wmma(16, 16, 16)
>>> physical = generate(C, mma, match(C, mma).mappings[0])
>>> a = np.array([[1, 2], [3, 4]], np.float16)
>>> execute(physical, {"A": a, "B": a})
array([[ 7., 10.],
       [15., 22.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tilecraft.errors import InputError
from tilecraft.intrin.generation import PhysicalMapping
from tilecraft.intrin.lowering import lower_mapped
from tilecraft.kernel_ir.interpreter import run_kernel
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.te.tensor import Tensor


def build_kernel(physical: PhysicalMapping, name: str | None = None) -> Kernel:
    """The Kernel IR kernel executing ``physical`` (parameters: the tensors the product
    loads, then the compute's output): :func:`~tilecraft.intrin.lowering.lower_mapped` with
    the default lowering options."""
    compute = physical.virtual.product.compute
    (kernel,) = lower_mapped(compute, physical, LoweringOptions(), name)
    return kernel


def _loaded_arrays(tensors: list[Tensor], inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    from tilecraft.graph import Graph
    from tilecraft.reference import run

    computes = [t for t in tensors if not t.is_placeholder]
    arrays: dict[str, Any] = {}
    for tensor in tensors:
        if tensor.is_placeholder:
            if tensor.name not in inputs:
                raise InputError(f"input {tensor.name!r} is missing; pass a "
                                 f"{tensor.dtype.value}{list(tensor.shape)} array")
            arrays[tensor.name] = inputs[tensor.name]
    if computes:
        needed = {t.name for t in Graph.from_outputs(computes).inputs}
        values = run(computes, {k: v for k, v in inputs.items() if k in needed})
        values = values if isinstance(values, tuple) else (values,)
        arrays.update({t.name: v for t, v in zip(computes, values)})
    return arrays


def execute(physical: PhysicalMapping, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """Run the mapped kernel on ``inputs`` (placeholder arrays by name) and return the
    compute's output. Tensors the product reads through other computes (a ``pad``) are
    evaluated first with the reference interpreter."""
    product = physical.virtual.product
    kernel = build_kernel(physical)
    tensors = list({id(f.tensor): f.tensor for f in product.factors}.values())
    arrays = _loaded_arrays(tensors, inputs)
    output = product.compute
    arrays[output.name] = np.zeros(output.shape, output.dtype.numpy)
    decl = physical.virtual.intrinsic
    run_kernel(kernel, arrays, semantics={decl.name: decl.reference})
    return arrays[output.name]
