"""One catalogue of bad inputs: each row builds a bad situation and names what must come of it.

Either a :class:`Refused` — the :class:`~tilecraft.errors.TilecraftError` subclass and a
fragment of its message (which names the culprit and the fix) — or :data:`EQUAL` — accepted,
and the result equals the numpy reference (NaN where numpy gives NaN, the same infinities).
Never a segfault, a bare numpy/KeyError/TypeError, a silent wrong result, or a file written
half. Every row that once failed is marked ``# was: ...`` with what it did before the fix.
"""

from __future__ import annotations

import importlib.util
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import (
    AllocationError,
    DTypeError,
    GraphError,
    IndexBoundsError,
    InputError,
    PluginError,
    ReduceAxisError,
    ShapeError,
    TargetError,
    TilecraftError,
)
from tilecraft.intrin import MappingError
from tilecraft.tuning.database import TuningDatabase, TuningDatabaseError


def _helper(name: str) -> Any:
    """A helper module beside this file (pytest imports tests with --import-mode=importlib,
    so the folder is not on sys.path)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


P = _helper("bad_input_programs")  # programs, arrays, numpy references
H = _helper("bad_input_fixtures")  # fake plugins, damaged databases
fake_plugins = H.fake_plugins  # the fixture
RNG, assert_ieee_equal, cpu_flags = P.RNG, P.assert_ieee_equal, P.cpu_flags
scale_add, matmul, a6x40, passed_through = P.scale_add, P.matmul, P.a6x40, P.passed_through
scale_add_with, matmul_with, strided = P.scale_add_with, P.matmul_with, P.strided
read_only, misaligned, int8_conv = P.read_only, P.misaligned, P.int8_conv
softmax_case, layer_norm_case, attention_case = P.softmax_case, P.layer_norm_case, P.attention_case
specials_through, numpy_max_pool = P.specials_through, P.numpy_max_pool
outer_product, ones_huge, huge_identity, HUGE = (P.outer_product, P.ones_huge, P.huge_identity,
                                                 P.HUGE)
GOOD_SPEC_YAML, MALFORMED_YAML = H.GOOD_SPEC_YAML, H.MALFORMED_YAML
UNKNOWN_LEVEL_INTRINSICS = H.UNKNOWN_LEVEL_INTRINSICS
good_database, record, truncated = H.good_database, H.record, H.truncated
edit_database, with_unknown_field, damaged = H.edit_database, H.with_unknown_field, H.damaged
open_db, write, random_bytes, other_program = H.open_db, H.write, H.random_bytes, H.other_program
broken_target, spec_file, binary_spec = H.broken_target, H.spec_file, H.binary_spec
hanging_target, hanging_extension, slow_probe = H.hanging_target, H.hanging_extension, H.slow_probe
exiting_extension, bad_timeout_setting = H.exiting_extension, H.bad_timeout_setting
broken_hook = H.broken_hook


@dataclass(frozen=True)
class Refused:
    """The row must raise ``error`` (or a subclass) whose message matches ``fragment``."""

    error: type[TilecraftError]
    fragment: str


@dataclass(frozen=True)
class Equal:
    """The row returns (got, want); they must agree within ``tolerance``, NaN for NaN."""

    tolerance: float = 0.0


EQUAL = Equal()
CLOSE = Equal(2e-5)


@dataclass(frozen=True)
class Context:
    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch
    request: pytest.FixtureRequest

    @property
    def plugins(self) -> Any:
        """The fake plugin package (faked entry points: the installed targets are hidden)."""
        return self.request.getfixturevalue("fake_plugins")


@dataclass(frozen=True)
class Row:
    id: str
    make: Callable[[Context], Any]
    expect: Refused | Equal
    #: refused rows that must not allocate: traced peak (numpy's memory included) below this
    max_traced_bytes: int | None = None
    #: a CPU flag (/proc/cpuinfo) the row needs; skipped with the reason when absent
    needs: str | None = None


def _(function: Callable[[], Any]) -> Callable[[Context], Any]:
    """A row that needs no fixture."""
    return lambda ctx: function()


EXECUTABLE_ROWS = [
    Row("wrong shape", _(lambda: scale_add()(np.zeros((40, 6), np.float32), a6x40())),
        Refused(InputError, r"input 'A' has shape \(40, 6\), expected \(6, 40\)")),
    Row("wrong dtype", _(lambda: scale_add()(a6x40().astype(np.float64), a6x40())),
        Refused(InputError, r"'A' has dtype float64, expected float32; convert it with "
                            r"\.astype\('float32'\)")),
    Row("big-endian float32", _(lambda: scale_add()(a6x40().astype(">f4"), a6x40())),
        Refused(InputError, r"'A' has dtype >f4, expected float32")),
    Row("integer array for a float input", _(lambda: matmul()(
        np.ones((33, 20), np.int32), np.ones((20, 47), np.float32))),
        Refused(InputError, r"'A' has dtype int32, expected float32")),
    Row("missing input", _(lambda: scale_add()(a6x40())),
        Refused(InputError, r"missing input\(s\): B: float32\[6, 40\]")),
    Row("extra positional input", _(lambda: scale_add()(a6x40(), a6x40(), a6x40())),
        Refused(InputError, "got 3 positional arrays but the program has 2 inputs")),
    Row("unknown keyword input", _(lambda: scale_add()(A=a6x40(), B=a6x40(), D=a6x40())),
        Refused(InputError, r"unknown input\(s\) 'D'")),
    Row("input given twice", _(lambda: scale_add()(a6x40(), a6x40(), A=a6x40())),
        Refused(InputError, "'A' was given both by position and by name")),
    Row("a list instead of an array", _(lambda: scale_add()(a6x40().tolist(), a6x40())),
        Refused(InputError, r"'A' must be a numpy array .* got list; wrap it with np\.asarray")),
    # was: accepted, the mask silently ignored (masked-out values used as data)
    Row("masked array", _(lambda: scale_add()(np.ma.masked_less(a6x40(), 0.0), a6x40())),
        Refused(InputError, r"'A' is a masked array.*\.filled\(")),
    Row("zero-size array", _(lambda: scale_add()(np.zeros((0, 40), np.float32), a6x40())),
        Refused(InputError, r"'A' has shape \(0, 40\), expected \(6, 40\)")),
    Row("non-contiguous (strided) arrays", _(lambda: scale_add_with(strided((6, 40)),
                                                                  strided((6, 40), 3))), EQUAL),
    Row("Fortran-order arrays", _(lambda: matmul_with(
        np.asfortranarray(RNG.standard_normal((33, 20)).astype(np.float32)),
        np.asfortranarray(RNG.standard_normal((20, 47)).astype(np.float32)))), CLOSE),
    Row("negative strides", _(lambda: matmul_with(
        RNG.standard_normal((33, 20)).astype(np.float32)[::-1, ::-1],
        RNG.standard_normal((20, 47)).astype(np.float32)[::-1])), CLOSE),
    Row("read-only arrays", _(lambda: matmul_with(
        read_only(RNG.standard_normal((33, 20)).astype(np.float32)),
        read_only(RNG.standard_normal((20, 47)).astype(np.float32)))), CLOSE),
    Row("broadcast view (zero strides, read-only)", _(lambda: scale_add_with(
        np.broadcast_to(RNG.standard_normal(40).astype(np.float32), (6, 40)), a6x40())), EQUAL),
    Row("misaligned arrays", _(lambda: matmul_with(
        misaligned(RNG.standard_normal((33, 20)).astype(np.float32)),
        misaligned(RNG.standard_normal((20, 47)).astype(np.float32)))), CLOSE),
    Row("the same array for two inputs", _(lambda: (lambda a: scale_add_with(a, a))(a6x40())),
        EQUAL),
    # was: the caller's own array returned (writing the result changed the input)
    Row("an input that is also the output comes back as a copy", _(lambda: passed_through()),
        EQUAL),
    # was: statistics.StatisticsError: no median for empty data
    Row("benchmark with repeat=0", _(lambda: scale_add().benchmark(a6x40(), a6x40(), repeat=0)),
        Refused(InputError, r"benchmark\(repeat=0, warmup=2\): repeat must be at least 1")),
    # was: AttributeError: 'int' object has no attribute 'partition'
    Row("a number as target", _(lambda: tc.compile(scale_add().graph, target=42)),
        Refused(TargetError, "target=42: give an installed target's name")),
    Row("an unknown target", _(lambda: tc.compile(scale_add().graph, target="tpu")),
        Refused(TargetError, "unknown target 'tpu'; installed targets: .*x86_avx512")),
    Row("compiling an array", _(lambda: tc.compile(np.zeros(3), target="x86_avx512")),
        Refused(GraphError, "compile expects a Graph, a Tensor or a list of Tensors, got "
                            "ndarray")),
    Row("a junk file as tuning database", lambda ctx: tc.compile(
        scale_add().graph, target="x86_avx512",
        database=str(random_bytes(ctx.tmp_path / "junk.db"))),
        Refused(TuningDatabaseError, r"junk\.db is not a tilecraft tuning database")),
    Row("reference: wrong shape", _(lambda: tc.reference.run(
        scale_add().graph, A=np.zeros((6, 41), np.float32), B=a6x40())),
        Refused(InputError, r"input 'A' has shape \(6, 41\), expected shape \(6, 40\)")),
    Row("reference: masked array", _(lambda: tc.reference.run(
        scale_add().graph, A=np.ma.masked_less(a6x40(), 0.0), B=a6x40())),
        Refused(InputError, r"'A' is a masked array")),
]


# te construction: shapes, bounds and reduce axes ----------------------------------------------

A48 = te.placeholder((4, 8), name="A")


def numpy_scalars() -> tuple[np.ndarray, np.ndarray]:
    """Extents, indices and constants given as numpy scalars, as a numpy user writes them."""
    rows = np.prod(np.array([2, 3]))  # np.int64(6)
    X = te.placeholder((rows, np.int32(5)), name="X")
    k = te.reduce_axis(np.int64(5), name="k")
    Y = te.compute((rows,), lambda i: te.sum(X[i, k] * np.float32(0.5) + X[i, np.int64(1)],
                                             axis=k), name="Y")
    x = RNG.standard_normal((6, 5)).astype(np.float32)
    assert X.shape == (6, 5) and all(type(n) is int for n in X.shape)
    return tc.compile(Y, target="x86_avx512")(x), (x * 0.5 + x[:, 1:2]).sum(axis=1)


def reduce_k(extent: int = 8) -> te.IterVar:
    return te.reduce_axis(extent, name="k")


TE_ROWS = [
    Row("zero-size placeholder", _(lambda: te.placeholder((0, 8), name="Z")),
        Refused(ShapeError, "placeholder Z: extent 0 must be at least 1")),
    Row("zero-size compute", _(lambda: te.compute((4, 0), lambda i, j: A48[i, 0], name="B")),
        Refused(ShapeError, "compute B: extent 0 must be at least 1")),
    Row("zero-size reduce axis", _(lambda: te.reduce_axis(0, name="r")),
        Refused(ShapeError, "reduce_axis r: extent 0 must be at least 1")),
    Row("negative extent", _(lambda: te.placeholder((-3,), name="N")),
        Refused(ShapeError, "placeholder N: extent -3 must be at least 1")),
    Row("float extent", _(lambda: te.placeholder((2.5,), name="F")),
        Refused(ShapeError, "extent 2.5 is not an int")),
    # was: accepted; byte offsets of 2**90 elements overflow the kernels' 64-bit indices
    Row("more elements than 64-bit offsets can address", _(lambda: te.placeholder(
        (1 << 30, 1 << 30, 1 << 30), name="H")),
        Refused(ShapeError, r"placeholder H: shape .* has \d+ elements, more than the 2\*\*60")),
    # was: "extent np.int64(6) is not an int" (a shape computed with numpy refused)
    Row("numpy integers as extents and constants", _(lambda: numpy_scalars()), CLOSE),
    Row("a bool as extent", _(lambda: te.placeholder((True, 3), name="T")),
        Refused(ShapeError, "placeholder T: extent True is not an int")),
    Row("unknown dtype", _(lambda: te.placeholder((4,), "float13", name="D")),
        Refused(DTypeError, "unknown dtype 'float13'; use one of")),
    Row("read A[i + 1] past the end", _(lambda: te.compute(
        (4, 8), lambda i, j: A48[i + 1, j], name="B")),
        Refused(IndexBoundsError, r"compute B: index 0 of A\[\(i \+ 1\), j\] .* ranges over "
                                  r"\[1, 4\], but dimension 0 of A has extent 4; guard")),
    Row("read A[i - 1] before the start", _(lambda: te.compute(
        (4, 8), lambda i, j: A48[i - 1, j], name="B")),
        Refused(IndexBoundsError, r"ranges over \[-1, 2\]")),
    Row("output larger than its input", _(lambda: te.compute(
        (5, 8), lambda i, j: A48[i, j], name="B")),
        Refused(IndexBoundsError, r"index 0 of A\[i, j\] \(i\) ranges over \[0, 4\]")),
    Row("reduce axis longer than the dimension", _(lambda: (lambda k: te.compute(
        (4,), lambda i: te.sum(A48[i, k], axis=k), name="B"))(reduce_k(9))),
        Refused(IndexBoundsError, r"index 1 of A\[i, k\] \(k\) ranges over \[0, 8\]")),
    Row("floordiv by zero in an index", _(lambda: te.compute(
        (4, 8), lambda i, j: A48[i // 0, j], name="B")),
        Refused(TilecraftError, r"'//' by zero in i // 0")),
    Row("mod by zero in an index", _(lambda: te.compute(
        (4, 8), lambda i, j: A48[i % 0, j], name="B")),
        Refused(TilecraftError, r"'%' by zero in i % 0")),
    Row("float index", _(lambda: te.compute(
        (4, 8), lambda i, j: A48[te.cast("float32", i), j], name="B")),
        Refused(ShapeError, "indices must be integers")),
    Row("too few indices", _(lambda: te.compute((4,), lambda i: A48[i], name="B")),
        Refused(ShapeError, r"A has 2 dimensions \(4, 8\) but was indexed with 1 indices")),
    Row("reduce axis outside a reduction", _(lambda: (lambda k: te.compute(
        (4,), lambda i: A48[i, k], name="B"))(reduce_k())),
        Refused(ReduceAxisError, "reduce axis k is used outside a reduction over it; wrap")),
    Row("the same reduce axis twice", _(lambda: (lambda k: te.compute(
        (4,), lambda i: te.sum(A48[i, k], axis=[k, k]), name="B"))(reduce_k())),
        Refused(ReduceAxisError, "reduce axis k appears twice in the same reduction")),
    Row("a spatial axis as reduce axis", _(lambda: te.compute(
        (4,), lambda i: te.sum(A48[i, i], axis=i), name="B")),
        Refused(ReduceAxisError, "i is a spatial axis, not a reduce axis")),
    Row("a reduction inside a larger expression", _(lambda: (lambda k: te.compute(
        (4,), lambda i: te.sum(A48[i, k], axis=k) + 1.0, name="B"))(reduce_k())),
        Refused(ReduceAxisError, "must be the whole body of a compute")),
    Row("index variable of another compute", _(lambda: (lambda B: te.compute(
        (4, 8), lambda i, j: A48[B.op.axes[0], j], name="C"))(
        te.compute((4, 8), lambda i, j: A48[i, j], name="B"))),
        Refused(ReduceAxisError, "index variable i belongs to another compute")),
    Row("operands of different dtypes", _(lambda: te.compute(
        (4,), lambda i: A48[i, 0] + te.placeholder((4,), "int32", name="I")[i], name="B")),
        Refused(DTypeError, "operands have different dtypes")),
    Row("lambda arity differs from the shape", _(lambda: te.compute(
        (4, 8), lambda i: A48[i, 0], name="B")),
        Refused(ShapeError, "the lambda must take one index per dimension")),
    Row("ops: the same reduce axis twice", _(lambda: ops.reduce_sum(A48, axes=(1, 1))),
        Refused(ShapeError, r"reduce_sum: axes=\(1, 1\) names the same axis twice")),
    Row("ops: a reduce axis out of range", _(lambda: ops.reduce_max(A48, axes=(-3,))),
        Refused(ShapeError, r"reduce_max: axes=-3 is out of range for a tensor with 2 "
                            r"dimensions; use a value in \[-2, 1\]")),
    Row("ops: softmax over an axis that does not exist", _(lambda: ops.softmax(A48, axis=2)),
        Refused(ShapeError, "softmax: axis=2 is out of range")),
    Row("ops: layer_norm of integers", _(lambda: ops.layer_norm(
        te.placeholder((4, 8), "int8", name="Q"))),
        Refused(DTypeError, "layer_norm: x \\(Q\\) has dtype int8, but layer_norm needs a float")),
    Row("ops: matmul inner dimensions differ", _(lambda: ops.matmul(A48, A48)),
        Refused(ShapeError, "matmul: inner dimensions differ")),
]


# IEEE specials through softmax, layer_norm and the fused chain ---------------------------------

NUMERIC_ROWS = [
    # was: 0 where numpy gives NaN (llvm.maxnum drops a NaN operand)
    Row("relu of NaN", _(lambda: specials_through(ops.relu, lambda x: np.maximum(x, 0))),
        EQUAL),
    # was: as relu
    Row("elementwise min with NaN", _(lambda: specials_through(
        lambda X: te.compute(X.shape, lambda i, j: te.min(X[i, j], 1.0), name="Y"),
        lambda x: np.minimum(x, 1))), EQUAL),
    # was: the row's largest non-NaN value (llvm.vector.reduce.fmax)
    Row("reduce_max over rows with NaN", _(lambda: specials_through(
        lambda X: ops.reduce_max(X, axes=1), lambda x: x.max(axis=1))), EQUAL),
    Row("reduce_min over columns with NaN", _(lambda: specials_through(
        lambda X: ops.reduce_min(X, axes=0), lambda x: x.min(axis=0))), EQUAL),
    Row("max_pool2d with NaN", _(lambda: specials_through(
        lambda X: ops.max_pool2d(X, 2), numpy_max_pool, shape=(1, 2, 7, 37))), EQUAL),
    Row("softmax: NaN, inf, -inf rows (last axis, 37 wide)",
        _(lambda: softmax_case((14, 37), -1)), Equal(1e-5)),
    Row("softmax: NaN, inf, -inf (128 wide)", _(lambda: softmax_case((7, 128), -1)),
        Equal(1e-5)),
    Row("softmax: specials along axis 0", _(lambda: softmax_case((21, 9), 0)), Equal(1e-5)),
    Row("layer_norm: NaN, inf, huge and constant rows", _(lambda: layer_norm_case((14, 37))),
        Equal(1e-4)),
    Row("layer_norm: specials (256 wide)", _(lambda: layer_norm_case((7, 256))), Equal(1e-4)),
    Row("fused matmul-softmax-matmul with NaN and inf", _(lambda: attention_case()),
        Equal(1e-4)),
]


# shapes too large for memory ------------------------------------------------------------------

def half_gib_with_limit(ctx: Context) -> Any:
    ctx.monkeypatch.setenv("TILECRAFT_MEMORY_LIMIT_BYTES", str(1 << 20))
    X = te.placeholder((1 << 14,), name="X")
    Y = te.compute((1 << 13, 1 << 14), lambda i, j: X[j] + 1.0, name="Y")  # 512 MiB
    return tc.compile(Y, target="x86_avx512")(np.ones(1 << 14, np.float32))


MEMORY_ROWS = [
    # was: numpy's MemoryError ("Unable to allocate 4.00 TiB"), naming no tensor
    Row("4 TiB result of an executable", _(lambda: outer_product()(ones_huge())),
        Refused(AllocationError, r"calling the x86_avx512 executable of Y needs 4398046511104 "
                                 r"bytes \(4\.0 TiB\) but this machine has only \d+ bytes .*"
                                 r"Y: float32\[1048576, 1048576\] = 4398046511104 bytes"),
        max_traced_bytes=64 << 20),
    # was: numpy's MemoryError
    Row("4 TiB result in the reference interpreter", _(lambda: tc.reference.run(
        outer_product().graph, X=ones_huge())),
        Refused(AllocationError, r"the reference interpreter needs 4398046511104 bytes .*"
                                 r"Y: float32\[1048576, 1048576\]"),
        max_traced_bytes=64 << 20),
    # was: numpy's MemoryError while copying the view into C order
    Row("a 4 TiB broadcast view as input", _(lambda: huge_identity()(
        np.broadcast_to(np.float32(1.0), (HUGE, HUGE)))),
        Refused(AllocationError, r"copying input 'X' into C order needs 4398046511104 bytes"),
        max_traced_bytes=64 << 20),
    Row("512 MiB result over TILECRAFT_MEMORY_LIMIT_BYTES", half_gib_with_limit,
        Refused(AllocationError, r"needs 536870912 bytes \(512\.0 MiB\) but this machine has "
                                 r"only 1048576 bytes .*TILECRAFT_MEMORY_LIMIT_BYTES"),
        max_traced_bytes=64 << 20),
]


# forced tensorize mappings --------------------------------------------------------------------

def forced(loops: Any, **extra: Any) -> Callable[[Context], Any]:
    return _(lambda: tc.compile(int8_conv(), target="x86_avx512", tensorize={
        "y": {"intrinsic": "vpdpbusd", "loops": loops, **extra}}))


def huge_tensorized(ctx: Context) -> Any:
    """A 1 TiB int8 GEMM result through vpdpbusd: compiling works (nothing is allocated; the
    measurement of the mapped kernel is skipped with a note), calling is refused."""
    n = 1 << 19
    A = te.placeholder((n, 64), "uint8", name="A")
    B = te.placeholder((64, n), "int8", name="B")
    exe = tc.compile(ops.matmul(A, B, out_dtype="int32", name="C"), target="x86_avx512",
                     tensorize={"C": "vpdpbusd"})
    assert any(note.startswith("C: not measured: measuring the tensorized kernel")
               for note in exe.report.notes), exe.report.notes
    return exe(np.broadcast_to(np.uint8(1), (n, 64)), np.broadcast_to(np.int8(1), (64, n)))


TENSORIZE_ROWS = [
    # was: numpy's MemoryError while compiling (random arrays to measure the mapped kernel)
    Row("a tensorized compute too large to measure", huge_tensorized,
        Refused(AllocationError, r"calling the x86_avx512 executable of C needs 1099511627776 "
                                 r"bytes \(1\.0 TiB\)"), needs="avx512_vnni"),
    Row("forced mapping that fails verification", forced({"i1": ["k", "h"], "r1": ["rc"]}),
        Refused(MappingError, r"i1 <- \(k, h\).* fails verification.*\n  - software loop h")),
    Row("forced mapping: spatial loop onto a reduce loop", forced({"i1": ["rc"], "r1": ["k"]}),
        Refused(MappingError, "software loop rc is a reduce loop but intrinsic loop i1 is a "
                              "spatial loop")),
    Row("forced mapping: one loop onto two", forced({"i1": ["k"], "r1": ["k"]}),
        Refused(MappingError, "software loop k is mapped to both i1 and r1")),
    Row("forced mapping: unknown intrinsic loop", forced({"zz": ["k"], "r1": ["rc"]}),
        Refused(MappingError, "vpdpbusd has no loop 'zz'; its loops are i1, r1")),
    Row("forced mapping: unknown software loop", forced({"i1": ["nope"], "r1": ["rc"]}),
        Refused(MappingError, "compute y has no loop named 'nope'")),
    Row("forced mapping: operands swapped", forced(
        {"i1": ["k"], "r1": ["rc"]}, operands={"Src1": "w", "Src2": "x"}),
        Refused(MappingError, "w is int8 but operand Src1 of vpdpbusd takes uint8")),
    Row("forced mapping: unknown operand tensor", forced(
        {"i1": ["k"], "r1": ["rc"]}, operands={"Src1": "nope"}),
        Refused(MappingError, r"no factor assignment of y gives operands \{'Src1': 'nope'\}")),
    # was: TypeError: unhashable type: 'list'
    Row("forced mapping: loops given as a list", forced([["k"], ["rc"]]),
        Refused(InputError, r"tensorize\['y'\]\['loops'\] = \[\['k'\], \['rc'\]\]: give a "
                            "mapping")),
    # was: 'rc' read as the loops 'r' and 'c' ("compute y has no loop named 'r'")
    Row("forced mapping: a software loop named by a string", _(lambda: (
        lambda exe: (exe.kernels[-1].attrs["mapping"].split(" [")[0],
                     "vpdpbusd: i1 <- (k), r1 <- (rc)"))(
        tc.compile(int8_conv(), target="x86_avx512",
                   tensorize={"y": {"intrinsic": "vpdpbusd", "loops": {"i1": "k", "r1": "rc"}}}))),
        EQUAL),
    Row("forced mapping: a number as loop", forced({"i1": 3}),
        Refused(InputError, r"\['loops'\]\['i1'\] = 3: give a mapping")),
    Row("unknown intrinsic", _(lambda: tc.compile(int8_conv(), target="x86_avx512",
                                                  tensorize={"y": "vfoo"})),
        Refused(TargetError, "declares no intrinsic 'vfoo'")),
    Row("tensorize names no compute", _(lambda: tc.compile(int8_conv(), target="x86_avx512",
                                                           tensorize={"z": "vpdpbusd"})),
        Refused(InputError, "tensorize names 'z', which is no compute of the graph")),
]


# plugin specs and plugins that break at load time ----------------------------------------------

PLUGIN_ROWS = [
    Row("malformed YAML spec", lambda ctx: spec_file(ctx, MALFORMED_YAML),
        Refused(PluginError, r"plugin yaml_plugin: target spec .*spec\.yaml:\d+ is not valid "
                             "YAML")),
    # was: UnicodeDecodeError from read_text
    Row("spec file that is not text", binary_spec,
        Refused(PluginError, r"plugin yaml_plugin: target spec .*spec\.yaml is not UTF-8 text")),
    Row("spec with an unknown field", lambda ctx: spec_file(
        ctx, GOOD_SPEC_YAML + "colour: red\n"),
        Refused(PluginError, r"colour \(line 12\): unknown field")),
    Row("spec with an unknown memory level kind", lambda ctx: spec_file(
        ctx, GOOD_SPEC_YAML.replace("bandwidth_bytes_per_cycle: 8}",
                                    "bandwidth_bytes_per_cycle: 8, kind: quantum}")),
        Refused(PluginError, r"memory\.levels\[0\] \(DRAM\)\.kind .*got 'quantum'")),
    Row("intrinsic naming an unknown memory level", lambda ctx: spec_file(
        ctx, GOOD_SPEC_YAML, UNKNOWN_LEVEL_INTRINSICS),
        Refused(PluginError, r"intrinsics\[0\] \(fma4\)\.memory\.moves\[0\]\.to_level "
                             r"\(line 13\): 'L7' is not a memory level of target yaml_plugin; "
                             "the levels are DRAM")),
    Row("wrong api_version", lambda ctx: broken_target(ctx, "newer_api", "targets", "newer_api"),
        Refused(PluginError, r"plugin 'newer_api' .*: invalid target: it declares api_version "
                             "99, but this tilecraft implements api_version 1")),
    Row("a plugin whose import raises", lambda ctx: broken_target(ctx, "raises", "raises", "X"),
        Refused(PluginError, r"target 'raises' is installed but broken: plugin 'raises' .*: "
                             "import failed: RuntimeError: plugin import exploded on purpose")),
    # was: discovery hung for ever (every tilecraft command waited on the plugin)
    Row("a target plugin whose import hangs", hanging_target,
        Refused(PluginError, r"target 'hangs' is installed but broken: target plugin 'hangs' "
                             r"did not finish loading within 0\.3 s; .*TILECRAFT_PLUGIN_TIMEOUT_S"),
        ),
    # was: hung for ever, as above
    Row("an extension plugin whose import hangs", hanging_extension,
        Refused(PluginError, r"cannot load entry point .*hangs: plugin 'slow_passes' did not "
                             r"finish loading within 0\.3 s")),
    Row("a target whose available() hangs", slow_probe,
        Refused(PluginError, r"target plugin 'slow_probe' did not finish loading within 0\.3 s")),
    Row("a target plugin whose import calls sys.exit", lambda ctx: broken_target(
        ctx, "exits", "exits", "X"),
        Refused(PluginError, r"plugin 'exits' .*: import failed: SystemExit: this plugin exits "
                             "the interpreter")),
    # was: SystemExit escaped make_plugin_manager and ended the program
    Row("an extension plugin whose import calls sys.exit", exiting_extension,
        Refused(PluginError, r"cannot load entry point .*exits: SystemExit: this plugin exits")),
    # was: collecting the passes hung for ever
    Row("a plugin hook that hangs", lambda ctx: broken_hook(ctx, "slow_hooks"),
        Refused(PluginError, r"plugin 'slow_hooks' \(tilecraft_register_passes\) did not finish "
                             r"loading within 0\.3 s")),
    # was: SystemExit escaped collect() and ended the program
    Row("a plugin hook that calls sys.exit", lambda ctx: broken_hook(ctx, "exiting_hooks"),
        Refused(PluginError, "tilecraft_register_passes raised SystemExit: this hook exits")),
    Row("TILECRAFT_PLUGIN_TIMEOUT_S not a number", bad_timeout_setting,
        Refused(PluginError, r"TILECRAFT_PLUGIN_TIMEOUT_S='soon' is not a number of seconds")),
]


# tuning databases -----------------------------------------------------------------------------

DATABASE_ROWS = [
    Row("random bytes", damaged(random_bytes),
        Refused(TuningDatabaseError, r"tuning\.db is not a tilecraft tuning database \(not an "
                                     "SQLite file\\); it was left untouched")),
    Row("truncated to its first page", damaged(lambda p: truncated(good_database(p), lambda n:
                                                                   4096)),
        Refused(TuningDatabaseError, r"tuning\.db is truncated: its header declares \d+ bytes "
                                     "but the file has 4096; it was left untouched")),
    # was: read record by record until a cut-off one failed to parse ("record 190 ...")
    Row("truncated by 100 bytes", damaged(lambda p: truncated(good_database(p), lambda n:
                                                              n - 100)),
        Refused(TuningDatabaseError, r"is truncated: its header declares")),
    Row("truncated inside the header", damaged(lambda p: truncated(good_database(p), lambda n:
                                                                   40)),
        Refused(TuningDatabaseError, r"tuning\.db is corrupt or unreadable")),
    Row("written by a newer format version", damaged(lambda p: edit_database(
        good_database(p), "UPDATE meta SET value = '7' WHERE key = 'schema_version'")),
        Refused(TuningDatabaseError, r"was written by a newer tilecraft \(schema version 7, "
                                     r"this one reads up to 1\); upgrade tilecraft")),
    # was: ValueError: invalid literal for int()
    Row("schema version not a number", damaged(lambda p: edit_database(
        good_database(p), "UPDATE meta SET value = 'two' WHERE key = 'schema_version'")),
        Refused(TuningDatabaseError, r"its schema_version 'two' is not a number")),
    Row("a record with a field of a newer schema", damaged(lambda p: with_unknown_field(
        good_database(p))),
        Refused(TuningDatabaseError, r"record 3 of .*tuning\.db has fields this tilecraft does "
                                     r"not know \(energy_joules\): .*upgrade tilecraft")),
    Row("a record that is not JSON", damaged(lambda p: edit_database(
        good_database(p), "UPDATE records SET body = '{not json' WHERE id = 5")),
        Refused(TuningDatabaseError, r"record 5 of .*tuning\.db is not JSON")),
    Row("a record missing its schedule", damaged(lambda p: edit_database(
        good_database(p), "UPDATE records SET body = json_remove(body, '$.schedule') "
                          "WHERE id = 2")),
        Refused(TuningDatabaseError, r"record 2 of .* is not a valid tuning record \(schedule: "
                                     "Field required\\)")),
    Row("an SQLite file of another program", damaged(other_program),
        Refused(TuningDatabaseError, r"is an SQLite file of another program \(tables: photos\)")),
    # was: sqlite3.OperationalError: no such table: records (at the first query)
    Row("records table dropped", damaged(lambda p: edit_database(good_database(p),
                                                                 "DROP TABLE records")),
        Refused(TuningDatabaseError, r"has no records table or lacks its columns")),
    # was: accepted, and queries on the column failed later with sqlite3.OperationalError
    Row("a column of the records table missing", damaged(lambda p: edit_database(
        good_database(p), "ALTER TABLE records DROP COLUMN hardware")),
        Refused(TuningDatabaseError, r"lacks its columns hardware")),
    # was: IsADirectoryError
    Row("a directory as database path", lambda ctx: open_db(ctx.tmp_path),
        Refused(TuningDatabaseError, r"is a directory; pass a file path")),
    # was: "corrupt or unreadable (unable to open database file)"
    Row("a database in a missing directory", lambda ctx: open_db(ctx.tmp_path / "no" / "t.db"),
        Refused(TuningDatabaseError, r"the directory .*no does not exist; create it first")),
    # was: every record returned (SQLite's LIMIT -1)
    Row("best(k=-1)", lambda ctx: TuningDatabase(good_database(ctx.tmp_path / "t.db")).best(
        "w", "x86_avx512", k=-1),
        Refused(TuningDatabaseError, r"best\(k=-1\): k must be a positive int")),
    # was: FileNotFoundError
    Row("importing a missing .jsonl", lambda ctx: TuningDatabase(":memory:").import_jsonl(
        ctx.tmp_path / "none.jsonl"),
        Refused(TuningDatabaseError, r"cannot import .*none\.jsonl: No such file")),
    # was: UnicodeDecodeError
    Row("importing a binary .jsonl", lambda ctx: TuningDatabase(":memory:").import_jsonl(
        random_bytes(ctx.tmp_path / "x.jsonl")),
        Refused(TuningDatabaseError, r"cannot import .*x\.jsonl: 'utf-8' codec")),
    Row("importing a .jsonl with a bad line", lambda ctx: TuningDatabase(":memory:").import_jsonl(
        write(ctx.tmp_path / "r.jsonl", '{"workload_key": "w"}\n')),
        Refused(TuningDatabaseError, r"r\.jsonl, line 1: not a valid tuning record")),
]


ROWS = [*EXECUTABLE_ROWS, *TE_ROWS, *NUMERIC_ROWS, *MEMORY_ROWS, *TENSORIZE_ROWS, *PLUGIN_ROWS,
        *DATABASE_ROWS]


def test_row_ids_are_unique() -> None:
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_bad_input(row: Row, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   request: pytest.FixtureRequest) -> None:
    if row.needs is not None and row.needs not in cpu_flags():
        pytest.skip(f"this CPU has no {row.needs}")
    ctx = Context(tmp_path, monkeypatch, request)
    if isinstance(row.expect, Equal):
        got, want = row.make(ctx)
        if isinstance(got, str):
            assert got == want
        else:
            assert_ieee_equal(got, want, row.expect.tolerance)
        return
    if row.max_traced_bytes is not None:
        tracemalloc.start()
    try:
        with pytest.raises(TilecraftError) as info:
            row.make(ctx)
        if row.max_traced_bytes is not None:
            peak = tracemalloc.get_traced_memory()[1]
            assert peak < row.max_traced_bytes, f"{peak} bytes allocated before refusing"
    finally:
        if row.max_traced_bytes is not None:
            tracemalloc.stop()
    assert isinstance(info.value, row.expect.error), \
        f"{type(info.value).__name__} is not a {row.expect.error.__name__}: {info.value}"
    assert info.match(row.expect.fragment)


def test_a_failing_write_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    path = good_database(tmp_path / "tuning.db", count=10)

    def records_then_failure() -> Any:
        yield record(100)
        yield record(101)
        raise RuntimeError("the producer failed half-way")

    with TuningDatabase(path) as db:
        before = [r.model_dump() for r in db.records()]
        with pytest.raises(RuntimeError, match="half-way"):
            db.add_many(records_then_failure())
        assert [r.model_dump() for r in db.records()] == before
    with TuningDatabase(path) as db:  # and so it stays once reopened
        assert [r.model_dump() for r in db.records()] == before


def test_a_failing_export_leaves_no_half_file(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = good_database(tmp_path / "tuning.db", count=10)
    out = tmp_path / "export.jsonl"
    with TuningDatabase(path) as db:
        assert db.export_jsonl(out) == 10
        complete = out.read_text()
        calls = []

        def failing_json(value: Any) -> str:
            calls.append(value)
            if len(calls) == 5:
                raise OSError(28, "No space left on device")
            return "{}"

        monkeypatch.setattr("tilecraft.tuning.database.canonical_json", failing_json)
        with pytest.raises(TuningDatabaseError, match="No space left on device; nothing was "
                                                      "written"):
            db.export_jsonl(out)
    assert out.read_text() == complete  # the earlier export is intact
    assert [p.name for p in tmp_path.iterdir() if "export" in p.name] == ["export.jsonl"]


def test_a_refused_database_is_not_created_or_modified(tmp_path: Path) -> None:
    """Refusing never creates the file or its WAL beside it."""
    path = random_bytes(tmp_path / "tuning.db")
    with pytest.raises(TuningDatabaseError):
        TuningDatabase(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tuning.db"]

