"""PTX ``mma.sync.aligned.m16n8k16`` in CUDA C: the second lowering of the Tensor Core mappings
(the first is WMMA, :mod:`.wmma`), with the instruction as inline PTX.

A register buffer of a kernel is an mma.sync fragment when it is an operand of an
``IntrinsicCall`` of an mma.sync-form intrinsic of the spec
(:func:`tilecraft_nvidia_tc.tensor_cores.mma_sync_shape`). In Kernel IR every thread holds the
whole tile; in CUDA each lane of the warp holds its part, in 32-bit registers, as the PTX ISA
lays the fragments out ("Matrix Fragments for mma.m16n8k16"): with ``g = lane >> 2`` and
``q = lane & 3``,

- A (16 x 16, row): 16-bit types in 4 registers, element ``i`` (2 per register, low first) at
  row ``g + 8 * ((i >> 1) & 1)``, column ``2q + (i & 1) + 8 * (i >= 4)``; int8 in 2
  registers, element ``i`` (4 per register) at row ``g + 8 * (i >= 4)``, column
  ``4q + (i & 3)``;
- B (16 x 8, col): 16-bit types in 2 registers, element ``i`` at row
  ``2q + (i & 1) + 8 * (i >= 2)``, column ``g``; int8 in 1 register, row ``4q + i``,
  column ``g``;
- C / D (16 x 8, f32 or s32): 4 registers, element ``i`` at row ``g + 8 * (i >> 1)``,
  column ``2q + (i & 1)``; f16: the same elements packed two per register (f16x2).

The generated unit defines the helpers (:func:`helpers`) that gather a lane's registers from
a row-major tile in shared memory — ``ldmatrix.sync.aligned.m8n8`` (``.x4`` for a 16-bit A,
``.x2.trans`` for a 16-bit B, ``.x2`` for an int8 A; per-lane byte loads for an int8 B, which
ldmatrix cannot transpose) — and scatter its accumulator back, and one function per
intrinsic whose body is the ``asm volatile("mma.sync.aligned.m16n8k16.row.col...")`` a user
would ship, under ``__CUDA_ARCH__``; compiled for the host under
``TILECRAFT_CUDA_EMULATION`` the ldmatrix and mma functions call the emulation header's
``tc_emu::ldmatrix`` and ``tc_emu::mma_m16n8k16`` instead, warp collectives with the same
per-lane register semantics. So:

- ``Allocate`` of a fragment: ``unsigned a[4] = {};`` (an accumulator ``float d[4] = {};``);
- ``Copy`` of a whole tile from shared (or global) rows into a fragment:
  ``tc_mma_load_a_b16(a, &A_s[..], ldm)`` and the like; from an accumulator into rows:
  ``tc_mma_store_d(&C_s[..], ldm, d)``;
- the ``IntrinsicCall``: ``tc_mma_m16n8k16_f32_bf16(d, a, b)`` (D = A x B + D).

Every other shape or type is refused by name.

>>> from tilecraft.dtypes import DType
>>> f = Fragment("matrix_a", 16, 8, 16, DType.INT8, form="mma_sync")
>>> declaration(f, "a_frag0"), registers(f)
('unsigned a_frag0[2] = {};', 2)
"""

from __future__ import annotations

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft_nvidia_tc.codegen.wmma import Fragment

__all__ = ["declaration", "gather", "helpers", "load_call", "mma_call", "mma_dims",
           "padded_row", "registers", "shared_wavefronts", "store_call"]

SHAPE = (16, 8, 16)
#: the PTX type of each element dtype
PTX_TYPES = {DType.FLOAT16: "f16", DType.BFLOAT16: "bf16", DType.INT8: "s8",
             DType.FLOAT32: "f32", DType.INT32: "s32"}
#: the (input, accumulator) dtypes this lowering takes
VARIANTS = {(DType.FLOAT16, DType.FLOAT32), (DType.BFLOAT16, DType.FLOAT32),
            (DType.INT8, DType.INT32), (DType.FLOAT16, DType.FLOAT16)}
#: the emulation header's name of each input type
EMULATION_INPUTS = {DType.FLOAT16: "F16", DType.BFLOAT16: "BF16", DType.INT8: "S8"}
#: a lane's accumulator registers: 4 floats or ints, or 2 of packed halves (f16x2)
ACCUMULATOR_TYPES = {DType.FLOAT32: "float", DType.INT32: "int", DType.FLOAT16: "unsigned"}


def mma_dims(decl: IntrinsicDecl) -> tuple[int, int, int] | None:
    """``(M, N, K)`` of an mma.sync-form intrinsic, ``None`` for any other."""
    from tilecraft_nvidia_tc.tensor_cores import mma_sync_shape

    shape = mma_sync_shape(decl)
    if shape is None:
        return None
    extents = {loop.name: loop.extent for loop in decl.compute.loops}
    return extents[shape[0]], extents[shape[1]], extents[shape[2]]


BANKS = 32
WORD_BYTES = 4
#: row paddings tried for a tile the lanes gather from (16-byte steps keep cp.async rows aligned)
PADDINGS_BYTES = (16, 32, 48, 64)


def gather(use: str, element_bytes: int, ldm: int) -> list[list[tuple[int, int]]]:
    """The warp-wide shared-memory accesses of one fragment's gather (``matrix_a``,
    ``matrix_b``) or scatter (``accumulator``) by the helpers of :func:`helpers`, from a tile
    with rows of ``ldm`` elements: per instruction, each lane's (byte offset, bytes).

    >>> [len(i) for i in gather("matrix_a", 2, 24)], gather("matrix_b", 1, 24)[1][5]
    ([32, 32, 32, 32], (121, 1))
    >>> gather("matrix_b", 2, 24)[1][:2]   # ldmatrix.x2.trans: matrix 1 = rows 8-15
    [(384, 4), (388, 4)]
    """
    lanes = [(lane >> 2, lane & 3) for lane in range(32)]
    b = element_bytes
    if use == "accumulator":  # one store per element
        return [[(((g + 8 * (i >> 1)) * ldm + 2 * q + (i & 1)) * b, b) for g, q in lanes]
                for i in range(4)]

    def ldmatrix(rows: list[int], column: int) -> list[tuple[int, int]]:
        """One 8x8 matrix of ldmatrix: eight 16-byte rows, as 4-byte words."""
        return [((row * ldm + column) * b + 4 * w, 4) for row in rows for w in range(4)]

    if use == "matrix_a" and b == 2:  # ldmatrix.x4: rows 0-7 / 8-15 x columns 0-7 / 8-15
        return [ldmatrix([8 * (j & 1) + r for r in range(8)], 8 * (j >> 1)) for j in range(4)]
    if b == 2 or use == "matrix_a":  # ldmatrix.x2 (.trans for B): rows 0-7 / 8-15
        return [ldmatrix([8 * j + r for r in range(8)], 0) for j in range(2)]
    return [[((4 * q + e) * ldm + g, 1) for g, q in lanes] for e in range(4)]


def shared_wavefronts(use: str, element_bytes: int, ldm: int) -> int:
    """Shared-memory wavefronts of :func:`gather`: per instruction, the most distinct 4-byte
    words any bank is asked for (lanes reading one word share it)."""
    total = 0
    for instruction in gather(use, element_bytes, ldm):
        words: dict[int, set[int]] = {}
        for offset, _ in instruction:
            word = offset // WORD_BYTES
            words.setdefault(word % BANKS, set()).add(word)
        total += max(len(bank) for bank in words.values())
    return total


def padded_row(use: str, elements: int, element_bytes: int) -> int:
    """Elements per row of a shared tile that fragments of ``use`` are gathered from (or
    scattered into): ``elements`` plus the padding in :data:`PADDINGS_BYTES` with the fewest
    bank conflicts (the smallest of equals).

    >>> padded_row("matrix_b", 8, 2), padded_row("matrix_a", 16, 1)
    (24, 48)
    """
    gathered = element_bytes
    # the accumulator's tile is read back element by element, never with cp.async: any
    # 4-byte step will do there
    paddings = range(4, 68, 4) if use == "accumulator" else PADDINGS_BYTES
    return min((elements + pad // element_bytes for pad in paddings
                if pad % element_bytes == 0),
               key=lambda ldm: (shared_wavefronts(use, gathered, ldm), ldm))


def registers(fragment: Fragment) -> int:
    """32-bit registers of one lane for ``fragment``."""
    return fragment.rows * fragment.columns * fragment.dtype.bytes // 4 // 32


def declaration(fragment: Fragment, name: str) -> str:
    """The lane's register array of ``fragment``, zero (Kernel IR allocations start at zero)."""
    ctype = ACCUMULATOR_TYPES[fragment.dtype] if fragment.use == "accumulator" else "unsigned"
    return f"{ctype} {name}[{registers(fragment)}] = {{}};"


def _suffix(dtype: DType) -> str:
    return "b8" if dtype.bytes == 1 else "b16"


def load_call(fragment: Fragment, name: str, pointer: str, ldm: int) -> str:
    """The per-lane gather of ``fragment`` from the row-major tile at ``pointer``."""
    which = "a" if fragment.use == "matrix_a" else "b"
    return f"tc_mma_load_{which}_{_suffix(fragment.dtype)}({name}, {pointer}, {ldm});"


def store_call(fragment: Fragment, name: str, pointer: str, ldm: int) -> str:
    """The per-lane scatter of an accumulator into the row-major tile at ``pointer``."""
    packed = "_b16" if fragment.dtype.bytes == 2 else ""
    return f"tc_mma_store_d{packed}({pointer}, {ldm}, {name});"


def function_name(inputs: DType, accumulator: DType) -> str:
    return f"tc_mma_m16n8k16_{PTX_TYPES[accumulator]}_{PTX_TYPES[inputs]}"


def check(fragments: tuple[Fragment, Fragment, Fragment], what: str) -> None:
    """A CodegenError unless the fragments are an m16n8k16 this lowering emits."""
    a, b, d = fragments
    if (a.m, a.n, a.k) != SHAPE or a.dtype != b.dtype or (a.dtype, d.dtype) not in VARIANTS:
        raise CodegenError(
            f"{what}: mma.sync m{a.m}n{a.n}k{a.k} with {a.dtype.value} inputs and a "
            f"{d.dtype.value} accumulator; the inline-PTX lowering emits m16n8k16 with "
            "float16 -> float32 / float16, bfloat16 -> float32 and int8 -> int32 only: map "
            "onto a WMMA intrinsic for the others")


def mma_call(fragments: tuple[Fragment, Fragment, Fragment], names: tuple[str, str, str]
             ) -> str:
    a, _, d = fragments
    return f"{function_name(a.dtype, d.dtype)}({names[2]}, {names[0]}, {names[1]});"


def _mma_function(inputs: DType, accumulator: DType) -> list[str]:
    a_regs = 16 * 16 * inputs.bytes // 128
    b_regs = 16 * 8 * inputs.bytes // 128
    ctype = ACCUMULATOR_TYPES[accumulator]
    d_regs = 16 * 8 * accumulator.bytes // 128
    constraint = "f" if accumulator is DType.FLOAT32 else "r"
    d_list = ", ".join(f"%{i}" for i in range(d_regs))
    a_list = ", ".join(f"%{d_regs + i}" for i in range(a_regs))
    b_list = ", ".join(f"%{d_regs + a_regs + i}" for i in range(b_regs))
    instruction = (f"mma.sync.aligned.m16n8k16.row.col.{PTX_TYPES[accumulator]}."
                   f"{PTX_TYPES[inputs]}.{PTX_TYPES[inputs]}.{PTX_TYPES[accumulator]}")
    outputs = ", ".join(f'"+{constraint}"(d[{i}])' for i in range(d_regs))
    sources = ", ".join([f'"r"(a[{i}])' for i in range(a_regs)]
                        + [f'"r"(b[{i}])' for i in range(b_regs)])
    name = function_name(inputs, accumulator)
    return [
        f"static __device__ __forceinline__ void {name}({ctype} (&d)[{d_regs}], "
        f"const unsigned (&a)[{a_regs}], const unsigned (&b)[{b_regs}]) {{",
        "#if defined(__CUDA_ARCH__)",
        f'  asm volatile("{instruction} {{{d_list}}}, {{{a_list}}}, {{{b_list}}}, '
        f'{{{d_list}}};\\n"',
        f"               : {outputs}",
        f"               : {sources});",
        "#elif defined(TILECRAFT_CUDA_EMULATION)",
        f"  tc_emu::mma_m16n8k16<tc_emu::MmaInput::{EMULATION_INPUTS[inputs]}>(d, a, b);",
        "#endif",
        "}",
    ]


def helpers(variants: set[tuple[DType, DType]]) -> list[str]:
    """The device functions a unit calling the mma.sync ``variants`` (input, accumulator
    dtypes) needs: the per-lane loads and store (module docstring) and one inline-PTX
    function per variant."""
    if not variants:
        return []
    from importlib.resources import files

    text = (files("tilecraft_nvidia_tc") / "templates" / "mma_sync.cu.jinja").read_text()
    lines = text.splitlines()
    for inputs, accumulator in sorted(variants, key=lambda v: (v[0].value, v[1].value)):
        lines.extend(_mma_function(inputs, accumulator))
    return lines
