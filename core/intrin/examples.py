"""Example intrinsic declarations for documentation, tests and benchmarks: the shapes of the
thesis's figures, written as any plugin would declare them. Target plugins carry their own,
authoritative declarations; these exist so that the core's matching can be shown and tested
without any plugin installed.

>>> mma = wmma(16, 16, 16)
>>> mma.compute.semantics
'Dst[i1, i2] += cast(float32, Src1[i1, r1]) * cast(float32, Src2[r1, i2])'
>>> [op.name for op in ascend_cube().compute.operands]
['A', 'B', 'C']
"""

from __future__ import annotations

from tilecraft.target.intrinsic import IntrinsicDecl


def _loop(name: str, extent: int, kind: str) -> dict[str, object]:
    return {"name": name, "extent": extent, "kind": kind}


def _operand(name: str, role: str, dtype: str, shape: list[int],
             index: list[str]) -> dict[str, object]:
    return {"name": name, "role": role, "dtype": dtype, "shape": shape, "index": index}


def _move(operand: str, source: str, target: str, instruction: str | None, base: str,
          strides: list[int | str]) -> dict[str, object]:
    return {"operand": operand, "from_level": source, "to_level": target,
            "instruction": instruction, "address": {"base": base, "strides": strides}}


def wmma(m: int = 16, n: int = 16, k: int = 16, in_dtype: str = "float16",
         acc_dtype: str = "float32") -> IntrinsicDecl:
    """Tensor Core ``mma_sync`` (Eq. 5.2) with its loads and store (Eq. 5.4):
    ``Dst[i1, i2] += Src1[i1, r1] * Src2[r1, i2]`` of shape m x n x k."""
    semantics = (f"Dst[i1, i2] += cast({acc_dtype}, Src1[i1, r1]) * "
                 f"cast({acc_dtype}, Src2[r1, i2])")
    return IntrinsicDecl(
        name=f"wmma_{m}x{n}x{k}",
        description="Tensor Core matrix multiply-accumulate on one warp's fragments",
        compute={
            "loops": [_loop("i1", m, "spatial"), _loop("i2", n, "spatial"),
                      _loop("r1", k, "reduce")],
            "operands": [_operand("Src1", "src", in_dtype, [m, k], ["i1", "r1"]),
                         _operand("Src2", "src", in_dtype, [k, n], ["r1", "i2"]),
                         _operand("Dst", "dst", acc_dtype, [m, n], ["i1", "i2"])],
            "semantics": semantics},
        memory={"moves": [
            _move("Src1", "shared", "fragment", "load_matrix_sync", "addr_a", ["stride_a", 1]),
            _move("Src2", "shared", "fragment", "load_matrix_sync", "addr_b", ["stride_b", 1]),
            _move("Dst", "fragment", "global", "store_matrix_sync", "addr_c",
                  ["stride_c", 1])]},
        latency_cycles=32, throughput_per_cycle=0.25)


def ascend_cube(fractals: int = 2, block: int = 16) -> IntrinsicDecl:
    """Ascend Cube ``mad`` on fractal (zZ / nZ) layouts:
    ``C[m1, n1, m2, n2] += A[m1, k1, m2, k2] * B[k1, n1, n2, k2]``, ``fractals`` blocks of
    ``block`` along each of M, N and K."""
    f, b = fractals, block
    return IntrinsicDecl(
        name=f"cube_mad_{f}x{b}",
        compute={
            "loops": [_loop("m1", f, "spatial"), _loop("n1", f, "spatial"),
                      _loop("m2", b, "spatial"), _loop("n2", b, "spatial"),
                      _loop("k1", f, "reduce"), _loop("k2", b, "reduce")],
            "operands": [_operand("A", "src", "float16", [f, f, b, b], ["m1", "k1", "m2", "k2"]),
                         _operand("B", "src", "float16", [f, f, b, b], ["k1", "n1", "n2", "k2"]),
                         _operand("C", "dst", "float32", [f, f, b, b], ["m1", "n1", "m2", "n2"])],
            "semantics": ("C[m1, n1, m2, n2] += cast(float32, A[m1, k1, m2, k2]) * "
                          "cast(float32, B[k1, n1, n2, k2])")},
        memory={"moves": [
            _move("A", "L1", "L0A", "load2d", "addr_a", [f * b * b, b * b, b, 1]),
            _move("B", "L1", "L0B", "load2d", "addr_b", [f * b * b, b * b, b, 1]),
            _move("C", "L0C", "UB", "data_move", "addr_c", [f * b * b, b * b, b, 1])]},
        latency_cycles=1, throughput_per_cycle=1.0)


def arm_dot() -> IntrinsicDecl:
    """Mali ``arm_dot_acc``: a 4-lane int8 dot product accumulated into an int32."""
    return IntrinsicDecl(
        name="arm_dot_acc",
        compute={
            "loops": [_loop("i", 1, "spatial"), _loop("r", 4, "reduce")],
            "operands": [_operand("a", "src", "int8", [4], ["r"]),
                         _operand("b", "src", "int8", [4], ["r"]),
                         _operand("acc", "dst", "int32", [1], ["i"])],
            "semantics": "acc[i] += cast(int32, a[r]) * cast(int32, b[r])"},
        memory={"moves": [
            _move("a", "global", "private", "vload4", "addr_a", [1]),
            _move("b", "global", "private", "vload4", "addr_b", [1]),
            _move("acc", "private", "global", None, "addr_c", [1])]},
        latency_cycles=4, throughput_per_cycle=1.0)


def vpdpbusd(lanes: int = 16) -> IntrinsicDecl:
    """x86 AVX-512 VNNI ``vpdpbusd``: per 32-bit lane, a dot product of 4 unsigned bytes with 4
    signed bytes, accumulated into the lane."""
    return IntrinsicDecl(
        name=f"vpdpbusd_{lanes}",
        compute={
            "loops": [_loop("i", lanes, "spatial"), _loop("r", 4, "reduce")],
            "operands": [_operand("a", "src", "uint8", [lanes, 4], ["i", "r"]),
                         _operand("b", "src", "int8", [lanes, 4], ["i", "r"]),
                         _operand("acc", "dst", "int32", [lanes], ["i"])],
            "semantics": "acc[i] += cast(int32, a[i, r]) * cast(int32, b[i, r])"},
        memory={"moves": [
            _move("a", "memory", "zmm", "vmovdqu8", "addr_a", [4, 1]),
            _move("b", "memory", "zmm", "vmovdqu8", "addr_b", [4, 1]),
            _move("acc", "zmm", "memory", "vmovdqu32", "addr_c", [1])]},
        latency_cycles=5, throughput_per_cycle=1.0)
