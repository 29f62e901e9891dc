"""Random tensor programs compiled for the host CPU and compared with the reference interpreter.

hypothesis draws small programs: elementwise expression trees (arithmetic, transcendental
functions, selects), shifted and broadcast loads, reductions over an extra axis, and chains of
computes; float32 and int32.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilecraft as tc
from tilecraft import te

FLOAT_UNARY = [te.tanh, te.sigmoid, abs, lambda x: -x, lambda x: te.exp(te.tanh(x)),
               lambda x: te.sqrt(abs(x) + 1.0), lambda x: te.log(abs(x) + 1.0), te.erf]
FLOAT_BINARY = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
                lambda a, b: te.max(a, b), lambda a, b: te.min(a, b),
                lambda a, b: a / (abs(b) + 1.0),
                lambda a, b: te.select(a > b, a * 0.5, b - 1.0)]
INT_BINARY = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
              lambda a, b: te.max(a, b), lambda a, b: te.min(a, b),
              lambda a, b: a // 3, lambda a, b: b % 5, lambda a, b: te.select(a < b, a, b * 2)]


@st.composite
def programs(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 19)) for _ in range(ndim))
    dtype = draw(st.sampled_from(["float32", "int32"]))
    X = te.placeholder(shape, dtype, name="X")
    Y = te.placeholder(shape[-1:], dtype, name="Y")  # broadcast along the last axis
    codes = draw(st.lists(st.integers(0, 1000), min_size=3, max_size=8))

    def leaf(idx, code):
        if code % 3 == 0:
            return Y[idx[-1]]
        if code % 3 == 1 and shape[-1] > 1:  # a shifted load, guarded by a select
            last = idx[-1]
            shifted = te.select(last + 1 < shape[-1], last + 1, 0)
            return X[(*idx[:-1], shifted)]
        return X[idx]

    def body(*idx):
        value = leaf(idx, codes[0])
        for position, code in enumerate(codes[1:]):
            other = leaf(idx, code // 7)
            if dtype == "float32":
                if code % 4 == 0:
                    value = FLOAT_UNARY[(code // 4 + position) % len(FLOAT_UNARY)](value)
                else:
                    value = FLOAT_BINARY[code % len(FLOAT_BINARY)](value, other)
            else:
                value = INT_BINARY[code % len(INT_BINARY)](value, other)
        return value

    out = te.compute(shape, body, name="E")
    if draw(st.booleans()):
        r = te.reduce_axis(shape[-1], name="r")
        reducer = draw(st.sampled_from([te.sum, te.max, te.min]))
        keep = shape[:-1] or (1,)
        if len(shape) > 1:
            out = te.compute(keep, lambda *i: reducer(out[(*i, r)], axis=r), name="R")
        else:
            out = te.compute(keep, lambda i: reducer(out[r], axis=r), name="R")
    return tc.Graph.from_outputs([out]), shape, dtype


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_program_matches_reference(program, seed) -> None:
    graph, shape, dtype = program
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.standard_normal(shape[-1:]).astype(np.float32)
    else:
        x = rng.integers(-50, 50, shape).astype(np.int32)
        y = rng.integers(-50, 50, shape[-1:]).astype(np.int32)
    inputs = {name: value for name, value in (("X", x), ("Y", y))
              if name in {t.name for t in graph.inputs}}
    exe = tc.compile(graph, target="x86_avx512")
    got = exe(**inputs)
    expected = tc.reference.run(graph, **inputs)
    if dtype == "int32":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)
