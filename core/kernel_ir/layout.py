"""Buffer layouts with meaning: where in memory each logical element of a buffer lives.

A :class:`~tilecraft.kernel_ir.nodes.Buffer` names its layout (``Buffer.layout``, a string so
buffers stay cheap to compare); :func:`parse_layout` turns the name into one of:

- :class:`RowMajor` (``row_major``): the last index varies fastest;
- :class:`Strided` (``strided(s0,s1,...)``): element ``(i0, i1, ...)`` at ``sum(i_d * s_d)``;
- :class:`Blocked` (``blocked(16x16,zZ)``, and the Ascend names ``fractal_zZ``, ``fractal_nZ``,
  ``fractal_zN`` for 16x16 blocks): the logical array is cut into blocks of ``block`` shape;
  blocks are stored one after another in row-major (``Z``) or column-major (``N``) order of
  the block grid, and inside a block elements are row-major (``z``) or column-major (``n``).

Code generators read :meth:`Layout.offset`; the interpreter holds every buffer in its logical
shape and, for a parameter with another layout, gathers it from (and scatters outputs back to)
the physical array the caller passes (:meth:`Layout.offsets`); the verifier refuses layouts
that do not fit the buffer's shape (:meth:`Layout.problem`).

>>> fractal = parse_layout("fractal_zZ")
>>> fractal
Blocked(block=(16, 16), outer='Z', inner='z')
>>> fractal.offset((1, 17), (32, 32))   # block (0, 1), element (1, 1) inside it
273
>>> parse_layout("fractal_nZ").offset((1, 0), (16, 16))   # column-major inside a block
1
>>> parse_layout("strided(1,4)").offset((2, 3), (4, 3))
14
>>> parse_layout("blocked(2x2,zN)").name
'blocked(2x2,zN)'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tilecraft.errors import LoweringError

__all__ = ["Blocked", "Layout", "RowMajor", "Strided", "parse_layout"]


class Layout:
    """Maps a logical index of a buffer of ``shape`` to an element offset in memory."""

    @property
    def name(self) -> str:
        raise NotImplementedError

    def offset(self, index: tuple[int, ...], shape: tuple[int, ...]) -> int:
        raise NotImplementedError

    def physical_size(self, shape: tuple[int, ...]) -> int:
        """Elements of memory the buffer occupies (its largest offset plus one)."""
        if not shape or any(extent < 1 for extent in shape):
            return max(1, math.prod(shape))
        return self.offset(tuple(e - 1 for e in shape), shape) + 1 \
            if self.monotone else int(self.offsets(shape).max()) + 1

    #: whether the last element has the largest offset (true for every layout here but Strided)
    monotone = True

    def problem(self, shape: tuple[int, ...]) -> str | None:
        """Why this layout cannot describe a buffer of ``shape`` (None when it can)."""
        return None

    def offsets(self, shape: tuple[int, ...]) -> np.ndarray:
        """The offset of every logical element, as an int64 array of ``shape``."""
        return _offsets(self, tuple(shape))


@lru_cache(maxsize=64)
def _offsets(layout: Layout, shape: tuple[int, ...]) -> np.ndarray:
    grid = np.indices(shape, dtype=np.int64).reshape(len(shape), -1)
    values = np.fromiter((layout.offset(tuple(int(v) for v in column), shape)
                          for column in grid.T), dtype=np.int64, count=grid.shape[1])
    result = values.reshape(shape)
    result.setflags(write=False)
    return result


@dataclass(frozen=True)
class RowMajor(Layout):
    @property
    def name(self) -> str:
        return "row_major"

    def offset(self, index: tuple[int, ...], shape: tuple[int, ...]) -> int:
        flat = 0
        for value, extent in zip(index, shape):
            flat = flat * extent + value
        return flat


@dataclass(frozen=True)
class Strided(Layout):
    """Explicit element strides, one per dimension (may leave gaps: padded rows)."""

    strides: tuple[int, ...]
    monotone = False

    @property
    def name(self) -> str:
        return f"strided({','.join(str(s) for s in self.strides)})"

    def offset(self, index: tuple[int, ...], shape: tuple[int, ...]) -> int:
        return sum(value * stride for value, stride in zip(index, self.strides))

    def problem(self, shape: tuple[int, ...]) -> str | None:
        if len(self.strides) != len(shape):
            return f"has {len(self.strides)} strides for {len(shape)} dimensions"
        if any(stride < 1 for stride in self.strides):
            return f"strides {list(self.strides)} must be >= 1"
        span = 1
        for stride, extent in sorted(zip(self.strides, shape)):
            if extent > 1 and stride < span:
                return (f"strides {list(self.strides)} make two elements share an address; "
                        "each stride must cover the dimensions with smaller strides")
            span = max(span, stride * extent)
        return None


@dataclass(frozen=True)
class Blocked(Layout):
    """Blocks of ``block`` shape; ``outer`` orders the blocks (``Z`` row-major, ``N``
    column-major), ``inner`` the elements of a block (``z`` row-major, ``n`` column-major)."""

    block: tuple[int, ...]
    outer: str = "Z"
    inner: str = "z"

    @property
    def name(self) -> str:
        return f"blocked({'x'.join(str(b) for b in self.block)},{self.inner}{self.outer})"

    def offset(self, index: tuple[int, ...], shape: tuple[int, ...]) -> int:
        grid = tuple(extent // b for extent, b in zip(shape, self.block))
        which = tuple(value // b for value, b in zip(index, self.block))
        inside = tuple(value % b for value, b in zip(index, self.block))
        return (_ordered(which, grid, self.outer == "N") * math.prod(self.block)
                + _ordered(inside, self.block, self.inner == "n"))

    def problem(self, shape: tuple[int, ...]) -> str | None:
        if len(self.block) != len(shape):
            return f"has a {len(self.block)}-d block {list(self.block)} for {len(shape)} dimensions"
        if any(b < 1 or extent % b for extent, b in zip(shape, self.block)):
            return f"block {list(self.block)} does not divide the shape {list(shape)}"
        return None


def _ordered(index: tuple[int, ...], extents: tuple[int, ...], reverse: bool) -> int:
    if reverse:
        index, extents = index[::-1], extents[::-1]
    flat = 0
    for value, extent in zip(index, extents):
        flat = flat * extent + value
    return flat


_FRACTAL = re.compile(r"^fractal_([zn])([ZN])$")
_BLOCKED = re.compile(r"^blocked\((\d+(?:x\d+)*),([zn])([ZN])\)$")
_STRIDED = re.compile(r"^strided\((\d+(?:,\d+)*)\)$")
#: the Cube unit's fractal: 16x16 elements
FRACTAL_BLOCK = (16, 16)


def parse_layout(name: str | Layout) -> Layout:
    """The layout a name denotes (a :class:`LoweringError` listing the forms otherwise)."""
    if isinstance(name, Layout):
        return name
    if name == "row_major":
        return RowMajor()
    found = _FRACTAL.match(name)
    if found:
        return Blocked(FRACTAL_BLOCK, outer=found.group(2), inner=found.group(1))
    found = _BLOCKED.match(name)
    if found:
        block = tuple(int(b) for b in found.group(1).split("x"))
        return Blocked(block, outer=found.group(3), inner=found.group(2))
    found = _STRIDED.match(name)
    if found:
        return Strided(tuple(int(s) for s in found.group(1).split(",")))
    raise LoweringError(f"unknown layout {name!r}; use row_major, strided(s0,s1,...), "
                        "blocked(BxB,zZ) (inner z|n, outer Z|N) or fractal_zZ / fractal_nZ / "
                        "fractal_zN")
