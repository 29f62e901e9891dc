"""Storing a register tile transposed, inside a micro-kernel: LLVM IR that writes the
accumulators of ``MV`` pixels by ``NC`` channels (one zmm per pixel and 16 channels) as
``C[channel, pixel]``, one row of up to 8 pixels per channel.

The direct convolution (blocking/direct_conv.py) computes pixels by channels, the output is
channels by pixels (NCHW). Stored as computed, the tile was transposed afterwards by a Kernel
IR loop reading each channel's pixels 64 floats apart (a gather per channel). Here each group
of 16 channels is transposed in registers, the ``MV`` pixel vectors padded to 8 with zeros:
three rounds of two-source shuffles (pairs of rows, then fours, then eights: 8 shuffles a
round) leave 8 vectors of two channels' 8 pixels each, and each channel's half is stored
with ``MV`` lanes. The shuffle masks come from tracking which (pixel, channel) each lane holds.

>>> lines = transposed_store_lines(6, 20, lambda m, n: f"%acc{m}_{n}")
>>> sum("<16 x i32>" in line for line in lines)   # 2 groups x 3 rounds x 8 shuffles
48
>>> sum("masked.store.v8f32" in line for line in lines)   # 16 + 4 channels, 6 lanes each
20
"""

from __future__ import annotations

from collections.abc import Callable

#: rows (pixels) a transposed group holds: one ymm half of a zmm
ROWS = 8
LANES = 16

Label = tuple[int, int]   # (pixel, channel within the group)


def _mask(indices: list[int]) -> str:
    return "<" + ", ".join(f"i32 {i}" for i in indices) + ">"


def _shuffle(lines: list[str], out: str, a: tuple[str, list[Label]], b: tuple[str, list[Label]],
             want: list[Label]) -> tuple[str, list[Label]]:
    """``out = shufflevector a, b`` picking the lanes that hold ``want``, in order."""
    both = a[1] + b[1]
    mask = [both.index(label) for label in want]
    lines.append(f"  {out} = shufflevector <16 x float> {a[0]}, <16 x float> {b[0]}, "
                 f"<16 x i32> {_mask(mask)}")
    return out, want


def transposed_store_lines(mv: int, nc: int, accumulator: Callable[[int, int], str]
                           ) -> list[str]:
    """The IR lines storing the tile ``accumulator(m, n)`` (pixel ``m < mv``, channel vector
    ``n``) at ``C[n * 16 + j, m]`` for every channel ``n * 16 + j < nc``: ``%c`` the base
    pointer, ``%c.s0`` its row stride (module docstring). ``mv`` is at most 8."""
    if not 1 <= mv <= ROWS:
        raise ValueError(f"a transposed tile holds 1 to {ROWS} pixels, not {mv}")
    lines: list[str] = []
    for n in range(-(-nc // LANES)):
        p = f"%tr{n}"
        rows = [((accumulator(m, n) if m < mv else "zeroinitializer"),
                 [(m, j) for j in range(LANES)]) for m in range(ROWS)]
        # round 1: rows 2p, 2p+1 interleaved, channels 0-7 and 8-15
        pairs = {}
        for q in range(ROWS // 2):
            for h in range(2):
                want = [(2 * q + e, 8 * h + i) for i in range(8) for e in range(2)]
                pairs[q, h] = _shuffle(lines, f"{p}.a{q}_{h}", rows[2 * q], rows[2 * q + 1],
                                       want)
        # round 2: fours of rows, channels in runs of 4
        fours = {}
        for q in range(2):
            for h in range(2):
                for g in range(2):
                    want = [(4 * q + e, 8 * h + 4 * g + i) for i in range(4) for e in range(4)]
                    fours[q, h, g] = _shuffle(lines, f"{p}.b{q}_{h}_{g}", pairs[2 * q, h],
                                              pairs[2 * q + 1, h], want)
        # round 3: all 8 rows, two channels per vector
        for h in range(2):
            for g in range(2):
                for z in range(2):
                    first = 8 * h + 4 * g + 2 * z
                    want = [(e, first + i) for i in range(2) for e in range(ROWS)]
                    name, _ = _shuffle(lines, f"{p}.c{h}_{g}_{z}", fours[0, h, g],
                                       fours[1, h, g], want)
                    for i in range(2):
                        channel = n * LANES + first + i
                        if channel < nc:
                            lines.extend(_store_row(f"{p}.r{first + i}", name, i, channel, mv))
    return lines


def _store_row(prefix: str, vector: str, half: int, channel: int, mv: int) -> list[str]:
    lanes = list(range(half * ROWS, half * ROWS + ROWS))
    lines = [f"  {prefix}.v = shufflevector <16 x float> {vector}, <16 x float> poison, "
             f"<8 x i32> {_mask(lanes)}",
             f"  {prefix}.o = mul i64 %c.s0, {channel}",
             f"  {prefix}.p = getelementptr float, ptr %c, i64 {prefix}.o"]
    if mv == ROWS:
        lines.append(f"  store <8 x float> {prefix}.v, ptr {prefix}.p, align 4")
    else:
        mask = "<" + ", ".join(f"i1 {'true' if lane < mv else 'false'}"
                               for lane in range(ROWS)) + ">"
        lines.append(f'  call void @"llvm.masked.store.v8f32.p0"(<8 x float> {prefix}.v, '
                     f"ptr align 4 {prefix}.p, <8 x i1> {mask})")
    return lines


__all__ = ["ROWS", "transposed_store_lines"]
