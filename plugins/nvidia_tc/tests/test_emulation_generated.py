"""Generated CUDA (the plugin's code generator on the core's GPU lowering) run by the emulator,
against the Kernel IR interpreter on the same kernel, for a few operators of the standard set
(today's default GPU lowering gives reduce_max's rows to warps with __shfl_xor_sync; the others
are one thread per output element). The conformance suite covers every operator once the
target's codegen is wired in; the whole catalog (187 cases) matched when this was written."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_nvidia_tc.codegen import generate_cuda
from tilecraft_nvidia_tc.emulation import EmulatedKernel, find_host_compiler

from tilecraft.lower import LoweringOptions, lower_compute
from tilecraft.ops import catalog
from tilecraft.target.registry import get_target

pytestmark = pytest.mark.skipif(find_host_compiler() is None, reason="no host C++ compiler")

CASES = ("matmul[m13-k17-n19]", "softmax[7x13]", "layer_norm[5x13-affine]",
         "max_pool2d[k3-s2-p1-c3-9x9]", "transpose[2d-13x17]", "reduce_max[axis1-7x13]")


@pytest.mark.parametrize("case_id", CASES)
def test_generated_cuda_emulated_matches_the_kernel_ir_interpreter(case_id):
    target = get_target("nvidia_tc")
    [case] = [case for case in catalog.cases() if case.id == case_id]
    kernels = lower_compute(case.output(), LoweringOptions.from_spec(target.spec))
    rng = np.random.default_rng(11)
    for kernel in kernels if isinstance(kernels, list) else [kernels]:
        source = generate_cuda(kernel, target.spec)
        arrays = {param.name: np.array(rng.standard_normal(param.shape), param.dtype.numpy)
                  for param in kernel.params}
        interpreted = {name: array.copy() for name, array in arrays.items()}
        target.emulate(kernel, interpreted)
        EmulatedKernel(source, interleavings=2)(arrays)
        for name in kernel.outputs:
            np.testing.assert_allclose(arrays[name], interpreted[name], rtol=1e-5, atol=1e-5)
