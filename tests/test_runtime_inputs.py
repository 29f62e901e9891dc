"""InputBinder binds exact arrays without work and sends everything else through bind_inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft import te
from tilecraft.errors import InputError
from tilecraft.runtime.inputs import InputBinder

A = te.placeholder((3, 7), "float32", name="A")
B = te.placeholder((1,), "bfloat16", name="B")
bind = InputBinder([A, B])


def _b(value: float = 1.0) -> np.ndarray:
    return np.full((1,), value, dtype=B.dtype.numpy)


def test_exact_arrays_are_bound_as_they_are():
    a, b = np.ones((3, 7), np.float32), _b()
    assert bind((a, b), {})["A"] is a
    bound = bind((), {"B": b, "A": a})
    assert bound["A"] is a and bound["B"] is b
    assert bind((a,), {"B": b})["B"] is b


def test_other_layouts_and_subclasses_are_copied_or_accepted():
    a = np.arange(21, dtype=np.float32).reshape(7, 3).T  # not C-contiguous: a contiguous copy
    bound = bind((a, _b()), {})
    assert bound["A"].flags.c_contiguous and bound["A"] is not a
    np.testing.assert_array_equal(bound["A"], a)
    sub = np.ones((3, 7), np.float32).view(np.recarray)
    assert isinstance(bind((sub, _b()), {})["A"], np.ndarray)


@pytest.mark.parametrize("args, kwargs, message", [
    ((np.ones((3, 7), np.float64), _b()), {}, "'A' has dtype float64, expected float32"),
    ((np.ones((3, 7), np.float32), np.ones((1,), np.float32)), {},
     "'B' has dtype float32, expected bfloat16; convert it with .astype.ml_dtypes.bfloat16"),
    ((np.ones((7, 3), np.float32), _b()), {}, r"'A' has shape \(7, 3\), expected \(3, 7\)"),
    ((np.ones((3, 7), np.float32),), {"A": _b()}, "'A' was given both by position and by name"),
    ((), {"A": np.ones((3, 7), np.float32), "C": _b()}, "unknown input.*'C'"),
    ((np.ones((3, 7), np.float32),), {}, r"missing input\(s\): B: bfloat16\[1\]"),
    ((1, 2, 3), {}, "3 positional arrays but the program has 2 inputs"),
    (([[1.0] * 7] * 3, _b()), {}, "'A' must be a numpy array .* got list"),
])
def test_bad_inputs_raise_the_same_errors(args, kwargs, message):
    with pytest.raises(InputError, match=message):
        bind(args, kwargs)
