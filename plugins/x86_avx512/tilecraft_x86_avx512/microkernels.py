"""The x86 plugin's micro-kernels (thesis §3.4.1.2): declarations, register blocking, rendering.

``outer_product_f32`` is Algorithm 2: ``C[MI, NR] += A[KI, MI]^T x B[KI, NR]`` on float32 with
the ``MI x NR/16`` accumulators in zmm registers for the whole ``k`` loop. Its implementation
is the Jinja template ``templates/outer_product.ll.jinja`` (LLVM IR), rendered per parameter set.
``outer_product_f32_rows`` is the same kernel reading A in place as rows ``[MI, KI]`` (a
row-major matrix or a convolution's weights, not packed).

The same register tile on dot-product instructions, where each 32-bit lane takes a group of
``k`` values per step (operands packed with the group innermost, A ``[MI, KG, group]``,
B ``[KG, NR, group]``):
``vnni_u8s8`` / ``vnni_s8u8`` (``vpdpbusd``, 4 bytes per lane, int32 accumulators; the broadcast
A operand is the unsigned / the signed one) in ``templates/vnni_u8s8.ll.jinja``, and
``dot_bf16`` (``vdpbf16ps``, 2 bfloat16 per lane, float32 accumulators) in
``templates/dot_bf16.ll.jinja``. Their register budget is that of Eq. 3.4 as well.
``vnni_row_sums_s8`` / ``vnni_row_sums_u8`` (``templates/vnni_row_sums.ll.jinja``) sum rows of
int8 / uint8 groups, ``vpdpbusd`` against ones, 64 bytes a step: the compensation of an
operand shifted by 128 (int8 x int8 runs as int8 x uint8 with B shifted).

:func:`register_blocking` solves Eq. 3.4 for the register tile: maximise the arithmetic
intensity ``MI*NI*KI / (KI*(MI+NI) + 2*MI*NI)`` subject to ``MI*NI + NI + MII <= registers``.

>>> register_blocking(registers=32, ki=256)
RegisterBlocking(mi=5, ni=5, mii=1, intensity=2.452)
>>> [b.mi * b.ni for b in register_blocking_candidates(registers=32, ki=256)[:3]]
[25, 24, 24]
>>> "fma.v16f32" in render("outer_product_f32", {"MI": 2, "NR": 16, "KI": 4}, "mk")
True
>>> "vpdpbusd" in render("vnni_s8u8", {"MI": 2, "NR": 16, "KG": 3}, "mk")
True
>>> "masked.load" in render("vnni_row_sums_s8", {"MI": 3, "KG": 17}, "mk")   # 16 + 1 groups
True
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import jinja2

from tilecraft.errors import CodegenError
from tilecraft.target.microkernel import MicroKernelDecl
from tilecraft_x86_avx512.tile_transpose import transposed_store_lines


def _outer_product_decl(name: str, description: str, a_rows: bool,
                        accumulate: bool = True) -> MicroKernelDecl:
    """Algorithm 2's float32 outer product; A packed k-major ``[KI, MI]`` (``a_rows=False``) or
    read in place as ``[MI, KI]`` rows (``a_rows=True``); onto C (``accumulate``) or into it
    (``C = sum``: a tile's first reduction slice, C neither zeroed nor read)."""
    a_shape, a_index = (["MV", "KI"], ["m", "k"]) if a_rows else (["KI", "MV"], ["k", "m"])
    a_term = "A[m, k]" if a_rows else "A[k, m]"
    semantics = f"C[m, n] += {a_term} * B[k, n]" if accumulate else \
        f"C[m, n] = sum({a_term} * B[k, n])"
    return MicroKernelDecl(
        name=name, description=description,
        loops=[{"name": "m", "extent": "MV", "kind": "spatial"},
               {"name": "n", "extent": "NC", "kind": "spatial"},
               {"name": "k", "extent": "KI", "kind": "reduce"}],
        operands=[{"name": "A", "role": "src", "dtype": "float32", "shape": a_shape,
                   "index": a_index},
                  {"name": "B", "role": "src", "dtype": "float32", "shape": ["KI", "NC"],
                   "index": ["k", "n"]},
                  {"name": "C", "role": "dst", "dtype": "float32", "shape": ["MV", "NC"],
                   "index": ["m", "n"]}],
        semantics=semantics,
        template="templates/outer_product.ll.jinja",
        parameters={"MI": {"default": 5, "minimum": 1, "maximum": 28,
                           "description": "rows of the register tile"},
                    "NR": {"default": 80, "choices": [16, 32, 48, 64, 80, 96, 112, 128],
                           "description": "columns of the register tile (NI zmm vectors of 16)"},
                    "KI": {"default": 256, "minimum": 1, "maximum": 4096,
                           "description": "k steps per call (the KC slice)"},
                    "MV": {"default": 5, "minimum": 1, "maximum": 28,
                           "description": "rows of C written (MV <= MI; fewer on the ragged "
                                          "edge)"},
                    "NC": {"default": 80, "minimum": 1, "maximum": 128,
                           "description": "columns of C written (NC <= NR; fewer on the ragged "
                                          "edge)"}})


#: Algorithm 2's outer-product kernel on float32 (A packed k-major, MI per k; B NR per k)
OUTER_PRODUCT_F32 = _outer_product_decl(
    "outer_product_f32",
    "register-tile outer product (thesis Algorithm 2): C[MI,NR] += A[KI,MI]^T B[KI,NR]", False)
#: the same register tile reading A in place, row-major ``[MI, KI]`` (no packing of A: for
#: contractions with few panels of B, where each packed A value would be used only a few times)
OUTER_PRODUCT_F32_ROWS = _outer_product_decl(
    "outer_product_f32_rows",
    "register-tile outer product, A read in place: C[MI,NR] += A[MI,KI] B[KI,NR]", True)
#: the two kernels for a tile's first reduction slice: C written, never read (no zero-fill)
OUTER_PRODUCT_F32_SET = _outer_product_decl(
    "outer_product_f32_set",
    "register-tile outer product into C: C[MI,NR] = A[KI,MI]^T B[KI,NR]", False, False)
OUTER_PRODUCT_F32_ROWS_SET = _outer_product_decl(
    "outer_product_f32_rows_set",
    "register-tile outer product into C, A read in place: C[MI,NR] = A[MI,KI] B[KI,NR]", True,
    False)
def _taps_parameters(stride: int, rows_max: int, channels: str, span: str) -> dict:
    """The parameters of a taps micro-kernel (a register tile of ``MI`` pixels by ``NR``
    output channels over a ``KH x KW`` window, ``AW`` input pixels a window row)."""
    return {"MI": {"default": 6, "minimum": 1, "maximum": rows_max,
                   "description": "rows (pixels) of the register tile"},
            "NR": {"default": 64, "choices": [16, 32, 48, 64, 80, 96, 112, 128],
                   "description": "columns (output channels) of the register tile"},
            "KI": {"default": 16, "minimum": 1, "maximum": 4096, "description": channels},
            "MV": {"default": 6, "minimum": 1, "maximum": rows_max,
                   "description": "rows of C written (MV <= MI)"},
            "NC": {"default": 64, "minimum": 1, "maximum": 128,
                   "description": "columns of C written (NC <= NR)"},
            "KH": {"default": 3, "minimum": 1, "maximum": 16,
                   "description": "rows of the window"},
            "KW": {"default": 3, "minimum": 1, "maximum": 16,
                   "description": "columns of the window"},
            "AW": {"default": 5 * stride + 3, "minimum": 1, "maximum": 1 << 20,
                   "description": f"{span}: (MV - 1) * {stride} + KW"}}


def _taps_decl(stride: int, transposed: bool = False) -> MicroKernelDecl:
    """The register tile over a convolution window's taps, output pixels ``stride`` input
    pixels apart: A the padded activation ``[KI, rows, width]`` read in place at each tap's
    shift, B the weights packed ``[KI, KH, KW, NR]``, the accumulators in registers across every
    tap, C written (blocking/direct_conv.py) — ``transposed`` (the ``_t`` variants, at most 8
    pixels): as ``C[NC, MV]``, channels by pixels, transposed in registers
    (:mod:`~tilecraft_x86_avx512.tile_transpose`)."""
    column = "m + q" if stride == 1 else f"m * {stride} + q"
    rows_max = 8 if transposed else 28
    c_operand = {"name": "C", "role": "dst", "dtype": "float32", "shape": ["NC", "MV"],
                 "index": ["n", "m"]} if transposed else \
        {"name": "C", "role": "dst", "dtype": "float32", "shape": ["MV", "NC"],
         "index": ["m", "n"]}
    c_access = "C[n, m]" if transposed else "C[m, n]"
    return MicroKernelDecl(
        name="outer_product_f32_taps" + ("" if stride == 1 else f"_s{stride}")
             + ("_t" if transposed else ""),
        description="register-tile outer product over a window's taps, A read in place"
                    + ("" if stride == 1 else f" (stride {stride})")
                    + (", C stored transposed" if transposed else "")
                    + f": {c_access} = sum_{{k,r,q}} A[k, r, {column}] B[k, r, q, n]",
        loops=[{"name": "m", "extent": "MV", "kind": "spatial"},
               {"name": "n", "extent": "NC", "kind": "spatial"},
               {"name": "k", "extent": "KI", "kind": "reduce"},
               {"name": "r", "extent": "KH", "kind": "reduce"},
               {"name": "q", "extent": "KW", "kind": "reduce"}],
        operands=[{"name": "A", "role": "src", "dtype": "float32", "shape": ["KI", "KH", "AW"],
                   "index": ["k", "r", column]},
                  {"name": "B", "role": "src", "dtype": "float32",
                   "shape": ["KI", "KH", "KW", "NC"], "index": ["k", "r", "q", "n"]},
                  c_operand],
        semantics=f"{c_access} = sum(A[k, r, {column}] * B[k, r, q, n])",
        template="templates/outer_product_taps.ll.jinja",
        parameters=_taps_parameters(stride, rows_max, "k steps (input channels)",
                                    "A columns read per window row"))


#: the taps micro-kernels: output pixels 1 and 2 input pixels apart; C stored as computed
#: (pixels by channels) or transposed
OUTER_PRODUCT_F32_TAPS = _taps_decl(1)
OUTER_PRODUCT_F32_TAPS_S2 = _taps_decl(2)
OUTER_PRODUCT_F32_TAPS_T = _taps_decl(1, transposed=True)
OUTER_PRODUCT_F32_TAPS_S2_T = _taps_decl(2, transposed=True)
#: the taps micro-kernel of each stride, and of each stride storing C transposed
TAPS_BY_STRIDE = {1: OUTER_PRODUCT_F32_TAPS, 2: OUTER_PRODUCT_F32_TAPS_S2}
TRANSPOSED_TAPS_BY_STRIDE = {1: OUTER_PRODUCT_F32_TAPS_T, 2: OUTER_PRODUCT_F32_TAPS_S2_T}


def _taps_nhwc_decl(stride: int, accumulate: bool = False) -> MicroKernelDecl:
    """The register tile over a channels-last convolution window's taps, output pixels
    ``stride`` input pixels apart: A the padded activation ``[rows, width, KI]`` (NHWC) read in
    place, B the weights packed ``[KH, KW, KI, NR]``, the accumulators in registers across the
    whole window, C written — or added to (``accumulate``, the ``_acc`` variants: a window cut
    into pieces) — (``templates/outer_product_taps_nhwc.ll.jinja``; where ``KW > 1`` the
    lowering, blocking/direct_nhwc.py, hands over dense pixels and taps: A's pixels ``KI``
    floats apart, B's taps ``KI`` rows apart)."""
    column = "m + q" if stride == 1 else f"m * {stride} + q"
    product = f"A[r, {column}, k] * B[r, q, k, n]"
    return MicroKernelDecl(
        name="outer_product_f32_taps_nhwc" + ("" if stride == 1 else f"_s{stride}")
             + ("_acc" if accumulate else ""),
        description="register-tile outer product over a channels-last window's taps, A read "
                    "in place" + ("" if stride == 1 else f" (stride {stride})")
                    + f": C[m, n] = sum_{{r,q,k}} A[r, {column}, k] B[r, q, k, n]",
        loops=[{"name": "m", "extent": "MV", "kind": "spatial"},
               {"name": "n", "extent": "NC", "kind": "spatial"},
               {"name": "r", "extent": "KH", "kind": "reduce"},
               {"name": "q", "extent": "KW", "kind": "reduce"},
               {"name": "k", "extent": "KI", "kind": "reduce"}],
        operands=[{"name": "A", "role": "src", "dtype": "float32", "shape": ["KH", "AW", "KI"],
                   "index": ["r", column, "k"]},
                  {"name": "B", "role": "src", "dtype": "float32",
                   "shape": ["KH", "KW", "KI", "NC"], "index": ["r", "q", "k", "n"]},
                  {"name": "C", "role": "dst", "dtype": "float32", "shape": ["MV", "NC"],
                   "index": ["m", "n"]}],
        semantics=f"C[m, n] += {product}" if accumulate else f"C[m, n] = sum({product})",
        template="templates/outer_product_taps_nhwc.ll.jinja",
        parameters=_taps_parameters(stride, 28, "input channels", "A pixels read per window row"))


#: the channels-last taps micro-kernels, output pixels 1 and 2 input pixels apart
OUTER_PRODUCT_F32_TAPS_NHWC = _taps_nhwc_decl(1)
OUTER_PRODUCT_F32_TAPS_NHWC_S2 = _taps_nhwc_decl(2)
NHWC_TAPS_BY_STRIDE = {1: OUTER_PRODUCT_F32_TAPS_NHWC, 2: OUTER_PRODUCT_F32_TAPS_NHWC_S2}
#: the same adding to C: one call per piece (one tap, some of the channels) of a window whose
#: weights would not stay in cache for a block of strips (blocking/direct_nhwc.py)
NHWC_TAPS_ACC_BY_STRIDE = {1: _taps_nhwc_decl(1, accumulate=True),
                           2: _taps_nhwc_decl(2, accumulate=True)}


#: the variant of a micro-kernel that writes its tile instead of adding to it
SETTING_VARIANTS = {OUTER_PRODUCT_F32.name: OUTER_PRODUCT_F32_SET.name,
                    OUTER_PRODUCT_F32_ROWS.name: OUTER_PRODUCT_F32_ROWS_SET.name}


def _grouped_decl(name: str, description: str, a: str, b: str, c: str, group: int,
                  template: str) -> MicroKernelDecl:
    """A register-tile micro-kernel on a dot-product instruction: ``group`` consecutive ``k``
    per 32-bit lane, operands packed ``[MI, KG, group]`` (A, one group broadcast per row) and
    ``[KG, NR, group]`` (B, 16 columns per zmm), accumulators ``C[MI, NR]``."""
    return MicroKernelDecl(
        name=name, description=description,
        loops=[{"name": "m", "extent": "MI", "kind": "spatial"},
               {"name": "n", "extent": "NR", "kind": "spatial"},
               {"name": "kg", "extent": "KG", "kind": "reduce"},
               {"name": "g", "extent": group, "kind": "reduce"}],
        operands=[{"name": "A", "role": "src", "dtype": a, "shape": ["MI", "KG", group],
                   "index": ["m", "kg", "g"]},
                  {"name": "B", "role": "src", "dtype": b, "shape": ["KG", "NR", group],
                   "index": ["kg", "n", "g"]},
                  {"name": "C", "role": "dst", "dtype": c, "shape": ["MI", "NR"],
                   "index": ["m", "n"]}],
        semantics=f"C[m, n] += cast({c}, A[m, kg, g]) * cast({c}, B[kg, n, g])",
        template=template,
        parameters={"MI": {"default": 5, "minimum": 1, "maximum": 28,
                           "description": "rows of the register tile"},
                    "NR": {"default": 80, "choices": [16, 32, 48, 64, 80, 96, 112, 128],
                           "description": "columns of the register tile (NI zmm vectors of 16)"},
                    "KG": {"default": 64, "minimum": 1, "maximum": 4096,
                           "description": f"groups of {group} k per call (KC / {group})"}})


#: vpdpbusd with A (broadcast, u8) x B (s8): int8 GEMM with unsigned activations on the A side
VNNI_U8S8 = _grouped_decl(
    "vnni_u8s8", "AVX512-VNNI register tile: C[MI,NR] s32 += A[MI,KG,4] u8 . B[KG,NR,4] s8",
    "uint8", "int8", "int32", 4, "templates/vnni_u8s8.ll.jinja")
#: vpdpbusd with A (broadcast, s8) x B (u8): convolutions (weights s8 on the A side)
VNNI_S8U8 = _grouped_decl(
    "vnni_s8u8", "AVX512-VNNI register tile: C[MI,NR] s32 += A[MI,KG,4] s8 . B[KG,NR,4] u8",
    "int8", "uint8", "int32", 4, "templates/vnni_u8s8.ll.jinja")
#: vdpbf16ps: pairs of bfloat16 into float32 accumulators
DOT_BF16 = _grouped_decl(
    "dot_bf16", "AVX512-BF16 register tile: C[MI,NR] f32 += A[MI,KG,2] bf16 . B[KG,NR,2] bf16",
    "bfloat16", "bfloat16", "float32", 2, "templates/dot_bf16.ll.jinja")
def _amx_split_decl(name: str, accumulate: bool) -> MicroKernelDecl:
    """float32 products on AMX through three bfloat16 parts of each operand
    (blocking/amx_split.py), writing the tile or adding to it; every tile of A and B is 1 KiB
    of contiguous memory (16 rows of 64 bytes)."""
    product = ("select(p + q <= 2, cast(float32, A[k // 32, p, m, k % 32]) * "
               "cast(float32, B[k // 32, q, n // 16, k % 32 // 2, n % 16, k % 2]), 0.0)")
    return MicroKernelDecl(
        name=name,
        description=f"AMX tiles: C[32,32] f32 {'+' if accumulate else ''}= A . B, each operand "
                    "three bf16 parts (A[KS,3,32,32], B[KS,3,2,16,16,2]), the six part "
                    "products p + q <= 2",
        loops=[{"name": "m", "extent": 32, "kind": "spatial"},
               {"name": "n", "extent": 32, "kind": "spatial"},
               {"name": "p", "extent": 3, "kind": "reduce"},
               {"name": "q", "extent": 3, "kind": "reduce"},
               {"name": "k", "extent": "KK", "kind": "reduce"}],
        operands=[{"name": "A", "role": "src", "dtype": "bfloat16", "shape": ["KS", 3, 32, 32],
                   "index": ["k // 32", "p", "m", "k % 32"]},
                  {"name": "B", "role": "src", "dtype": "bfloat16",
                   "shape": ["KS", 3, 2, 16, 16, 2],
                   "index": ["k // 32", "q", "n // 16", "k % 32 // 2", "n % 16", "k % 2"]},
                  {"name": "C", "role": "dst", "dtype": "float32", "shape": [32, 32],
                   "index": ["m", "n"]}],
        semantics=f"C[m, n] += {product}" if accumulate else f"C[m, n] = sum({product})",
        template="templates/amx_split_f32.ll.jinja",
        parameters={"KK": {"default": 64, "minimum": 32, "maximum": 1 << 16,
                           "description": "k per call, a multiple of 32 (zero-padded)"},
                    "KS": {"default": 2, "minimum": 1, "maximum": 1 << 11,
                           "description": "tile multiplies per part product: KK / 32"}})


#: the AMX split micro-kernel writing its tile, and adding to it (the later slices of k)
AMX_SPLIT_F32 = _amx_split_decl("amx_split_f32", accumulate=False)
AMX_SPLIT_F32_ACC = _amx_split_decl("amx_split_f32_acc", accumulate=True)


def _row_sums_decl(name: str, a: str) -> MicroKernelDecl:
    """Row sums of ``MI`` rows of ``KG`` groups of 4 bytes (the compensation of the other
    operand's shift by 128): ``S[m] += sum A[m, kg, g]``; the groups of a row contiguous."""
    return MicroKernelDecl(
        name=name, description=f"AVX512-VNNI row sums: S[MI] s32 += sum A[MI,KG,4] {a}",
        loops=[{"name": "m", "extent": "MI", "kind": "spatial"},
               {"name": "kg", "extent": "KG", "kind": "reduce"},
               {"name": "g", "extent": 4, "kind": "reduce"}],
        operands=[{"name": "A", "role": "src", "dtype": a, "shape": ["MI", "KG", 4],
                   "index": ["m", "kg", "g"]},
                  {"name": "S", "role": "dst", "dtype": "int32", "shape": ["MI"],
                   "index": ["m"]}],
        semantics="S[m] += cast(int32, A[m, kg, g])",
        template="templates/vnni_row_sums.ll.jinja",
        parameters={"MI": {"default": 6, "minimum": 1, "maximum": 28,
                           "description": "rows summed at once (interleaved)"},
                    "KG": {"default": 64, "minimum": 1, "maximum": 1 << 20,
                           "description": "groups of 4 bytes per row"}})


#: sums of int8 rows (vpdpbusd with ones as the unsigned operand)
VNNI_ROW_SUMS_S8 = _row_sums_decl("vnni_row_sums_s8", "int8")
#: sums of uint8 rows (vpdpbusd with ones as the signed operand)
VNNI_ROW_SUMS_U8 = _row_sums_decl("vnni_row_sums_u8", "uint8")

MICRO_KERNELS: dict[str, MicroKernelDecl] = {
    decl.name: decl for decl in (OUTER_PRODUCT_F32, OUTER_PRODUCT_F32_ROWS, OUTER_PRODUCT_F32_SET,
                                 OUTER_PRODUCT_F32_ROWS_SET, VNNI_U8S8, VNNI_S8U8, DOT_BF16,
                                 VNNI_ROW_SUMS_S8, VNNI_ROW_SUMS_U8, OUTER_PRODUCT_F32_TAPS,
                                 OUTER_PRODUCT_F32_TAPS_S2, OUTER_PRODUCT_F32_TAPS_T,
                                 OUTER_PRODUCT_F32_TAPS_S2_T, OUTER_PRODUCT_F32_TAPS_NHWC,
                                 OUTER_PRODUCT_F32_TAPS_NHWC_S2,
                                 *NHWC_TAPS_ACC_BY_STRIDE.values(), AMX_SPLIT_F32,
                                 AMX_SPLIT_F32_ACC)}

#: the LLVM intrinsics each template calls: (name, return type, argument types)
LLVM_DECLARATIONS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    OUTER_PRODUCT_F32.name: (("llvm.fma.v16f32", "<16 x float>", ("<16 x float>",) * 3),
                             ("llvm.masked.load.v16f32.p0", "<16 x float>",
                              ("ptr", "<16 x i1>", "<16 x float>")),
                             ("llvm.masked.store.v16f32.p0", "void",
                              ("<16 x float>", "ptr", "<16 x i1>"))),
    VNNI_U8S8.name: (("llvm.x86.avx512.vpdpbusd.512", "<16 x i32>",
                      ("<16 x i32>", "<64 x i8>", "<64 x i8>")),),
    DOT_BF16.name: (("llvm.x86.avx512bf16.dpbf16ps.512", "<16 x float>",
                     ("<16 x float>", "<32 x bfloat>", "<32 x bfloat>")),),
    AMX_SPLIT_F32.name: (("llvm.memset.p0.i64", "void", ("ptr", "i8", "i64", "i1")),
                         ("llvm.x86.ldtilecfg", "void", ("ptr",)),
                         ("llvm.x86.tilerelease", "void", ()),
                         ("llvm.x86.tilezero", "void", ("i8",)),
                         ("llvm.x86.tileloadd64", "void", ("i8", "ptr", "i64")),
                         ("llvm.x86.tilestored64", "void", ("i8", "ptr", "i64")),
                         ("llvm.x86.tdpbf16ps", "void", ("i8", "i8", "i8"))),
}
LLVM_DECLARATIONS[VNNI_S8U8.name] = LLVM_DECLARATIONS[VNNI_U8S8.name]
LLVM_DECLARATIONS[AMX_SPLIT_F32_ACC.name] = LLVM_DECLARATIONS[AMX_SPLIT_F32.name]
LLVM_DECLARATIONS[VNNI_ROW_SUMS_S8.name] = LLVM_DECLARATIONS[VNNI_U8S8.name] + (
    ("llvm.masked.load.v64i8.p0", "<64 x i8>", ("ptr", "<64 x i1>", "<64 x i8>")),
    ("llvm.vector.reduce.add.v16i32", "i32", ("<16 x i32>",)))
LLVM_DECLARATIONS[VNNI_ROW_SUMS_U8.name] = LLVM_DECLARATIONS[VNNI_ROW_SUMS_S8.name]
for _variant in (OUTER_PRODUCT_F32_ROWS, OUTER_PRODUCT_F32_SET, OUTER_PRODUCT_F32_ROWS_SET,
                 OUTER_PRODUCT_F32_TAPS, OUTER_PRODUCT_F32_TAPS_S2, OUTER_PRODUCT_F32_TAPS_NHWC,
                 OUTER_PRODUCT_F32_TAPS_NHWC_S2, *NHWC_TAPS_ACC_BY_STRIDE.values()):
    LLVM_DECLARATIONS[_variant.name] = LLVM_DECLARATIONS[OUTER_PRODUCT_F32.name]
for _variant in TRANSPOSED_TAPS_BY_STRIDE.values():
    LLVM_DECLARATIONS[_variant.name] = LLVM_DECLARATIONS[OUTER_PRODUCT_F32.name] + (
        ("llvm.masked.store.v8f32.p0", "void", ("<8 x float>", "ptr", "<8 x i1>")),)

#: template variables beyond the parameters: which vpdpbusd operand the broadcast A is
_TEMPLATE_VARIABLES: dict[str, dict[str, bool]] = {
    VNNI_U8S8.name: {"A_UNSIGNED": True},
    VNNI_S8U8.name: {"A_UNSIGNED": False},
    AMX_SPLIT_F32.name: {"ACCUMULATE": False},
    AMX_SPLIT_F32_ACC.name: {"ACCUMULATE": True},
    VNNI_ROW_SUMS_S8.name: {"A_UNSIGNED": False},
    VNNI_ROW_SUMS_U8.name: {"A_UNSIGNED": True},
    OUTER_PRODUCT_F32.name: {"A_ROWS": False, "ZERO": False},
    OUTER_PRODUCT_F32_ROWS.name: {"A_ROWS": True, "ZERO": False},
    OUTER_PRODUCT_F32_SET.name: {"A_ROWS": False, "ZERO": True},
    OUTER_PRODUCT_F32_ROWS_SET.name: {"A_ROWS": True, "ZERO": True},
    OUTER_PRODUCT_F32_TAPS.name: {"SW": 1},
    OUTER_PRODUCT_F32_TAPS_S2.name: {"SW": 2},
    OUTER_PRODUCT_F32_TAPS_T.name: {"SW": 1},
    OUTER_PRODUCT_F32_TAPS_S2_T.name: {"SW": 2},
    OUTER_PRODUCT_F32_TAPS_NHWC.name: {"SW": 1, "ACCUMULATE": False},
    OUTER_PRODUCT_F32_TAPS_NHWC_S2.name: {"SW": 2, "ACCUMULATE": False},
    **{decl.name: {"SW": stride, "ACCUMULATE": True}
       for stride, decl in NHWC_TAPS_ACC_BY_STRIDE.items()}}

#: k steps per iteration of the template's k loop
UNROLL = 4


@dataclass(frozen=True)
class RegisterBlocking:
    """One solution of Eq. 3.4: an ``mi x ni`` tile of zmm accumulators, ``mii`` registers for
    broadcast A values, and its arithmetic intensity (FMAs per load/store)."""

    mi: int
    ni: int
    mii: int
    intensity: float


def register_blocking_candidates(registers: int = 32, ki: int = 256,
                                 max_ni: int = 8) -> list[RegisterBlocking]:
    """Every feasible ``(MI, NI, MII)`` of Eq. 3.4 with the smallest ``MII`` dividing ``MI``,
    best intensity first (ties: more accumulators, then fewer columns)."""
    found = []
    for ni in range(1, max_ni + 1):
        for mi in range(1, registers):
            mii = 1
            used = mi * ni + ni + mii
            if used > registers:
                break
            intensity = mi * ni * ki / (ki * (mi + ni) + 2 * mi * ni)
            found.append(RegisterBlocking(mi, ni, mii, round(intensity, 3)))
    return sorted(found, key=lambda b: (-b.intensity, -b.mi * b.ni, b.ni))


def register_blocking(registers: int = 32, ki: int = 256) -> RegisterBlocking:
    """The Eq. 3.4 optimum for ``registers`` vector registers and ``ki`` k steps per call."""
    return register_blocking_candidates(registers, ki)[0]


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("tilecraft_x86_avx512", "templates"),
                              undefined=jinja2.StrictUndefined, autoescape=False)


def render(name: str, params: Mapping[str, int], function: str) -> str:
    """LLVM IR of micro-kernel ``name`` with parameter values ``params`` (declared defaults
    for the rest) as the internal function ``function``.

    Raises :class:`CodegenError` naming the plugin, the template and the problem when the
    micro-kernel is unknown, a parameter is out of range or the template fails to render.
    """
    decl = MICRO_KERNELS.get(name)
    if decl is None:
        raise CodegenError(f"plugin x86_avx512 has no micro-kernel {name!r}; it provides "
                           f"{', '.join(MICRO_KERNELS)}")
    try:
        values = decl.resolve(dict(params))
    except Exception as err:  # TargetError from resolve
        raise CodegenError(f"plugin x86_avx512, micro-kernel {name}: {err}") from err
    if name in (AMX_SPLIT_F32.name, AMX_SPLIT_F32_ACC.name) and \
            values["KS"] * 32 != values["KK"]:
        raise CodegenError(f"plugin x86_avx512, micro-kernel {name}: KK = {values['KK']} must "
                           f"be KS = {values['KS']} times 32")
    if values.get("NR", 16) % 16:
        raise CodegenError(f"plugin x86_avx512, micro-kernel {name}: NR = {values['NR']} must be "
                           "a multiple of 16 (whole zmm vectors)")
    transposed = name in {d.name for d in TRANSPOSED_TAPS_BY_STRIDE.values()}
    if transposed or name in (OUTER_PRODUCT_F32.name, OUTER_PRODUCT_F32_ROWS.name,
                              OUTER_PRODUCT_F32_SET.name, OUTER_PRODUCT_F32_ROWS_SET.name,
                              OUTER_PRODUCT_F32_TAPS.name, OUTER_PRODUCT_F32_TAPS_S2.name,
                              *(decl.name for decl in NHWC_TAPS_BY_STRIDE.values()),
                              *(decl.name for decl in NHWC_TAPS_ACC_BY_STRIDE.values())):
        values["MV"] = params.get("MV", values["MI"])
        values["NC"] = params.get("NC", values["NR"])
        if values["MV"] > values["MI"] or values["NC"] > values["NR"]:
            raise CodegenError(f"plugin x86_avx512, micro-kernel {name}: the written part "
                               f"MV x NC = {values['MV']} x {values['NC']} must fit the register "
                               f"tile MI x NR = {values['MI']} x {values['NR']}")
    extra = dict(_TEMPLATE_VARIABLES.get(name, {}))
    if transposed:
        taps = values["KH"] * values["KW"]
        extra["TRANSPOSED_STORE"] = transposed_store_lines(
            values["MV"], values["NC"], lambda m, n: f"%acc{m}_{n}.t{taps}")
    try:
        template = _environment().get_template(decl.template.removeprefix("templates/"))
        return template.render(name=f'"{function}"', UNROLL=UNROLL,
                               attributes="alwaysinline nounwind", **values, **extra)
    except jinja2.TemplateError as err:
        raise CodegenError(f"plugin x86_avx512: micro-kernel {name}: template {decl.template} "
                           f"failed to render: {err}") from err


__all__ = ["AMX_SPLIT_F32", "AMX_SPLIT_F32_ACC",
           "DOT_BF16", "LLVM_DECLARATIONS", "MICRO_KERNELS", "OUTER_PRODUCT_F32",
           "OUTER_PRODUCT_F32_ROWS", "OUTER_PRODUCT_F32_ROWS_SET", "OUTER_PRODUCT_F32_SET",
           "OUTER_PRODUCT_F32_TAPS", "OUTER_PRODUCT_F32_TAPS_S2", "OUTER_PRODUCT_F32_TAPS_S2_T",
           "OUTER_PRODUCT_F32_TAPS_NHWC", "OUTER_PRODUCT_F32_TAPS_NHWC_S2", "NHWC_TAPS_BY_STRIDE",
           "NHWC_TAPS_ACC_BY_STRIDE",
           "OUTER_PRODUCT_F32_TAPS_T", "TAPS_BY_STRIDE", "TRANSPOSED_TAPS_BY_STRIDE",
           "SETTING_VARIANTS", "VNNI_ROW_SUMS_S8", "VNNI_ROW_SUMS_U8", "VNNI_S8U8",
           "VNNI_U8S8", "RegisterBlocking", "register_blocking",
           "register_blocking_candidates", "render"]
