"""Lower bounds and multiples on tile sizes, e.g. from a micro-kernel (thesis §3.4.1.2, Eq. 3.18's
alpha): a register-blocked CPU micro-kernel computes MI x (NI * 16) outputs at a time, so the
tiles of the loops it covers should be multiples of those.

>>> merged = merge_constraints({"m": LoopConstraint(multiple_of=6)},
...                            {"m": LoopConstraint(minimum=8, multiple_of=4)})
>>> merged["m"]
LoopConstraint(minimum=8, multiple_of=12, maximum=None)
>>> merged["m"].smallest(100), merged["m"].smallest(5)
(12, 5)
>>> merged["m"].candidates(40.0, 100)
[36, 48, 60]
>>> one_at_a_time = LoopConstraint(maximum=1)   # a kernel that takes one batch per block
>>> one_at_a_time.largest(12), one_at_a_time.candidates(5.0, 12), one_at_a_time.allowed(12, 12)
(1, [1], False)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tilecraft.fusion.chain import Chain, FusionError
from tilecraft.target.microkernel import MicroKernelDecl


@dataclass(frozen=True)
class LoopConstraint:
    """A tile of the loop is at least ``minimum`` and a multiple of ``multiple_of`` — or the
    whole extent (the code generator handles the remainder of a loop shorter than that) —
    and at most ``maximum`` when one is given (a kernel that takes one batch per block)."""

    minimum: int = 1
    multiple_of: int = 1
    maximum: int | None = None

    def __post_init__(self) -> None:
        for field_name in ("minimum", "multiple_of", "maximum"):
            value = getattr(self, field_name)
            if field_name == "maximum" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FusionError(f"LoopConstraint.{field_name} = {value!r} must be a positive "
                                  "int")
        if self.maximum is not None and self.maximum < self._lowest():
            raise FusionError(f"LoopConstraint: maximum {self.maximum} is below the smallest "
                              f"tile {self._lowest()} that minimum {self.minimum} and "
                              f"multiple_of {self.multiple_of} allow")

    def _lowest(self) -> int:
        return self.multiple_of * math.ceil(self.minimum / self.multiple_of)

    def smallest(self, extent: int) -> int:
        """The smallest allowed tile for a loop of ``extent``."""
        return min(self._lowest(), extent)

    def largest(self, extent: int) -> int:
        """The largest allowed tile for a loop of ``extent``."""
        if self.maximum is None or self.maximum >= extent:
            return extent
        return max(self.smallest(extent), self.maximum // self.multiple_of * self.multiple_of)

    def allowed(self, tile: int, extent: int) -> bool:
        if tile > self.largest(extent):
            return False
        return tile == extent or (self.smallest(extent) <= tile <= extent
                                  and tile % self.multiple_of == 0)

    def candidates(self, real: float, extent: int) -> list[int]:
        """Allowed integer tiles around the real ``real``: the neighbouring multiples, the
        smallest tile with the same trip counts, the whole extent when close."""
        low, high = self.smallest(extent), self.largest(extent)
        if low >= high:
            return [high]
        values = set()
        step = self.multiple_of
        for value in (step * math.floor(real / step), step * math.ceil(real / step)):
            values.add(value)
        for trips in {max(1, math.floor(extent / real)), max(1, math.ceil(extent / real))}:
            values.add(step * math.ceil(math.ceil(extent / trips) / step))
        result = set()
        for value in values:
            value = max(low, value)
            value = extent if value >= extent else value
            result.add(min(value, high))
        return sorted(result)


Constraints = Mapping[str, LoopConstraint]


def merge_constraints(*groups: Constraints) -> dict[str, LoopConstraint]:
    """Combine constraints loop by loop: the larger minimum, the least common multiple."""
    merged: dict[str, LoopConstraint] = {}
    for group in groups:
        for loop, constraint in group.items():
            known = merged.get(loop)
            if known is None:
                merged[loop] = constraint
            else:
                maxima = [m for m in (known.maximum, constraint.maximum) if m is not None]
                merged[loop] = LoopConstraint(max(known.minimum, constraint.minimum),
                                              math.lcm(known.multiple_of, constraint.multiple_of),
                                              min(maxima) if maxima else None)
    return merged


def check_constraints(chain: Chain, constraints: Constraints | None) -> dict[str, LoopConstraint]:
    """Constraints for every loop of ``chain`` (defaults where none is given)."""
    constraints = dict(constraints or {})
    unknown = sorted(set(constraints) - set(chain.loop_names))
    if unknown:
        raise FusionError(f"tile constraints name loops {', '.join(unknown)} that chain "
                          f"{chain.names} does not have; its loops are "
                          f"{', '.join(chain.loop_names)}")
    for loop, constraint in constraints.items():
        if not isinstance(constraint, LoopConstraint):
            raise FusionError(f"the constraint for loop {loop} must be a LoopConstraint, got "
                              f"{constraint!r}")
    return {loop: constraints.get(loop, LoopConstraint()) for loop in chain.loop_names}


def micro_kernel_constraints(kernel: MicroKernelDecl,
                             loop_map: Mapping[str, str | Sequence[str]],
                             **parameters: int) -> dict[str, LoopConstraint]:
    """Tile constraints from ``kernel`` instantiated with ``parameters``: each micro-kernel
    loop's extent becomes minimum and multiple of the chain loops it is mapped to
    (``loop_map``, micro-kernel loop -> chain loop or loops).

    >>> from tilecraft.target.microkernel import MicroKernelDecl
    >>> gemm = MicroKernelDecl(
    ...     name="gemm_tile", semantics="C[m, n] += A[m, k] * B[k, n]", template="t.jinja",
    ...     loops=[{"name": "m", "extent": "MI", "kind": "spatial"},
    ...            {"name": "n", "extent": "NV", "kind": "spatial"},
    ...            {"name": "k", "extent": 1, "kind": "reduce"}],
    ...     operands=[{"name": "A", "role": "src", "dtype": "float32", "shape": ["MI", 1],
    ...                "index": ["m", "k"]},
    ...               {"name": "B", "role": "src", "dtype": "float32", "shape": [1, "NV"],
    ...                "index": ["k", "n"]},
    ...               {"name": "C", "role": "dst", "dtype": "float32", "shape": ["MI", "NV"],
    ...                "index": ["m", "n"]}],
    ...     parameters={"MI": {"default": 6}, "NV": {"default": 64}})
    >>> bounds = micro_kernel_constraints(gemm, {"m": "m", "n": ["l", "n"]})
    >>> bounds["m"], bounds["n"] == bounds["l"] == LoopConstraint(64, 64)
    (LoopConstraint(minimum=6, multiple_of=6, maximum=None), True)
    """
    compute = kernel.instantiate(**parameters)
    extents = {loop.name: loop.extent for loop in compute.loops}
    groups: list[dict[str, LoopConstraint]] = []
    for kernel_loop, targets in loop_map.items():
        if kernel_loop not in extents:
            raise FusionError(f"micro-kernel {kernel.name} has no loop {kernel_loop!r}; its "
                              f"loops are {', '.join(extents)}")
        extent = extents[kernel_loop]
        for target in _names(targets):
            groups.append({target: LoopConstraint(minimum=extent, multiple_of=extent)})
    return merge_constraints(*groups)


def _names(targets: str | Iterable[str]) -> list[str]:
    return [targets] if isinstance(targets, str) else list(targets)
