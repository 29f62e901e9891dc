"""The AscendC emulation: generated sources against the reference (the Cube path on awkward
shapes, half rounding), and the programming model's rules enforced by the header on
hand-written kernels (level capacities, queue discipline, fractal operands)."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_ascend_npu.emulation import AscendEmulationError, EmulatedAscendKernel
from tilecraft_ascend_npu.target import AscendNpuTarget

import tilecraft as tc
from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError, TilecraftError
from tilecraft.kernel_ir import (
    Allocate,
    Barrier,
    Buffer,
    BufferLoad,
    For,
    Kernel,
    LoopKind,
    Seq,
    Store,
)
from tilecraft.ops import matmul
from tilecraft.target.base import Source
from tilecraft.te import Var, const


@pytest.fixture(scope="module")
def target() -> AscendNpuTarget:
    return AscendNpuTarget()


@pytest.mark.parametrize(("m", "k", "n"), [(37, 45, 29), (1, 1, 1), (17, 16, 33)])
def test_float16_matmul_runs_on_the_cube(target: AscendNpuTarget, m: int, k: int,
                                         n: int) -> None:
    a = te.placeholder((m, k), name="A", dtype="float16")
    b = te.placeholder((k, n), name="B", dtype="float16")
    graph = tc.Graph([matmul(a, b)])
    exe = tc.compile(graph, target=target)
    (source,) = exe.sources.values()
    assert {"LoadData", "Mmad", "Fixpipe"} <= set(source.meta["calls"])
    assert "TQue<TPosition::A2, 2>" in source.text and "TQue<TPosition::CO1, 2>" in source.text
    rng = np.random.default_rng(m * 100 + n)
    inputs = {"A": rng.standard_normal((m, k)).astype(np.float16),
              "B": rng.standard_normal((k, n)).astype(np.float16)}
    got = exe(**inputs)
    expected = tc.reference.run(graph, **inputs)
    assert got.dtype == np.float16
    # fp32 sums in another order, one fp16 rounding at the end: at most one ulp apart
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                               rtol=2e-3, atol=2e-3)


def test_half_rounds_to_nearest_even_like_numpy(target: AscendNpuTarget) -> None:
    x = te.placeholder((4, 24), name="x")
    y = te.compute((4, 24), lambda i, j: x[i, j].astype("float16"), name="y")
    graph = tc.Graph([y])
    exe = tc.compile(graph, target=target)
    tiny = np.float32(2.0 ** -24)
    special = np.array([0.1, 1 / 3, 65504.0, 65520.0, 70000.0, -65520.0, 1 + 2 ** -11,
                        1 + 3 * 2 ** -11, tiny / 2, tiny * 1.5, tiny * 2.5, -0.0, np.inf,
                        -np.inf, 2.0 ** -14, 2.0 ** -14 * 0.999, 5e-8, 6e-8, 1e-3, 1024.5,
                        2049.0, 2051.0, -3.14159, 12345.678], np.float32)
    values = np.tile(special, (4, 1)) * np.float32([[1], [-1], [0.5], [3]])
    got = exe(x=values)
    with np.errstate(over="ignore"):  # 70000 and 65520 overflow to inf, as they should
        expected = values.astype(np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))


def _handwritten(name: str, members: str, init: str, process: str) -> Source:
    text = f"""#define TC_ASCEND_L1_BYTES 1048576LL
#define TC_ASCEND_L0A_BYTES 65536LL
#define TC_ASCEND_L0B_BYTES 65536LL
#define TC_ASCEND_L0C_BYTES 262144LL
#define TC_ASCEND_UB_BYTES 262144LL
#include "tilecraft_ascendc.h"
using namespace AscendC;
class Op {{
public:
    void Init(GM_ADDR x) {{ xGm.SetGlobalBuffer((__gm__ float*)x, 64); {init} }}
    void Process() {{ {process} }}
private:
    TPipe pipe;
    GlobalTensor<float> xGm;
    {members}
}};
extern "C" __global__ __aicore__ void {name}(GM_ADDR x) {{ Op op; op.Init(x); op.Process(); }}
"""
    params = [{"name": "x", "dtype": "float32", "shape": [64], "output": True}]
    return Source("ascend_npu", name, "ascendc", text, name,
                  meta={"entry": name, "block_dim": 2, "params": params}, suffix="cpp")


QUEUE = "TQue<TPosition::VECIN, 2> q;"
SETUP = 'q.label = "q"; pipe.InitBuffer(q, 2, 256);'
COPY_IN = ("LocalTensor<float> t = q.AllocTensor<float>(); "
           "DataCopy(t, xGm, 64);")


def test_a_handwritten_kernel_following_the_discipline_runs() -> None:
    process = (COPY_IN + " q.EnQue(t); t = q.DeQue<float>(); Muls(t, t, 2.0f, 64); "
               "DataCopy(xGm, t, 64); q.FreeTensor(t);")
    x = np.arange(64, dtype=np.float32)
    EmulatedAscendKernel(_handwritten("doubled", QUEUE, SETUP, process))({"x": x})
    np.testing.assert_array_equal(x, np.arange(64) * 4.0)  # block_dim 2: doubled twice


@pytest.mark.parametrize(("name", "members", "init", "process", "message"), [
    ("l0a_overflow", "TQue<TPosition::A2, 2> a;", 'a.label = "a"; pipe.InitBuffer(a, 2, 40960);',
     "", r"InitBuffer of a: 2 x 40960 bytes in L0A overflow the level: 0 bytes already in "
         r"use, 65536 the capacity"),
    ("empty_dequeue", QUEUE, SETUP, "LocalTensor<float> t = q.DeQue<float>();",
     "DeQue of the empty queue q"),
    ("never_enqueued", QUEUE, SETUP, COPY_IN + " q.FreeTensor(t);",
     "FreeTensor on q of a tensor never EnQue'd"),
    ("leak", QUEUE, SETUP, COPY_IN + " q.EnQue(t); t = q.DeQue<float>();",
     "still allocated when the kernel ends"),
    ("used_in_queue", QUEUE, SETUP, COPY_IN + " q.EnQue(t); Muls(t, t, 2.0f, 64);",
     "Muls on q while it sits in its queue"),
    ("unpadded_copy", QUEUE, SETUP, "LocalTensor<float> t = q.AllocTensor<float>(); "
     "DataCopy(t, xGm, 7);", "DataCopy moves whole 32-byte blocks"),
    ("not_fractal", "TQue<TPosition::A2, 1> a; TQue<TPosition::B2, 1> b; "
     "TQue<TPosition::CO1, 1> c;",
     'a.label = "a"; b.label = "b"; c.label = "c"; pipe.InitBuffer(a, 1, 512); '
     "pipe.InitBuffer(b, 1, 512); pipe.InitBuffer(c, 1, 1024);",
     "auto ta = a.AllocTensor<half>(); auto tb = b.AllocTensor<half>(); "
     "auto tc = c.AllocTensor<float>(); MmadParams p; Mmad(tc, ta, tb, p);",
     "the Cube operand a is not in fractal layout"),
])
def test_the_emulation_enforces_the_programming_model(name: str, members: str, init: str,
                                                      process: str, message: str) -> None:
    kernel = EmulatedAscendKernel(_handwritten(name, members, init, process))
    with pytest.raises(AscendEmulationError, match=message) as caught:
        kernel({"x": np.zeros(64, np.float32)})
    assert isinstance(caught.value, TilecraftError)
    assert f"kernel {name} (emulated AscendC" in str(caught.value)
    assert "AI core 0 of 2" in str(caught.value)


def test_codegen_refuses_what_ascendc_cannot_express(target: AscendNpuTarget) -> None:
    x = Buffer("x", (16,), DType.FLOAT32)
    staging = Buffer("x_l1", (16,), DType.FLOAT32, level="L1")
    i = Var("i")
    l1 = Kernel("in_l1", (x,), ("x",), Allocate(staging, For(
        i, const(16), LoopKind.SERIAL, Store(staging, (i,), BufferLoad(x, (i,))))))
    with pytest.raises(CodegenError, match="kernel in_l1: buffer x_l1 is allocated in L1"):
        target.codegen(l1)
    barrier = Kernel("synced", (x,), ("x",), Seq((Barrier("block"),)))
    with pytest.raises(CodegenError, match="kernel synced: the AscendC code generator cannot "
                                           "express the statement Barrier"):
        target.codegen(barrier)
    a0 = Buffer("a0", (16, 16), DType.FLOAT16, level="L0A")
    scalar = Kernel("scalar_l0", (x,), ("x",), Allocate(a0, For(
        i, const(16), LoopKind.SERIAL, Store(x, (i,), BufferLoad(a0, (i, i)).astype("float32")))))
    with pytest.raises(CodegenError, match="a scalar access to a0 in L0A"):
        target.codegen(scalar)


def test_elementwise_code_uses_the_vector_unit(target: AscendNpuTarget) -> None:
    a = te.placeholder((8, 64), name="a")
    b = te.placeholder((8, 64), name="b")
    out = te.compute((8, 64), lambda i, j: a[i, j] * b[i, j], name="out")
    exe = tc.compile(tc.Graph([out]), target=target)
    (source,) = exe.sources.values()
    assert "Mul" in source.meta["calls"]
    assert "TQue<TPosition::VECIN, 2>" in source.text and "EnQue" in source.text
    rng = np.random.default_rng(3)
    inputs = {"a": rng.standard_normal((8, 64)).astype(np.float32),
              "b": rng.standard_normal((8, 64)).astype(np.float32)}
    np.testing.assert_array_equal(exe(**inputs), inputs["a"] * inputs["b"])
