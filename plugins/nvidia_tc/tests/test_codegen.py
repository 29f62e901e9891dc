"""The CUDA C code generator: every kernel of the standard operator set on the nvidia_tc spec
becomes one translation unit with the shared interface's shape and launch metadata; the
constructs that matter have the form they must (bound axes, guards on ragged extents,
shuffle reductions, float4 only where legal, shared memory static or dynamic); what CUDA
cannot express is a CodegenError naming the kernel and the construct."""

from __future__ import annotations

import re

import pytest
from tilecraft_nvidia_tc.codegen import generate_cuda
from tilecraft_nvidia_tc.target import load_target_spec

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir import (
    Allocate,
    Barrier,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Kernel,
    LoopKind,
    Seq,
    Store,
)
from tilecraft.kernel_ir.concurrency import (
    AsyncCopy,
    AtomicUpdate,
    CommitGroup,
    SubgroupReduce,
    WaitGroup,
)
from tilecraft.kernel_ir.nodes import Region, Stream, StreamPush
from tilecraft.lower import LoweringOptions, lower_compute
from tilecraft.ops import catalog
from tilecraft.te import ReduceOp, Var, const

SPEC = load_target_spec()


def kernels_of(case_id: str) -> list[Kernel]:
    graph, _ = catalog.get(case_id).build()
    options = LoweringOptions.from_spec(SPEC)
    return [lower_compute(tensor, options) for tensor in graph.computes]


def threads(extent: int, body_of, axis: str = "threadIdx.x", name: str = "t") -> For:
    var = Var(name)
    return For(var, const(extent), LoopKind.BOUND, body_of(var), axis=axis)


@pytest.mark.parametrize("case", catalog.standard_set(), ids=lambda case: case.id)
def test_every_standard_kernel_is_one_cuda_unit_with_its_launch(case) -> None:
    graph, _ = case.build()
    options = LoweringOptions.from_spec(SPEC)
    limits = {axis.name: axis.max_extent for axis in SPEC.threads.axes}
    for tensor in graph.computes:
        kernel = lower_compute(tensor, options)
        source = generate_cuda(kernel, SPEC)
        assert (source.language, source.suffix, source.entry) == ("cuda", "cu", kernel.name)
        assert source.text.count("__global__") == 1
        assert re.search(r'^#include "tilecraft_cuda.h"$', source.text, re.M)
        params = ", ".join(
            f"{'' if p['output'] else 'const '}"
            f"{ {'float32': 'float', 'float16': '__half', 'bfloat16': '__nv_bfloat16', 'int8': 'signed char', 'uint8': 'unsigned char', 'int32': 'int'}[p['dtype']] }"  # noqa: E501
            f"* __restrict__ {p['name']}" for p in source.meta["params"])
        grid, block = source.meta["grid"], source.meta["block"]
        threads = block[0] * block[1] * block[2]
        assert f'extern "C" __global__ void __launch_bounds__({threads}) {kernel.name}' \
            f'({params})' in source.text
        assert [p["name"] for p in source.meta["params"]] == [b.name for b in kernel.params]
        assert {p["name"] for p in source.meta["params"] if p["output"]} >= set(kernel.outputs)
        grid, block = source.meta["grid"], source.meta["block"]
        assert grid[0] <= limits["blockIdx.x"] and block[0] <= limits["threadIdx.x"]
        assert block[0] * block[1] * block[2] <= SPEC.threads.max_threads_per_block
        # the launch covers every bound loop: the strategy's own launch, x dimension
        assert kernel.launch is None or (grid[0], block[0]) == (kernel.launch.grid[0],
                                                                 kernel.launch.block[0])
        assert source.meta["dynamic_shared_bytes"] == 0 and not source.meta["needs_smem_optin"]


def test_row_reduction_is_a_shuffle_butterfly_with_the_lanes_that_exist() -> None:
    kernel = next(k for k in kernels_of("softmax[7x13]") if k.name == "out_max")
    text = generate_cuda(kernel, SPEC).text
    # 13 elements on 16 lanes of a 16-thread block: the mask names exactly those 16 lanes
    offsets = re.findall(r"__shfl_xor_sync\(0xffffu, tc_reduced, (\d+)\)", text)
    assert offsets == ["8", "4", "2", "1"]
    assert "tc_max(tc_reduced, __shfl_xor_sync" in text
    assert "const int i0 = (int)blockIdx.x;" in text
    assert "const int r1_lane = (int)threadIdx.x;" in text


def test_guard_only_where_the_extent_is_below_the_launch() -> None:
    A = Buffer("A", (40,), DType.FLOAT32)
    B = Buffer("B", (64,), DType.FLOAT32)
    body = Seq((threads(40, lambda t: Store(A, (t,), const(1.0)), name="a"),
                threads(64, lambda t: Store(B, (t,), const(2.0)), name="b")))
    source = generate_cuda(Kernel("two", (A, B), ("A", "B"), body), SPEC)
    assert source.meta["block"] == [64, 1, 1]
    assert "if (a < 40) {" in source.text
    assert "b < 64" not in source.text


def test_ragged_catalog_kernels_keep_their_guard() -> None:
    (kernel,) = kernels_of("matmul[m13-k17-n19]")
    text = generate_cuda(kernel, SPEC).text
    assert "if ((i_j_thread < 247)) {" in text
    assert "for (int k = 0; k < 17; ++k) {" in text


def vector_kernel(offset: int, extent: int = 8, dtype: DType = DType.FLOAT32) -> Kernel:
    A = Buffer("A", (4, 16), dtype)
    B = Buffer("B", (4, 16), dtype)
    v, r = Var("v"), Var("r")
    loop = For(v, const(extent), LoopKind.VECTOR,
               Store(B, (r, v + offset), BufferLoad(A, (r, v + offset)) * const(2.0, dtype)),
               lanes=4)
    return Kernel("scale", (A, B), ("B",), For(r, const(4), LoopKind.BOUND, loop,
                                                   axis="threadIdx.x"))


def test_float4_only_for_contiguous_aligned_whole_vectors() -> None:
    text = generate_cuda(vector_kernel(offset=4), SPEC).text
    assert "for (int v = 0; v < 8; v += 4) {" in text
    assert "*reinterpret_cast<const float4*>(&A[((r * 16) + (v + 4))])" in text
    assert "*reinterpret_cast<float4*>(&B[((r * 16) + (v + 4))]) = tc_wide_1;" in text
    assert "tc_wide_1.w = (tc_wide.w * 2.0f);" in text
    for kernel in (vector_kernel(offset=1),                       # misaligned
                   vector_kernel(offset=0, extent=6),             # ragged
                   vector_kernel(offset=0, dtype=DType.FLOAT16)):  # 8 bytes, not 16
        text = generate_cuda(kernel, SPEC).text
        assert "float4" not in text
        assert "#pragma unroll\n" in text and "++v)" in text


def test_shared_memory_static_then_dynamic_with_the_opt_in_then_refused() -> None:
    def kernel(elements: int) -> Kernel:
        A = Buffer("A", (elements,), DType.FLOAT32)
        tile = Buffer("tile", (elements,), DType.FLOAT32, level="shared")
        body = threads(256, lambda t: Allocate(tile, Seq((
            Store(tile, (t,), BufferLoad(A, (t,))), Barrier("block"),
            Store(A, (t,), BufferLoad(tile, (255 - t,)))))))
        return Kernel("flip", (A,), ("A",), body)

    small = generate_cuda(kernel(1024), SPEC)
    assert "alignas(16) __shared__ float tile[1024];" in small.text
    assert "__syncthreads();" in small.text
    assert (small.meta["dynamic_shared_bytes"], small.meta["needs_smem_optin"]) == (0, False)
    big = generate_cuda(kernel(20000), SPEC)  # 80000 bytes > 48 KB
    assert "extern __shared__ unsigned char tc_dynamic_smem[];" in big.text
    assert "float* const tile = reinterpret_cast<float*>(tc_dynamic_smem + 0);" in big.text
    assert (big.meta["dynamic_shared_bytes"], big.meta["needs_smem_optin"]) == (80000, True)
    with pytest.raises(CodegenError, match=r"kernel flip: the shared buffers \(tile\) need "
                                           r"800000 bytes per block, above the limit of 166912"):
        generate_cuda(kernel(200000), SPEC)


def test_too_many_threads_or_registers_name_the_limit() -> None:
    A = Buffer("A", (2048,), DType.FLOAT32)
    with pytest.raises(CodegenError, match="kernel wide: 2048 iterations bound to threadIdx.x "
                                           "exceed its limit of 1024"):
        generate_cuda(Kernel("wide", (A,), ("A",),
                             threads(2048, lambda t: Store(A, (t,), const(0.0)))), SPEC)
    acc = Buffer("acc", (300,), DType.FLOAT32, level="fragment")
    with pytest.raises(CodegenError, match="need 300 32-bit registers per thread, above "
                                           "max_registers_per_thread 255"):
        generate_cuda(Kernel("regs", (A,), ("A",), threads(
            32, lambda t: Allocate(acc, Store(A, (t,), const(0.0))))), SPEC)


def test_constructs_cuda_cannot_express_are_refused_naming_kernel_and_construct() -> None:
    A = Buffer("A", (32,), DType.FLOAT32)
    stream = Stream("s", DType.FLOAT32)
    with pytest.raises(CodegenError, match="kernel k: the CUDA code generator cannot express "
                                           "the statement StreamPush"):
        generate_cuda(Kernel("k", (A,), ("A",), StreamPush(stream, const(1.0))), SPEC)
    parallel = For(Var("p"), const(4), LoopKind.PARALLEL, Store(A, (Var("p"),), const(0.0)))
    with pytest.raises(CodegenError, match="cannot express a parallel loop"):
        generate_cuda(Kernel("k", (A,), ("A",), parallel), SPEC)
    vec = Buffer("V", (32,), DType.FLOAT32, lanes=4)
    with pytest.raises(CodegenError, match="parameter V of element type float32x4"):
        generate_cuda(Kernel("k", (vec,), ("V",), Seq(())), SPEC)
    with pytest.raises(CodegenError, match="an atomic max on float32"):
        generate_cuda(Kernel("k", (A,), ("A",), threads(32, lambda t: AtomicUpdate(
            A, (const(0),), const(1.0), ReduceOp.MAX))), SPEC)
    divergent = threads(32, lambda t: IfThenElse(t < 16, Barrier("block")))
    with pytest.raises(CodegenError, match=r"a block barrier under the thread-dependent "
                                           r"condition \(\(t < 16\)\)"):
        generate_cuda(Kernel("k", (A,), ("A",), divergent), SPEC)
    unguarded = Seq((Store(A, (const(0),), const(1.0)),
                     threads(32, lambda t: Store(A, (t,), const(0.0)))))
    with pytest.raises(CodegenError, match="the store into A outside the loops bound to "
                                           "threadIdx.x"):
        generate_cuda(Kernel("k", (A,), ("A",), unguarded), SPEC)


def async_copy_kernel() -> Kernel:
    A = Buffer("A", (8, 32), DType.FLOAT32)
    B = Buffer("B", (8, 32), DType.FLOAT32)
    tile = Buffer("tile", (32,), DType.FLOAT32, level="shared")
    zero = (const(0),)
    body = threads(8, lambda t: Allocate(tile, Seq((
        AsyncCopy(Region(tile, zero, (32,)), Region(A, (t, const(0)), (1, 32))), CommitGroup(),
        WaitGroup(0), Store(B, (t, const(3)), BufferLoad(tile, (const(3),)))))), axis="blockIdx.x")
    return Kernel("staged", (A, B), ("B",), body)


def test_async_copies_in_16_byte_chunks_on_sm80_refused_before() -> None:
    text = generate_cuda(async_copy_kernel(), SPEC).text
    assert ("tc_cp_async_16(&tile[(0 + (copy_i0 * 4))], "
            "&A[((t * 32) + (0 + (copy_i0 * 4)))]);") in text
    assert "tc_cp_async_commit();" in text and "tc_cp_async_wait<0>();" in text
    with pytest.raises(CodegenError, match=r"an asynchronous copy \(cp.async\) for sm_75; "
                                           "cp.async needs sm_80 or newer"):
        generate_cuda(async_copy_kernel(), SPEC, arch=75)


def test_integer_semantics_floor_where_the_sign_is_unknown() -> None:
    A = Buffer("A", (16,), DType.INT8)
    B = Buffer("B", (16,), DType.INT8)
    body = threads(16, lambda t: Store(B, (t,), (BufferLoad(A, (t,)) // const(3, "int8"))
                                       + BufferLoad(A, ((t + 5) % 16,))))
    text = generate_cuda(Kernel("ints", (A, B), ("B",), body), SPEC).text
    assert "tc_floordiv(A[t], 3)" in text
    assert "A[((t + 5) % 16)]" in text  # t + 5 >= 0: C's % is the floor modulo
    # int8 results wrap like numpy's: every operation and the store go back to 8 bits
    assert "(((signed char)(tc_floordiv(A[t], 3))) + A[((t + 5) % 16)])" in text
    assert "B[t] = ((signed char)(((signed char)(" in text


def test_half_values_compute_in_float_and_round_on_store() -> None:
    A = Buffer("A", (32,), DType.FLOAT16)
    B = Buffer("B", (32,), DType.BFLOAT16)
    body = threads(32, lambda t: Store(B, (t,), (BufferLoad(A, (t,)) * const(0.1, "float16"))
                                       .astype("bfloat16")))
    text = generate_cuda(Kernel("halves", (A, B), ("B",), body), SPEC).text
    # the cast to bfloat16 and the store round once together (rounding twice = once)
    assert ("B[t] = __float2bfloat16((__half2float(A[t]) * 0.0999755859375f));") in text


def test_subgroup_reduction_must_not_sit_under_a_thread_condition() -> None:
    A = Buffer("A", (32,), DType.FLOAT32)
    S = Buffer("S", (1,), DType.FLOAT32)
    body = threads(32, lambda t: IfThenElse(t < 16, SubgroupReduce(
        S, (const(0),), BufferLoad(A, (t,)), t, 16)))
    with pytest.raises(CodegenError, match="a warp shuffle under the thread-dependent"):
        generate_cuda(Kernel("k", (A, S), ("S",), body), SPEC)


def test_generated_kernels_compile_with_nvrtc_for_sm80_and_sm90(tmp_path) -> None:
    """The real tilecraft_cuda.h and CUDA headers from pip: NVRTC compiles the text."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    import glob
    import sys
    from importlib.resources import files

    found = glob.glob(f"{sys.prefix}/lib/python*/site-packages/nvidia/cu13/include")
    if not found:
        pytest.skip("the CUDA headers from pip (nvidia-cuda-runtime) are not installed")
    include = str(files("tilecraft_nvidia_tc") / "include")
    sources = [generate_cuda(k, SPEC) for k in kernels_of("softmax[7x13]")[:1]]
    sources += [generate_cuda(async_copy_kernel(), SPEC), generate_cuda(vector_kernel(4), SPEC)]
    for source in sources:
        for arch in ("sm_80", "sm_90"):
            _, program = nvrtc.nvrtcCreateProgram(source.text.encode(), b"k.cu", 0, [], [])
            options = [f"--gpu-architecture={arch}".encode(), f"-I{include}".encode(),
                       f"-I{found[0]}".encode(), b"-std=c++17"]
            (result,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
            _, size = nvrtc.nvrtcGetProgramLogSize(program)
            log = bytearray(size)   # never b" " * size: size 1 is the shared b" "
            nvrtc.nvrtcGetProgramLog(program, log)
            assert result == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode()
