"""One arena for a call's intermediates and workspaces, reused by lifetime.

Each intermediate tensor and template workspace of an executable lives from the first kernel
that names it to the last; two whose lifetimes do not overlap can share bytes. The plan gives
each an offset in one arena (greedy by size, the heuristic of TFLite's and ONNX Runtime's
planners: the largest buffers first, each at the lowest offset that does not collide with a
buffer already placed whose lifetime overlaps its own), every offset a multiple of
:data:`~tilecraft.runtime.aligned.ALIGN_BYTES`.

Why: a network's kernels otherwise write every activation to memory of its own, so each layer
writes lines no recent kernel touched and reads a producer's output from far caches; ResNet-50
keeps 100 MB of activations that way against a few MB live at once. One arena also lets the
kernel back it with huge pages (numpy advises them for large arrays), so the TLB covers a
layer's operands.

>>> plan = plan_memory([("a", 1000, 0, 1), ("b", 1000, 1, 2), ("c", 1000, 2, 3)])
>>> plan.offsets == {"a": 0, "b": 1024, "c": 0}, plan.size
(True, 2048)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tilecraft.runtime.aligned import ALIGN_BYTES, aligned_empty

#: (name, bytes, first step, last step): a buffer and the steps that use it, inclusive
Lifetime = tuple[str, int, int, int]


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offsets of buffers in one arena of ``size`` bytes."""

    offsets: Mapping[str, int]
    size: int

    def views(self, arena: np.ndarray,
              buffers: Iterable[tuple[str, Sequence[int], np.dtype]]) -> dict[str, np.ndarray]:
        """Arrays of ``buffers`` (name, shape, dtype) over their bytes of ``arena``."""
        out = {}
        for name, shape, dtype in buffers:
            dtype = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            start = self.offsets[name]
            out[name] = arena[start:start + count].view(dtype).reshape(tuple(shape))
        return out

    def allocate(self, buffers: Iterable[tuple[str, Sequence[int], np.dtype]]
                 ) -> dict[str, np.ndarray]:
        """A fresh arena, aligned, and the arrays of ``buffers`` over it."""
        return self.views(aligned_empty((max(self.size, 1),), np.uint8), buffers)


def _round_up(count: int, align: int) -> int:
    return -(-count // align) * align


def plan_memory(lifetimes: Sequence[Lifetime], align: int = ALIGN_BYTES) -> MemoryPlan:
    """Offsets for ``lifetimes`` such that buffers whose step ranges overlap never share a
    byte. A name listed twice keeps one slot for the union of its ranges."""
    merged: dict[str, tuple[int, int, int]] = {}
    for name, size, first, last in lifetimes:
        if first > last:
            raise ValueError(f"buffer {name!r}: first step {first} after last step {last}")
        if name in merged:
            old_size, old_first, old_last = merged[name]
            size, first, last = max(size, old_size), min(first, old_first), max(last, old_last)
        merged[name] = (size, first, last)
    placed: list[tuple[int, int, int, int]] = []  # offset, end, first, last
    offsets: dict[str, int] = {}
    # largest first; ties by first use, then name (a deterministic layout)
    for name, (size, first, last) in sorted(merged.items(),
                                            key=lambda item: (-item[1][0], item[1][1], item[0])):
        size = _round_up(max(size, 1), align)
        conflicts = sorted((start, end) for start, end, f, la in placed
                           if f <= last and first <= la)
        offset = 0
        for start, end in conflicts:
            if offset + size <= start:
                break
            offset = max(offset, end)
        offsets[name] = offset
        placed.append((offset, offset + size, first, last))
    return MemoryPlan(offsets, max((end for _, end, _, _ in placed), default=0))


__all__ = ["Lifetime", "MemoryPlan", "plan_memory"]
