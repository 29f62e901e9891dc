"""128-bit accesses of narrow elements and plain copies of half values in the generated CUDA:
vector loops of 8 float16 / bfloat16 or 16 int8 lanes become one ``tc_load16`` /
``tc_store16`` per operand where the accesses are provably contiguous and aligned (scalar code
otherwise); a half element stored straight from a load of its type is copied, not widened and
rounded back; the results emulate to the numpy reference and the PTX has the v4 accesses."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tilecraft_nvidia_tc.availability import build_status
from tilecraft_nvidia_tc.codegen import generate_cuda
from tilecraft_nvidia_tc.emulation import EmulatedKernel, find_host_compiler
from tilecraft_nvidia_tc.target import load_target_spec

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.kernel_ir import Buffer, BufferLoad, For, Kernel, LoopKind, Store
from tilecraft.lower import LoweringOptions, lower_compute
from tilecraft.reference.evaluator import evaluate
from tilecraft.target.registry import get_target
from tilecraft.te import Var, const
from tilecraft.te.expr import Cast

SPEC = load_target_spec()
needs_host = pytest.mark.skipif(find_host_compiler() is None, reason="no host C++ compiler")


def scale_kernel(dtype: DType, lanes: int, offset: int = 0, extent: int | None = None,
                 scale: bool = True) -> Kernel:
    """``B[r, v + offset] = A[r, v + offset] * 2`` (or a plain copy) over a vector loop."""
    A = Buffer("A", (4, 48), dtype)
    B = Buffer("B", (4, 48), dtype)
    v, r = Var("v"), Var("r")
    value = BufferLoad(A, (r, v + offset))
    if scale:
        value = Cast(dtype, value.astype(DType.FLOAT32) * const(2.0)) if dtype.is_float \
            else value * const(2, dtype)
    loop = For(v, const(extent or 2 * lanes), LoopKind.VECTOR,
               Store(B, (r, v + offset), value), lanes=lanes)
    return Kernel("scale", (A, B), ("B",), For(r, const(4), LoopKind.BOUND, loop,
                                                   axis="threadIdx.x"))


@pytest.mark.parametrize("dtype, lanes, ctype", [(DType.FLOAT16, 8, "__half"),
                                                 (DType.BFLOAT16, 8, "__nv_bfloat16"),
                                                 (DType.INT8, 16, "signed char")])
def test_16_bytes_of_narrow_lanes_are_one_wide_access(dtype, lanes, ctype) -> None:
    text = generate_cuda(scale_kernel(dtype, lanes, offset=lanes), SPEC).text
    assert f"v += {lanes})" in text
    assert f"const tc_vec16<{ctype}> tc_wide = tc_load16(&A[((r * 48) + (v + {lanes}))]);" \
        in text
    assert f"tc_store16(&B[((r * 48) + (v + {lanes}))], tc_wide_1);" in text
    assert text.count(".lane[") == 2 * lanes
    for kernel in (scale_kernel(dtype, lanes, offset=lanes // 2),   # misaligned
                   scale_kernel(dtype, lanes, extent=lanes + 2),    # ragged
                   scale_kernel(dtype, lanes // 2)):                # 8 bytes, not 16
        text = generate_cuda(kernel, SPEC).text
        assert "tc_load16" not in text and "tc_store16" not in text
        assert "#pragma unroll\n" in text and "++v)" in text


def test_a_wide_copy_stores_the_loaded_vector() -> None:
    text = generate_cuda(scale_kernel(DType.FLOAT16, 8, scale=False), SPEC).text
    assert "tc_store16(&B[((r * 48) + (v + 0))], tc_wide);" in text
    assert ".lane[" not in text and "__half2float" not in text


def test_half_copies_have_no_conversion_pair() -> None:
    A, B, F = (Buffer(name, (8,), dtype) for name, dtype in
               (("A", DType.FLOAT16), ("B", DType.FLOAT16), ("F", DType.FLOAT32)))
    i = Var("i")

    def body(value, into=B):
        loop = For(i, const(8), LoopKind.BOUND, Store(into, (i,), value), axis="threadIdx.x")
        return generate_cuda(Kernel("k", (A, B, F), (into.name,), loop), SPEC).text

    load = BufferLoad(A, (i,))
    assert "B[i] = A[i];" in body(load)
    assert "B[i] = A[i];" in body(Cast(DType.FLOAT16, load.astype(DType.FLOAT32)))
    # a cast rounding to the stored type rounds once
    assert "B[i] = __float2half(F[i]);" in body(Cast(DType.FLOAT16, BufferLoad(F, (i,))))
    # arithmetic or another type keeps the conversions
    assert "B[i] = __float2half((__half2float(A[i]) * 2.0f));" in \
        body(load.astype(DType.FLOAT32) * const(2.0))
    assert "F[i] = __half2float(A[i]);" in body(load.astype(DType.FLOAT32), into=F)


def _emulate_against_reference(tensor: te.Tensor) -> str:
    target = get_target("nvidia_tc")
    kernels = lower_compute(tensor, LoweringOptions.from_spec(target.spec))
    [kernel] = kernels if isinstance(kernels, list) else [kernels]
    source = target.codegen(kernel)
    rng = np.random.default_rng(3)
    env = {t: rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in tensor.inputs}
    arrays = {t.name: array for t, array in env.items()}
    arrays[tensor.name] = np.full(tensor.shape, np.nan, tensor.dtype.numpy)
    EmulatedKernel(source, interleavings=2)(arrays)
    expected = evaluate(tensor, env)
    np.testing.assert_array_equal(arrays[tensor.name].astype(np.float32),
                                  expected.astype(np.float32))
    return source.text


@needs_host
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_emulated_half_elementwise_kernels_match_the_reference(dtype) -> None:
    text = _emulate_against_reference(ops.relu(te.placeholder((7, 4096), dtype, name="x"),
                                               name="y"))
    assert "tc_load16(&x[" in text and "tc_store16(&y[" in text
    # rows of 4097 halves are not 16-byte aligned: element by element
    text = _emulate_against_reference(ops.relu(te.placeholder((7, 4097), dtype, name="x"),
                                               name="y"))
    assert "tc_load16" not in text


@pytest.mark.skipif(not build_status()[0], reason="no NVRTC / nvcc on this machine")
def test_the_ptx_has_128_bit_accesses() -> None:
    target = get_target("nvidia_tc")
    tensor = ops.relu(te.placeholder((7, 4096), "float16", name="x"), name="y")
    kernel = lower_compute(tensor, LoweringOptions.from_spec(target.spec))
    kernel = kernel[0] if isinstance(kernel, list) else kernel
    built = target.build(target.codegen(kernel)).handle
    for architecture in built.architectures:
        ptx = architecture.ptx_path.read_text()
        assert re.search(r"ld\.global(\.nc)?\.v4\.(u32|b32)", ptx), architecture.architecture
        assert re.search(r"st\.global\.v4\.(u32|b32)", ptx), architecture.architecture
