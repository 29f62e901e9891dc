"""WMMA fragments in CUDA C: which register buffers of a kernel are ``nvcuda::wmma`` fragments
and the warp-collective calls that load, multiply and store them (and which are the lanes'
registers of a PTX mma.sync, :mod:`.mma_sync`).

A buffer of a registers level is a fragment when it is an operand of an ``IntrinsicCall`` of a
WMMA-form intrinsic of the spec (``Dst[i1, i2] += Src1[i1, r1] * Src2[r1, i2]``, loaded with
``load_matrix_sync``): ``Src1`` is a ``matrix_a``, ``Src2`` a ``matrix_b``, ``Dst`` an
``accumulator`` fragment of the intrinsic's ``M x N x K``. In Kernel IR every thread holds the
whole tile (the interpreter's view); in CUDA the 32 lanes of a warp hold it together and
call the collective operations:

- ``Allocate`` of a fragment: ``wmma::fragment<...> f;`` (an accumulator is filled with zero,
  as Kernel IR's allocations start at zero);
- ``Copy`` from a shared (or global) region of rows into a fragment: ``load_matrix_sync`` with
  the region's row stride as ``ldm``; from an accumulator into such a region:
  ``store_matrix_sync(..., wmma::mem_row_major)``;
- the ``IntrinsicCall``: ``wmma::mma_sync(d, a, b, d)``.

Whatever else touches a fragment (an element store, a region that is not whole rows, a
leading dimension that is not a multiple of 16 bytes) is a CodegenError.

>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> spec = load_target_spec()
>>> fragment_type(Fragment("matrix_a", 16, 16, 16, spec.intrinsic(
...     "wmma_m16n16k16_f16_f32").compute.sources[0].dtype))
'nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major>'
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import Buffer, IntrinsicCall, Kernel
from tilecraft.kernel_ir.visitor import walk_stmts
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.target.spec import TargetSpec
from tilecraft_nvidia_tc.codegen.dtypes import storage_type

__all__ = ["Fragment", "find_fragments", "fragment_type", "wmma_dims"]

#: the byte multiple WMMA needs of a leading dimension
LDM_BYTES = 16
USES = ("matrix_a", "matrix_b", "accumulator")


@dataclass(frozen=True)
class Fragment:
    """One WMMA fragment: its use, the intrinsic's ``M x N x K`` and its element dtype."""

    use: str
    m: int
    n: int
    k: int
    dtype: DType
    #: "wmma" (an ``nvcuda::wmma::fragment``) or "mma_sync" (the lane's registers of a PTX
    #: mma.sync operand, :mod:`.mma_sync`)
    form: str = "wmma"

    @property
    def rows(self) -> int:
        return {"matrix_a": self.m, "matrix_b": self.k}.get(self.use, self.m)

    @property
    def columns(self) -> int:
        return {"matrix_a": self.k, "matrix_b": self.n}.get(self.use, self.n)


def wmma_dims(decl: IntrinsicDecl) -> tuple[int, int, int] | None:
    """``(M, N, K)`` of a WMMA-form intrinsic, ``None`` for any other."""
    from tilecraft_nvidia_tc.tensor_cores import wmma_shape

    shape = wmma_shape(decl)
    if shape is None:
        return None
    extents = {loop.name: loop.extent for loop in decl.compute.loops}
    return extents[shape[0]], extents[shape[1]], extents[shape[2]]


def fragment_type(fragment: Fragment) -> str:
    """The C++ type of ``fragment`` (operand fragments are row-major)."""
    ns = "nvcuda::wmma"
    args = [f"{ns}::{fragment.use}", str(fragment.m), str(fragment.n), str(fragment.k),
            storage_type(fragment.dtype)]
    if fragment.use != "accumulator":
        args.append(f"{ns}::row_major")
    return f"{ns}::fragment<{', '.join(args)}>"


def find_fragments(kernel: Kernel, spec: TargetSpec) -> dict[int, Fragment]:
    """``id(buffer) -> Fragment`` for every buffer the kernel's WMMA calls use (module
    docstring); a CodegenError when one buffer serves two different fragments."""
    known = {decl.name: decl for decl in spec.intrinsics}
    fragments: dict[int, Fragment] = {}
    for stmt in walk_stmts(kernel.body):
        if not isinstance(stmt, IntrinsicCall) or stmt.intrinsic not in known:
            continue
        decl = known[stmt.intrinsic]
        dims, form = wmma_dims(decl), "wmma"
        if dims is None:
            from tilecraft_nvidia_tc.codegen.mma_sync import mma_dims

            dims, form = mma_dims(decl), "mma_sync"
        if dims is None:
            continue
        if form == "mma_sync":
            from tilecraft_nvidia_tc.codegen.mma_sync import check

            check(tuple(Fragment(use, *dims, operand.dtype, form)  # type: ignore[arg-type]
                        for use, operand in zip(USES, decl.compute.operands)),
                  f"kernel {kernel.name}: the call of {decl.name}")
        for use, operand, region in zip(USES, decl.compute.operands, stmt.operands):
            fragment = Fragment(use, *dims, operand.dtype, form)
            buffer = region.buffer
            if fragments.setdefault(id(buffer), fragment) != fragment:
                raise CodegenError(
                    f"kernel {kernel.name}: buffer {buffer.name} is used as two different WMMA "
                    f"fragments ({fragments[id(buffer)]} and {fragment}); give each its own "
                    "buffer")
            if buffer.dtype != operand.dtype:
                raise CodegenError(
                    f"kernel {kernel.name}: buffer {buffer.name} of {buffer.dtype.value} is "
                    f"the {operand.name} of {decl.name}, which takes {operand.dtype.value}")
    return fragments


def leading_dimension(kernel: Kernel, buffer: Buffer, what: str) -> int:
    """The row stride of ``buffer`` (its last extent), checked to be a multiple of 16 bytes."""
    ldm = buffer.shape[-1]
    if (ldm * buffer.dtype.bytes) % LDM_BYTES:
        raise CodegenError(
            f"kernel {kernel.name}: {what} has rows of {ldm} {buffer.dtype.value} elements in "
            f"{buffer.name}, not a multiple of {LDM_BYTES} bytes as WMMA's ldm must be; pad "
            "the rows")
    return ldm
