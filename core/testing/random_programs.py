"""Random tensor programs with input arrays: the fuzzer every target's test suite can run.

:func:`random_program` builds one :class:`RandomProgram` — a :class:`~tilecraft.graph.Graph`,
input arrays and the tolerance its outputs are compared with against the reference interpreter
— from a source of choices: an integer seed (reproducible anywhere, no extra package) or
hypothesis (:func:`programs`, whose failures shrink to a small program). A target's suite
compiles ``program.graph``, calls it on ``program.inputs`` and calls ``program.check(got)``::

    program = random_program(17)
    exe = tc.compile(program.graph, target="my_target")
    program.check(exe(**program.inputs))

Families (``FAMILIES``; pick some with ``families=``):

- ``elementwise``: float32/float16/bfloat16 expression trees — arithmetic, transcendental
  functions, selects — over loads that broadcast (size-1 axes, lower-rank tensors), shift under
  guards (the guarded index clamped, or left out of range in the branch not taken), reverse an
  axis or rotate it through a floor ``%``; sometimes a second compute reading the first shifted;
- ``integer``: int8/uint8/int32 trees over full-range inputs (extremes included) whose
  arithmetic overflows and must wrap as numpy does, ``//`` and ``%`` (floor) by constants of
  either sign and by tensor values (zero included: the result is 0), selects, integer casts;
- ``reduction``: sum/max/min over one to all axes of a tree, any dtype, sometimes followed by
  an elementwise compute that reads the reduction broadcast back (a softmax-like pair);
- ``index``: depth-to-space / space-to-depth / pad / transpose / reshape / concat and
  hand-written floordiv/mod index maps, followed by elementwise work;
- ``cast``: float to integer (truncating, saturating), integer to float, between integers
  (wrapping) and to the half types (round to nearest even), in chains;
- ``operator``: library operators with random shapes and parameters (contractions,
  convolutions with stride/dilation/groups, pooling, softmax, layer norm, moments), see
  :mod:`tilecraft.testing.random_operators`;
- ``gemm_chain``, ``conv_chain``, ``int8_gemm``, ``bf16_gemm``: see
  :mod:`tilecraft.testing.random_contractions` (chains large enough that a CPU target fuses
  them; the tensorized int8/bfloat16 contractions).

Extents are drawn from awkward values (1, primes, around powers of two up to 129, beyond the
64 int8 lanes of a 512-bit vector), at most 4096 elements a tensor. Tolerances: integer
outputs are compared exactly; float32 with ``rtol = atol = 2e-5``, float16 with ``2e-3`` and
bfloat16 with ``1.6e-2`` (two units in the last place), the ``atol`` scaled by the largest
expected magnitude (at least 1) and, for reductions and contractions, by the square root of the
number of terms summed (float sums reassociate).
"""

# ruff: noqa: N803, N806, E741 - tensors are named as in the math (A @ B, X, T)

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.te.expr import int_range

T = TypeVar("T")

#: extents drawn for axes: 1, primes, around powers of two
AWKWARD_EXTENTS = (1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 17, 19, 23, 31, 32, 33, 63, 65, 129)
#: relative tolerance per float dtype (see the module doc)
FLOAT_TOLERANCE = {DType.FLOAT32: 2e-5, DType.FLOAT16: 2e-3, DType.BFLOAT16: 1.6e-2}


class Choices(Protocol):
    """Where a generator's decisions come from (a seeded generator or hypothesis)."""

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``; smaller is simpler."""

    def choice(self, options: Sequence[T]) -> T:
        """One of ``options``; earlier is simpler."""


class SeededChoices:
    """Choices from a numpy generator seeded with ``seed``.

    >>> SeededChoices(3).integer(0, 9) == SeededChoices(3).integer(0, 9)
    True
    """

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def integer(self, low: int, high: int) -> int:
        return int(self.rng.integers(low, high + 1))

    def choice(self, options: Sequence[T]) -> T:
        return options[int(self.rng.integers(0, len(options)))]


class HypothesisChoices:
    """Choices drawn through hypothesis (``draw`` of ``st.composite`` or ``data.draw``), so that
    a failing program shrinks."""

    def __init__(self, draw: Callable[[Any], Any]):
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def integer(self, low: int, high: int) -> int:
        return self.draw(self.st.integers(low, high))

    def choice(self, options: Sequence[T]) -> T:
        return self.draw(self.st.sampled_from(options))  # uniform; shrinks to the first


@dataclasses.dataclass(repr=False)
class RandomProgram:
    """A program, its inputs and how its outputs are compared with the reference.

    ``fused``: the computes a CPU target's chain fusion is expected to fuse (chain families);
    ``features``: host features the intended tensorized path needs (``avx512_vnni``,
    ``avx512_bf16``); ``terms``: the most terms any output element sums (scales ``atol``).
    """

    family: str
    graph: Graph
    inputs: dict[str, np.ndarray]
    fused: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    terms: int = 1

    def expected(self) -> tuple[np.ndarray, ...]:
        """The reference interpreter's outputs, in the graph's output order."""
        from tilecraft.reference import run

        result = run(self.graph, self.inputs)
        return result if isinstance(result, tuple) else (result,)

    def check(self, got: np.ndarray | Sequence[np.ndarray]) -> None:
        """Raise AssertionError (with :meth:`describe`) where ``got`` differs from the reference
        beyond the tolerance of each output's dtype (exact for integers)."""
        outputs = (got,) if isinstance(got, np.ndarray) else tuple(got)
        expected = self.expected()
        assert len(outputs) == len(expected), self.describe()
        for tensor, have, want in zip(self.graph.outputs, outputs, expected):
            have, want = np.asarray(have), np.asarray(want)
            assert have.shape == want.shape, f"{tensor.name}: shape {have.shape}\n{self.describe()}"
            if not tensor.dtype.is_float:
                np.testing.assert_array_equal(have, want, err_msg=self.describe())
                continue
            have64, want64 = have.astype(np.float64), want.astype(np.float64)
            rtol = FLOAT_TOLERANCE[tensor.dtype]
            finite = want64[np.isfinite(want64)]
            scale = max(1.0, float(np.abs(finite).max()) if finite.size else 1.0)
            np.testing.assert_allclose(have64, want64, rtol=rtol,
                                       atol=rtol * scale * math.sqrt(self.terms),
                                       err_msg=self.describe())

    def describe(self) -> str:
        """The program as statements with its inputs' shapes: enough to rebuild it."""
        lines = [f"random program ({self.family}):"]
        lines += [f"  {t.name}: {t.dtype} {t.shape}" for t in self.graph.inputs]
        for t in self.graph.computes:
            axes = "".join(f", {a.name} < {a.extent}" for a in t.reduce_axes)
            lines.append(f"  {t.statement()}    # {t.dtype} {t.shape}{axes}")
        lines.append(f"  outputs: {', '.join(t.name for t in self.graph.outputs)}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.describe()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis's reports
        printer.text(self.describe())


# input data ----------------------------------------------------------------------------------


def input_array(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator,
                scale: float = 1.0) -> np.ndarray:
    """Random data of ``dtype``: normal floats times ``scale``; integers over the whole range
    with the extremes, -1, 0 and 1 planted so that overflow and floor division are exercised."""
    if dtype.is_float:
        return (rng.standard_normal(shape) * scale).astype(dtype.numpy)
    lo, hi = int_range(dtype)
    values = rng.integers(lo, hi + 1, shape, dtype=np.int64)
    special = np.array([v for v in (lo, hi, -1, 0, 1, lo + 1, hi - 1) if lo <= v <= hi])
    plant = rng.random(shape) < 0.25
    values[plant] = rng.choice(special, int(plant.sum()))
    return values.astype(dtype.numpy)


def extent(choices: Choices, largest: int = 129) -> int:
    """One awkward axis extent, at most ``largest``."""
    return choices.choice([e for e in AWKWARD_EXTENTS if e <= largest])


def shape_of(choices: Choices, ndim: int, elements: int = 4096) -> tuple[int, ...]:
    """A shape of ``ndim`` awkward extents with at most ``elements`` elements."""
    shape: list[int] = []
    for _ in range(ndim):
        room = max(1, elements // max(1, math.prod(shape)))
        shape.append(extent(choices, room))
    return tuple(shape)


# leaves: loads of the inputs ----------------------------------------------------------------


class Leaves:
    """The loads an expression tree can start from, over the output's index ``idx``: the full
    tensor ``X``, ``Y`` with some axes of size 1 (broadcast), ``Z`` of the trailing axes
    (numpy's rank broadcasting), and guarded, reversed and rotated loads of ``X``."""

    def __init__(self, choices: Choices, shape: tuple[int, ...], dtype: DType, kinds: int):
        self.shape, self.dtype = shape, dtype
        self.X = te.placeholder(shape, dtype, name="X")
        y_shape = tuple(1 if choices.integer(0, 1) else n for n in shape)
        self.Y = te.placeholder(y_shape, dtype, name="Y")
        rank = choices.integer(1, len(shape))
        self.Z = te.placeholder(shape[-rank:], dtype, name="Z")
        self.kinds = kinds

    def load(self, idx: Sequence[te.Expr], code: int) -> te.Expr:
        shape, X = self.shape, self.X
        kind = code % self.kinds
        axis = (code // self.kinds) % len(shape)
        n = shape[axis]
        if kind == 1:
            return self.Y[tuple(0 if m == 1 else i for m, i in zip(self.Y.shape, idx))]
        if kind == 2:
            return self.Z[tuple(idx[len(idx) - self.Z.ndim:])]
        if kind in (3, 4) and n > 1:  # a shifted load under a guard
            shift = (1, -1, 2, -2)[(code // 7) % 4]
            moved = idx[axis] + shift
            inside = (moved >= 0) & (moved < n)
            # kind 3 clamps the index; kind 4 leaves it out of range where the guard is false
            index = te.select(inside, moved, 0) if kind == 3 else moved
            zero = te.const(0, self.dtype)
            return te.select(inside, X[(*idx[:axis], index, *idx[axis + 1:])], zero)
        if kind == 5:  # reversed axis
            return X[(*idx[:axis], (n - 1) - idx[axis], *idx[axis + 1:])]
        if kind == 6 and n > 1:  # rotated through a floor mod of a possibly negative index
            rotated = (idx[axis] - (code % n) - 1) % n
            return X[(*idx[:axis], rotated, *idx[axis + 1:])]
        return X[tuple(idx)]


# float trees ---------------------------------------------------------------------------------

FLOAT_UNARY: list[Callable[[te.Expr], te.Expr]] = [
    te.tanh, te.sigmoid, abs, lambda x: -x, lambda x: te.exp(te.tanh(x)),
    lambda x: te.sqrt(abs(x) + 1.0), lambda x: te.log(abs(x) + 1.0), te.erf,
    lambda x: x * x, lambda x: te.max(x, 0.0)]
FLOAT_BINARY: list[Callable[[te.Expr, te.Expr], te.Expr]] = [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
    lambda a, b: te.max(a, b), lambda a, b: te.min(a, b),
    lambda a, b: a / (abs(b) + 1.0),
    lambda a, b: te.select(a > b, a * 0.5, b - 1.0),
    lambda a, b: te.select((a > 0.0) & (b < 0.5), a, b),
    lambda a, b: te.select(~(a <= b) | (a > 1.0), b * 2.0, a)]

INT_UNARY: list[Callable[[te.Expr], te.Expr]] = [
    lambda x: x * x, lambda x: x + x, lambda x: x * 3 - 1, lambda x: x // 3, lambda x: x % 7,
    lambda x: te.max(x, 0), lambda x: x // 1, lambda x: x % 2]
SIGNED_UNARY: list[Callable[[te.Expr], te.Expr]] = [
    lambda x: -x, abs, lambda x: x // -1, lambda x: x // -3, lambda x: x % -5,
    lambda x: (-x) // 2]
INT_BINARY: list[Callable[[te.Expr, te.Expr], te.Expr]] = [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
    lambda a, b: te.max(a, b), lambda a, b: te.min(a, b),
    lambda a, b: a // b, lambda a, b: a % b,  # b may be 0: the result is 0
    lambda a, b: te.select(a < b, a, b * 2),
    lambda a, b: te.select(te.eq(a % 2, 0) & te.ne(b, 0), b, a - 1),
    lambda a, b: (a.astype("int32") * b.astype("int32") // 7).astype(a.dtype)]


def tree(choices: Choices, leaves: Leaves, idx: Sequence[te.Expr], size: int) -> te.Expr:
    """An expression tree of ``size`` operations over ``leaves`` at ``idx``."""
    value = leaves.load(idx, choices.integer(0, 1000))
    dtype = leaves.dtype
    for _ in range(size):
        code = choices.integer(0, 1000)
        other = leaves.load(idx, choices.integer(0, 1000))
        if dtype.is_float:
            if code % 4 == 0:
                value = FLOAT_UNARY[(code // 4) % len(FLOAT_UNARY)](value)
            else:
                value = FLOAT_BINARY[code % len(FLOAT_BINARY)](value, other)
        elif code % 3 == 0:
            unary = INT_UNARY + (SIGNED_UNARY if dtype.is_signed else [])
            value = unary[(code // 3) % len(unary)](value)
        else:
            value = INT_BINARY[code % len(INT_BINARY)](value, other)
    return value


def _leaves_program(family: str, leaves: Leaves, outputs: list[te.Tensor], rng_seed: int,
                    scale: float = 1.0, terms: int = 1) -> RandomProgram:
    graph = Graph.from_outputs(outputs)
    rng = np.random.default_rng(rng_seed)
    inputs = {t.name: input_array(t.dtype, t.shape, rng, scale) for t in graph.inputs}
    return RandomProgram(family, graph, inputs, terms=terms)


# families ------------------------------------------------------------------------------------


def elementwise(choices: Choices) -> RandomProgram:
    """A float tree, sometimes followed by a compute reading it shifted (two kernels)."""
    dtype = choices.choice([DType.FLOAT32, DType.FLOAT32, DType.BFLOAT16, DType.FLOAT16])
    shape = shape_of(choices, choices.integer(1, 4))
    leaves = Leaves(choices, shape, dtype, kinds=7)
    size = choices.integer(1, 6)
    E = te.compute(shape, lambda *idx: tree(choices, leaves, idx, size), name="E")
    outputs = [E]
    if choices.integer(0, 2) == 0:
        axis = choices.integer(0, len(shape) - 1)
        n = shape[axis]

        def second(*idx: te.Expr) -> te.Expr:
            prev = (idx[axis] + n - 1) % n  # the neighbour before, wrapping around
            return E[(*idx[:axis], prev, *idx[axis + 1:])] * 0.5 + leaves.X[idx]

        outputs = [te.compute(shape, second, name="F")]
        if choices.integer(0, 1):
            outputs.append(E)  # the first compute is an output as well
    return _leaves_program("elementwise", leaves, outputs, choices.integer(0, 2**31 - 1))


def integer(choices: Choices) -> RandomProgram:
    """An integer tree whose arithmetic overflows (wraps) and floor-divides."""
    dtype = choices.choice([DType.INT32, DType.INT8, DType.UINT8])
    shape = shape_of(choices, choices.integer(1, 3))
    leaves = Leaves(choices, shape, dtype, kinds=7)
    size = choices.integer(1, 6)
    E = te.compute(shape, lambda *idx: tree(choices, leaves, idx, size), name="E")
    return _leaves_program("integer", leaves, [E], choices.integer(0, 2**31 - 1))


def reduction(choices: Choices) -> RandomProgram:
    """sum/max/min of a tree over a non-empty subset of the axes."""
    dtype = choices.choice([DType.FLOAT32, DType.INT32, DType.INT8, DType.UINT8,
                            DType.BFLOAT16])
    ndim = choices.integer(1, 4)
    shape = shape_of(choices, ndim)
    leaves = Leaves(choices, shape, dtype, kinds=7)
    reduced = sorted({choices.integer(0, ndim - 1) for _ in range(choices.integer(1, ndim))})
    kept = [a for a in range(ndim) if a not in reduced]
    out_shape = tuple(shape[a] for a in kept) or (1,)
    raxes = [te.reduce_axis(shape[a], name=f"r{a}") for a in reduced]
    reducer = choices.choice([te.sum, te.max, te.min])
    size = choices.integer(0, 4)

    def full_index(spatial: Sequence[te.Expr]) -> list[te.Expr]:
        idx: list[te.Expr] = []
        for a in range(ndim):
            idx.append(raxes[reduced.index(a)] if a in reduced else spatial[kept.index(a)])
        return idx

    def body(*spatial: te.Expr) -> te.Expr:
        return reducer(tree(choices, leaves, full_index(spatial), size), axis=raxes)

    R = te.compute(out_shape, body, name="R")
    outputs = [R]
    if kept and choices.integer(0, 1):  # read the reduction broadcast back (softmax-like)
        def back(*idx: te.Expr) -> te.Expr:
            return leaves.X[idx] - R[tuple(idx[a] for a in kept)]

        outputs = [te.compute(shape, back, name="B")]
    terms = math.prod(shape[a] for a in reduced)
    return _leaves_program("reduction", leaves, outputs, choices.integer(0, 2**31 - 1),
                           terms=terms)


def index(choices: Choices) -> RandomProgram:
    """Layout operators and floordiv/mod index maps, then elementwise work."""
    from tilecraft import ops

    dtype = choices.choice([DType.FLOAT32, DType.INT32, DType.INT8, DType.UINT8])
    block = choices.choice([2, 3])
    kind = choices.choice(["d2s", "s2d", "pad", "transpose", "reshape", "concat", "map"])
    n, c, h, w = 1, extent(choices, 7), extent(choices, 13), extent(choices, 11)
    if kind == "d2s":
        X = te.placeholder((n, c * block * block, h, w), dtype, name="X")
        Y = ops.depth_to_space(X, block, choices.choice(["CRD", "DCR"]), name="Y")
    elif kind == "s2d":
        X = te.placeholder((n, c, h * block, w * block), dtype, name="X")
        Y = ops.space_to_depth(X, block, choices.choice(["CRD", "DCR"]), name="Y")
    elif kind == "pad":
        X = te.placeholder((c, h, w), dtype, name="X")
        pads = [(choices.integer(0, 3), choices.integer(0, 3)) for _ in range(3)]
        Y = ops.pad(X, pads, value=choices.integer(-3, 3), name="Y")
    elif kind == "transpose":
        X = te.placeholder((c, h, w), dtype, name="X")
        perm = choices.choice([(2, 0, 1), (1, 2, 0), (0, 2, 1), (2, 1, 0)])
        Y = ops.transpose(X, perm, name="Y")
    elif kind == "reshape":
        X = te.placeholder((c, h, w), dtype, name="X")
        target = choices.choice([(h, c * w), (c * h * w,), (w, h, c), (c * h, w)])
        Y = ops.reshape(X, target, name="Y")
    elif kind == "concat":
        X = te.placeholder((c, h, w), dtype, name="X")
        X2 = te.placeholder((c, extent(choices, 7), w), dtype, name="X2")
        Y = ops.concat([X, X2, X], axis=1, name="Y")
    else:  # a hand-written map: affine index, floor-divided, then wrapped
        X = te.placeholder((h * block, w), dtype, name="X")
        a, b = choices.integer(1, 3), choices.integer(-5, 5)
        d = choices.integer(1, 4)
        Y = te.compute((h, w * block), lambda i, j: X[(a * i + j // block + b) // d % (h * block),
                                                      (j * a + b) % w], name="Y")
    one = te.const(1, dtype)
    Z = te.compute(Y.shape, lambda *idx: Y[idx] * (one + one) + one, name="Z")
    outputs = [Z, Y] if choices.integer(0, 1) else [Z]
    graph = Graph.from_outputs(outputs)
    rng = np.random.default_rng(choices.integer(0, 2**31 - 1))
    inputs = {t.name: input_array(t.dtype, t.shape, rng) for t in graph.inputs}
    return RandomProgram("index", graph, inputs)


CASTS = [DType.INT8, DType.UINT8, DType.INT32, DType.FLOAT32, DType.BFLOAT16, DType.FLOAT16]


def cast(choices: Choices) -> RandomProgram:
    """A chain of casts with arithmetic between them."""
    source = choices.choice([DType.FLOAT32, DType.INT32, DType.INT8, DType.UINT8,
                             DType.BFLOAT16])
    shape = shape_of(choices, choices.integer(1, 3))
    X = te.placeholder(shape, source, name="X")
    steps = [choices.choice(CASTS) for _ in range(choices.integer(1, 4))]

    def body(*idx: te.Expr) -> te.Expr:
        value = X[idx]
        for step in steps:
            value = value.astype(step)
            if choices.integer(0, 1):
                # x * 2.0 is exact, so a target contracting x * 2.0 + 0.25 into one FMA gets
                # the same float as two roundings: a later integer cast sees the same value
                value = value + te.const(choices.integer(1, 100), step) if step.is_int \
                    else value * 2.0 + 0.25
        return value

    E = te.compute(shape, body, name="E")
    graph = Graph.from_outputs([E])
    rng = np.random.default_rng(choices.integer(0, 2**31 - 1))
    # floats far outside the integer ranges (saturation) and with fractions (truncation)
    scale = choices.choice([3.0, 200.0, 1e5, 1e10])
    inputs = {t.name: input_array(t.dtype, t.shape, rng, scale) for t in graph.inputs}
    x = inputs["X"]
    if source.is_float and x.size and choices.integer(0, 1):
        # non-finite values and -0.0: a float-to-integer cast gives 0 for NaN, saturates inf
        specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.5, -0.5, 2.5, -1.5], np.float32)
        flat = x.reshape(-1)
        where = rng.random(flat.size) < 0.3
        flat[where] = rng.choice(specials, int(where.sum())).astype(flat.dtype)
    return RandomProgram("cast", graph, inputs)


def _contraction_families() -> dict[str, Callable[[Choices], RandomProgram]]:
    from tilecraft.testing import random_contractions as rc
    from tilecraft.testing.random_operators import operator

    return {"operator": operator, "gemm_chain": rc.gemm_chain, "conv_chain": rc.conv_chain,
            "int8_gemm": rc.int8_gemm, "bf16_gemm": rc.bf16_gemm}


#: every family by name, with its weight in a random draw
FAMILIES: dict[str, tuple[Callable[[Choices], RandomProgram], int]] = {
    "elementwise": (elementwise, 6), "integer": (integer, 5), "reduction": (reduction, 5),
    "index": (index, 3), "cast": (cast, 3),
}
_CONTRACTION_WEIGHTS = {"operator": 4, "gemm_chain": 1, "conv_chain": 1, "int8_gemm": 2,
                        "bf16_gemm": 1}
#: families whose intended path needs a host feature
TENSORIZED = ("int8_gemm", "bf16_gemm")


def family_names() -> list[str]:
    return [*FAMILIES, *_CONTRACTION_WEIGHTS]


def random_program(source: int | Choices, families: Sequence[str] | None = None) -> RandomProgram:
    """One random program from a seed or a :class:`Choices`; ``families`` limits the kinds.

    >>> program = random_program(5, families=["integer"])
    >>> program.family, sorted(program.inputs) == sorted(t.name for t in program.graph.inputs)
    ('integer', True)
    """
    choices = SeededChoices(source) if isinstance(source, int) else source
    table: dict[str, tuple[Callable[[Choices], RandomProgram], int]] = dict(FAMILIES)
    contractions = _contraction_families()
    table.update({name: (contractions[name], w) for name, w in _CONTRACTION_WEIGHTS.items()})
    names = list(families) if families is not None else list(table)
    unknown = [name for name in names if name not in table]
    if unknown or not names:
        raise ValueError(f"unknown program families {unknown}; choose from {list(table)}")
    weighted = [name for name in names for _ in range(table[name][1])]
    return table[choices.choice(weighted)][0](choices)


def programs(families: Sequence[str] | None = None) -> Any:
    """A hypothesis strategy of :class:`RandomProgram` (needs the ``hypothesis`` package)."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw: Callable[[Any], Any]) -> RandomProgram:
        return random_program(HypothesisChoices(draw), families)

    return strategy()


def inputs_for(graph: Graph, seed: int, scale: float = 1.0) -> Mapping[str, np.ndarray]:
    """Random inputs for every placeholder of ``graph`` (see :func:`input_array`)."""
    rng = np.random.default_rng(seed)
    return {t.name: input_array(t.dtype, t.shape, rng, scale) for t in graph.inputs}


__all__ = ["AWKWARD_EXTENTS", "FAMILIES", "FLOAT_TOLERANCE", "TENSORIZED", "Choices",
           "HypothesisChoices", "RandomProgram", "SeededChoices", "family_names", "input_array",
           "inputs_for", "programs", "random_program"]
