"""Instruction-level compilation (thesis ch. 5, AMOS): map computes onto hardware intrinsics.

- :func:`match` finds, for a compute and an intrinsic declaration, the candidate software
  loops of each intrinsic loop, the basic matches and the distinct mappings (§5.3, Fig. 5.2);
- :func:`verify` checks a mapping with Algorithm 4 (§5.5) and says why it is wrong;
  :func:`force_mapping` builds a mapping from names and raises :class:`MappingError` with the
  structured reasons when it fails;
- :func:`generate` turns a mapping into the virtual, then the physical mapping: fused loops,
  tiles of the intrinsic's size with zero padding, the memory mapping of every operand (§5.4);
- :func:`lower_mapped` lowers a compute through a physical mapping into a Kernel IR kernel of
  ``IntrinsicCall``s on zero-padded tiles, for any target's code generator;
  :func:`execute` runs it by the intrinsic's declared semantics, the proof that a verified
  mapping computes the right thing;
- :func:`plan_tensorization` decides which computes ``tilecraft.compile(..., tensorize=...)``
  lowers through which mapping (:mod:`.tensorize`).

>>> import numpy as np
>>> from tilecraft import te, ops
>>> from tilecraft.intrin.examples import wmma
>>> A = te.placeholder((3, 5), "float16", name="A")
>>> x = te.placeholder((5,), "float16", name="x")
>>> y = ops.gemv(A, x, out_dtype="float32", name="y")
>>> mma = wmma(16, 16, 16)
>>> result = match(y, mma)
>>> [str(m) for m in result.mappings]
['wmma_16x16x16: i1 <- (i), i2 <- (), r1 <- (k) [Src1=A, Src2=x, Dst=y]']
>>> physical = generate(y, mma, result.mappings[0])
>>> physical.intrinsic_calls, round(physical.utilisation, 4)
(1, 0.0037)
>>> a, v = np.ones((3, 5), np.float16), np.arange(5, dtype=np.float16)
>>> execute(physical, {"A": a, "x": v})
array([10., 10., 10.], dtype=float32)
"""

from tilecraft.intrin.executor import build_kernel, execute
from tilecraft.intrin.generation import (
    DimIndex,
    FusedLoop,
    MoveAddress,
    OperandLayout,
    PhysicalMapping,
    VirtualMapping,
    generate,
    physical_mapping,
    virtual_mapping,
)
from tilecraft.intrin.lowering import lower_mapped
from tilecraft.intrin.mapping import (
    IntrinsicMapping,
    MappingError,
    OperandBinding,
    Reason,
    ReasonKind,
)
from tilecraft.intrin.matching import CorrespondenceMatch, MatchResult, match, match_graph
from tilecraft.intrin.tensorize import TensorizedCompute, plan_tensorization
from tilecraft.intrin.verify import (
    BooleanMatrix,
    VerificationResult,
    algorithm4,
    force_mapping,
    mapping_from_names,
    verify,
)

__all__ = [
    "BooleanMatrix", "CorrespondenceMatch", "DimIndex", "FusedLoop", "IntrinsicMapping",
    "MappingError", "MatchResult", "MoveAddress", "OperandBinding", "OperandLayout",
    "PhysicalMapping", "Reason", "ReasonKind", "TensorizedCompute", "VerificationResult",
    "VirtualMapping", "algorithm4", "build_kernel", "execute", "force_mapping", "generate",
    "lower_mapped", "mapping_from_names", "match", "match_graph", "physical_mapping",
    "plan_tensorization", "verify", "virtual_mapping",
]
