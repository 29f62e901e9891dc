"""The AVX-512 intrinsics of the x86_avx512 target, declared as data in ``intrinsics.yaml``
(package data): ``fma_f32x16`` and ``fma_f32x16_bcast`` (AVX-512F), ``vpdpbusd`` (VNNI, u8·s8
→ s32) and ``vdpbf16ps`` (BF16, bf16 pairs → fp32). Each one's semantics is a te program
(thesis Def. 3), the oracle of matching, verification and the conformance suite.

>>> [intrinsic.name for intrinsic in declared_intrinsics()]
['fma_f32x16', 'fma_f32x16_bcast', 'vpdpbusd', 'vdpbf16ps']
>>> print(declared_intrinsics()[2].compute.semantics)
Dst[i1] += cast(int32, Src1[r1]) * cast(int32, Src2[i1, r1])
"""

from __future__ import annotations

import functools
from importlib.resources import files

from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.target.spec import load_intrinsics

INTRINSICS_FILE = "intrinsics.yaml"
PLUGIN = "x86_avx512"


@functools.cache
def declared_intrinsics() -> tuple[IntrinsicDecl, ...]:
    """The validated declarations of ``intrinsics.yaml`` (their memory levels are checked
    against the spec when it is built: every host has ``DRAM`` and ``register``)."""
    return load_intrinsics(files("tilecraft_x86_avx512") / INTRINSICS_FILE, plugin=PLUGIN)
