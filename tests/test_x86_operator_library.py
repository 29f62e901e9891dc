"""Every operator of the library, compiled for x86_avx512 with default schedules, matches the
reference interpreter on every catalog case (at least three shapes per operator, including
size-1, prime and non-divisible extents)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.ops import catalog

CASES = catalog.cases()


def test_catalog_covers_every_operator_three_times() -> None:
    per_operator = Counter(case.name for case in CASES)
    assert set(per_operator) == set(catalog.operators())
    assert min(per_operator.values()) >= 3, per_operator


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_operator_on_x86_matches_reference(case) -> None:
    graph, inputs = case.build(np.random.default_rng(11))
    exe = tc.compile(graph, target="x86_avx512")
    got = exe(**inputs)
    expected = tc.reference.run(graph, **inputs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if np.issubdtype(expected.dtype, np.integer):
        np.testing.assert_array_equal(got, expected, err_msg=case.id)
    else:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=case.rtol, atol=case.atol, err_msg=case.id)
