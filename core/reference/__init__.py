"""The numpy reference interpreter: the definition of te's semantics and every test's oracle.

>>> import numpy as np
>>> import tilecraft as tc
>>> from tilecraft import te
>>> A = te.placeholder((4,), "int8", name="A")
>>> B = te.compute((4,), lambda i: A[i] + A[i], name="B")
>>> tc.reference.run(B, A=np.array([1, 64, -100, 127], np.int8))
array([   2, -128,   56,   -2], dtype=int8)
"""

from tilecraft.reference.evaluator import CHUNK_ELEMENTS, evaluate, product_factors
from tilecraft.reference.interpreter import as_graph, check_inputs, run
from tilecraft.reference.numerics import cast_values, const_array, erf

__all__ = ["CHUNK_ELEMENTS", "as_graph", "cast_values", "check_inputs", "const_array", "erf",
           "evaluate", "product_factors", "run"]
