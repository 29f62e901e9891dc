"""The HLS C++ code generator: the pragmas and structure of FlexTensor's FPGA template in the
generated text, HLS types by dtype, and CodegenErrors for what HLS cannot express."""

from __future__ import annotations

import re

import pytest
from tilecraft_fpga_hls.examples import gemm_kernel
from tilecraft_fpga_hls.target import FpgaHlsTarget

import tilecraft as tc
from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir import Barrier, Buffer, BufferLoad, For, Kernel, LoopKind, Seq, Store
from tilecraft.te import Var, const


@pytest.fixture(scope="module")
def matmul_source() -> str:
    A = te.placeholder((13, 17), name="A")
    B = te.placeholder((17, 19), name="B")
    k = te.reduce_axis(17, name="k")
    C = te.compute((13, 19), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    # the core's dataflow lowering (untuned contractions otherwise take the model's design)
    exe = tc.compile(tc.Graph.of(C), target=FpgaHlsTarget(model_default=False))
    (source,) = exe.sources.values()
    return source.text


def test_top_function_has_an_axi_port_per_array_and_axilite_control(matmul_source: str) -> None:
    assert 'extern "C" void C(const float* A, const float* B, float* C_1)' in matmul_source
    ports = re.findall(r"#pragma HLS INTERFACE m_axi port=(\w+) offset=slave bundle=(\w+) "
                       r"depth=(\d+)", matmul_source)
    assert ports == [("A", "gmem0", "221"), ("B", "gmem1", "323"), ("C_1", "gmem2", "247")]
    control = re.findall(r"#pragma HLS INTERFACE s_axilite port=(\w+) bundle=control",
                         matmul_source)
    assert control == ["A", "B", "C_1", "return"]


def test_dataflow_region_of_three_stage_functions_linked_by_streams(matmul_source: str) -> None:
    region = matmul_source[matmul_source.index("static void C_dataflow"):
                           matmul_source.index('extern "C"')]
    assert region.splitlines()[2] == "#pragma HLS DATAFLOW"
    for stream in ("A_stream", "B_stream", "C_stream"):
        assert f'hls::stream<float, 2> {stream}("{stream}");' in region
        assert f"#pragma HLS STREAM variable={stream} depth=2" in region
    calls = re.findall(r"^    (C_\w+)\(", region, flags=re.MULTILINE)
    assert calls == ["C_read", "C_compute", "C_write"]
    assert "static void C_read(const float* A, const float* B, hls::stream<float, 2>& " \
           "A_stream, hls::stream<float, 2>& B_stream)" in matmul_source
    # every stage's innermost loop is pipelined at II=1, under a label
    assert matmul_source.count("#pragma HLS PIPELINE II=1") == 3
    assert re.search(r"L_k: for \(int k = 0; k < 17; \+\+k\) \{\n#pragma HLS PIPELINE II=1",
                     matmul_source)


def test_mac_array_unrolled_buffers_partitioned_int_types() -> None:
    source = FpgaHlsTarget(rows=4, cols=8, dtype="int8").codegen(
        gemm_kernel(4, 8, 13, (2, 3), DType.INT8)).text
    assert 'extern "C" void gemm(const ap_int<8>* A, const ap_int<8>* B, ap_int<32>* C)' \
        in source
    assert "ap_int<8> a_buf[4][13];\n#pragma HLS BIND_STORAGE variable=a_buf type=ram_2p " \
           "impl=bram\n#pragma HLS ARRAY_PARTITION variable=a_buf type=complete dim=1" in source
    assert "#pragma HLS ARRAY_PARTITION variable=b_buf type=cyclic factor=8 dim=2" in source
    assert "ap_int<32> acc[4][8];\n#pragma HLS ARRAY_PARTITION variable=acc type=complete " \
           "dim=0" in source
    # the PE array: inside the pipelined k-loop, rows x cols MACs unrolled
    mac = source[source.index("L_kk:"):]
    assert re.findall(r"#pragma HLS (\w+)", mac)[:4] == ["PIPELINE", "UNROLL", "UNROLL",
                                                          "UNROLL"]
    assert "acc[i1][i2] = (((int)(acc[i1][i2])) + (((int)(a_buf[i1][(kk + r1)])) * " \
           "((int)(b_buf[(kk + r1)][i2]))));" in mac


def test_unroll_factor_and_half() -> None:
    x = Buffer("x", (10,), DType.FLOAT16, level="DDR")
    y = Buffer("y", (10,), DType.FLOAT16, level="DDR")
    i = Var("i")
    body = For(i, const(10), LoopKind.UNROLLED, Store(y, (i,), BufferLoad(x, (i,)) * 2.0),
               lanes=5)
    source = FpgaHlsTarget().codegen(Kernel("twice", (x, y), ("y",), body)).text
    assert "#pragma HLS UNROLL factor=5" in source
    assert "y[i] = ((half)((((float)(x[i])) * 2.0f)));" in source


def _one_loop(kind: LoopKind, body_dtype: DType = DType.FLOAT32, inner: object = None) -> Kernel:
    a = Buffer("a", (8,), body_dtype, level="DDR")
    i = Var("i")
    body = inner if inner is not None else Store(a, (i,), const(0, body_dtype))
    return Kernel("k1", (a,), ("a",), For(i, const(8), kind, body, lanes=4))


@pytest.mark.parametrize(("kernel", "message"), [
    (_one_loop(LoopKind.VECTOR), "loop i is vector, which this target cannot express"),
    (_one_loop(LoopKind.SERIAL, inner=Seq((Barrier("block"),))),
     "kernel k1: the HLS C\\+\\+ code generator cannot express the statement Barrier"),
    (_one_loop(LoopKind.SERIAL, DType.BFLOAT16),
     "parameter a of element type bfloat16 .* the HLS C\\+\\+ code generator takes"),
])
def test_what_hls_cannot_express(kernel: Kernel, message: str) -> None:
    with pytest.raises(CodegenError, match=message):
        FpgaHlsTarget().codegen(kernel)


def test_a_loop_inside_a_pipelined_loop_needs_a_constant_extent() -> None:
    a = Buffer("a", (8, 8), DType.FLOAT32, level="DDR")
    i, j = Var("i"), Var("j")
    inner = For(j, i + 1, LoopKind.SERIAL, Store(a, (i, j), const(1.0)))
    kernel = Kernel("tri", (a,), ("a",), For(i, const(8), LoopKind.PIPELINED, inner,
                                             initiation_interval=1))
    with pytest.raises(CodegenError, match=r"kernel tri: .* the loop over j of extent \(i \+ 1\) "
                                           r"inside the pipelined loop i"):
        FpgaHlsTarget().codegen(kernel)
