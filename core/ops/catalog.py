"""The operator catalog: deterministic, self-describing cases covering every operator.

Compilers and the conformance suite run these cases and compare against the reference
interpreter with each case's ``rtol``/``atol``:

>>> import numpy as np
>>> import tilecraft as tc
>>> from tilecraft.ops import catalog
>>> case = catalog.get("conv2d[stride2-pad1-c3]")
>>> sorted(case.tags)
['compute-intensive', 'conv']
>>> graph, arrays = case.build(np.random.default_rng(0))
>>> tc.reference.run(graph, **arrays).shape
(1, 4, 4, 4)
>>> len(catalog.standard_set()) == len(catalog.operators())
True
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from tilecraft.errors import GraphError
from tilecraft.ops.catalog_cases import FAMILY, all_cases
from tilecraft.ops.opcase import OUTPUT_NAME, InputSpec, OpCase

__all__ = ["FAMILY", "OUTPUT_NAME", "InputSpec", "OpCase", "cases", "get", "operators",
           "standard_set"]


@cache
def _catalog() -> tuple[OpCase, ...]:
    return tuple(all_cases())


def cases(tags: str | Iterable[str] | None = None,
          ops: str | Iterable[str] | None = None) -> list[OpCase]:
    """The cases carrying every tag in ``tags`` (e.g. ``"compute-intensive"``,
    ``"memory-bound"``, a family such as ``"conv"``, or a dtype such as ``"float16"``),
    restricted to the operators ``ops`` when given."""
    wanted = {tags} if isinstance(tags, str) else set(tags or ())
    names = {ops} if isinstance(ops, str) else (set(ops) if ops is not None else None)
    if names is not None:
        unknown = names - set(FAMILY)
        if unknown:
            raise GraphError(f"catalog: unknown operator(s) {sorted(unknown)}; known: "
                             f"{', '.join(operators())}")
    return [c for c in _catalog()
            if wanted <= c.tags and (names is None or c.name in names)]


def operators() -> list[str]:
    """The operators the catalog covers, in catalog order."""
    return list(dict.fromkeys(c.name for c in _catalog()))


def standard_set() -> list[OpCase]:
    """One small case per operator: the conformance suite's standard operator set."""
    first: dict[str, OpCase] = {}
    for c in _catalog():
        first.setdefault(c.name, c)
    return list(first.values())


def get(case_id: str) -> OpCase:
    """The case with this id, e.g. ``"matmul[m13-k17-n19]"``."""
    for c in _catalog():
        if c.id == case_id:
            return c
    raise GraphError(f"catalog: no case {case_id!r}; list them with "
                     "[c.id for c in catalog.cases()]")
