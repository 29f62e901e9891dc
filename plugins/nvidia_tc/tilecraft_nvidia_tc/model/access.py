"""What one warp-wide memory access costs: the 32-byte sectors a global access touches (what
the L2 and DRAM move) and the wavefronts a shared-memory access takes (bank conflicts).

The lanes' addresses come from the index expressions evaluated for the first warp of a block
(:func:`~tilecraft_nvidia_tc.model.evaluate.lane_grid`), every other loop variable at 0 —
the representative iteration. An access the model cannot evaluate (an index that loads) is
taken as perfectly coalesced.

- global: ``sectors`` = distinct 32-byte sectors of the active lanes' bytes;
- shared: ``wavefronts`` = the most distinct 4-byte words any one of the 32 banks serves, and
  at least the distinct words over 32 (a 128-bit access of 32 lanes takes 4).

>>> import numpy as np
>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir.nodes import Buffer
>>> from tilecraft.te import Var
>>> t = Var("t")
>>> x = Buffer("x", (4096,), DType.FLOAT32)
>>> cost = warp_access(x, [(t,)], {t: np.arange(32)}, np.ones(32, bool))
>>> cost.sectors, cost.bytes       # 32 consecutive floats: 4 sectors
(4, 128)
>>> s = Buffer("s", (32, 32), DType.FLOAT32, level="shared")
>>> warp_access(s, [(t, t * 0)], {t: np.arange(32)}, np.ones(32, bool)).wavefronts  # a column
32
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tilecraft.kernel_ir.nodes import Buffer
from tilecraft.te.expr import Expr, Var
from tilecraft_nvidia_tc.model.evaluate import NotEvaluable, evaluate

__all__ = ["BANKS", "SECTOR_BYTES", "WORD_BYTES", "WarpAccess", "warp_access"]

#: bytes of a DRAM / L2 sector (the spec's global line_bytes; 32 on every NVIDIA GPU since Maxwell)
SECTOR_BYTES = 32
#: banks of shared memory and their width (the spec's banks / bank_bytes for the shared level)
BANKS = 32
WORD_BYTES = 4


@dataclass(frozen=True)
class WarpAccess:
    """One warp-wide access: active ``lanes``, ``bytes`` they move, the ``sectors`` (global)
    and ``wavefronts`` (shared) it takes."""

    lanes: int
    bytes: int
    sectors: int
    wavefronts: int


def _offsets(buffer: Buffer, elements: Sequence[Sequence[Expr]],
             env: Mapping[Var, np.ndarray], lanes: int) -> np.ndarray:
    """Flat element offsets, shape (lanes, elements per lane)."""
    strides = buffer.strides()
    columns = []
    for indices in elements:
        flat = np.zeros(lanes, dtype=np.int64)
        for index, stride in zip(indices, strides, strict=False):
            flat = flat + np.broadcast_to(evaluate(index, env), (lanes,)) * stride
        columns.append(flat)
    return np.stack(columns, axis=1)


def warp_access(buffer: Buffer, elements: Sequence[Sequence[Expr]],
                env: Mapping[Var, np.ndarray], active: np.ndarray, *,
                sector_bytes: int = SECTOR_BYTES, banks: int = BANKS,
                word_bytes: int = WORD_BYTES) -> WarpAccess:
    """The cost of the warp whose lanes have the variable values ``env`` (arrays of one
    value per lane) accessing, per lane, the elements of ``buffer`` at each index tuple of
    ``elements``; ``active`` says which lanes take part."""
    lanes = int(active.size)
    count = int(active.sum())
    element_bytes = buffer.dtype.bytes * buffer.lanes
    moved = count * len(elements) * element_bytes
    if count == 0:
        return WarpAccess(0, 0, 0, 0)
    try:
        offsets = _offsets(buffer, elements, env, lanes)[active]
    except NotEvaluable:
        sectors = math.ceil(moved / sector_bytes)
        return WarpAccess(count, moved, sectors, max(1, math.ceil(moved / (banks * word_bytes))))
    starts = offsets.ravel() * element_bytes
    touched = (starts[:, None] + np.arange(0, element_bytes, min(element_bytes, word_bytes))
               ).ravel()
    sectors = int(np.unique(touched // sector_bytes).size)
    words = np.unique(touched // word_bytes)
    per_bank = np.bincount(words % banks, minlength=banks)
    wavefronts = max(int(per_bank.max()), math.ceil(words.size / banks))
    return WarpAccess(count, moved, sectors, wavefronts)
