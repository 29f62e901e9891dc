"""What one hardware operator costs in an HLS design on UltraScale+ fabric at 200-300 MHz:
its latency in cycles and its DSP48E2 / LUT / flip-flop use — the table the model sums.

Sources, and how rough each figure is: floating-point operators are Vitis HLS's default cores
(the Floating-Point Operator, AMD PG060, "full DSP usage" configurations; latencies as Vitis
HLS schedules them at 250 MHz on UltraScale+, rounded); the math functions are Vitis HLS's
math library (resource figures from its synthesis reports, rounded to the nearest hundred);
8-bit multipliers share a DSP48E2 two at a time (AMD WP486, see :mod:`..resources`); integer
adders and comparators are carry chains of one LUT per bit. LUT / FF figures are estimates to
within a factor of about two; the DSP counts are those the data sheets give.

>>> OPERATORS[("add", "float32")].dsp, OPERATORS[("mul", "float32")].latency
(2, 3)
>>> operator_cost("mul", DType.INT8).dsp
0.5
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.dtypes import DType

__all__ = ["OPERATORS", "OperatorCost", "operator_cost"]


@dataclass(frozen=True)
class OperatorCost:
    """Latency (cycles) and resources of one operator instance."""

    latency: int
    dsp: float = 0.0
    lut: int = 0
    ff: int = 0


#: (operator, class) -> cost; class is a float dtype's name, or "int8" / "int32" for integers
OPERATORS: dict[tuple[str, str], OperatorCost] = {
    ("add", "float32"): OperatorCost(4, 2, 200, 350),
    ("mul", "float32"): OperatorCost(3, 3, 80, 150),
    ("div", "float32"): OperatorCost(12, 0, 800, 1400),
    ("cmp", "float32"): OperatorCost(1, 0, 70, 60),
    ("exp", "float32"): OperatorCost(10, 7, 900, 1000),
    ("log", "float32"): OperatorCost(12, 10, 1300, 1300),
    ("sqrt", "float32"): OperatorCost(12, 0, 500, 800),
    ("transcendental", "float32"): OperatorCost(20, 10, 2000, 2000),  # tanh, erf, sigmoid
    ("cast", "float32"): OperatorCost(3, 0, 250, 250),
    ("add", "float16"): OperatorCost(3, 1, 100, 150),
    ("mul", "float16"): OperatorCost(2, 1, 50, 80),
    ("div", "float16"): OperatorCost(8, 0, 400, 600),
    ("cmp", "float16"): OperatorCost(1, 0, 40, 30),
    ("add", "int8"): OperatorCost(1, 0, 8, 8),
    ("mul", "int8"): OperatorCost(2, 0.5, 10, 20),
    ("cmp", "int8"): OperatorCost(1, 0, 8, 2),
    ("add", "int32"): OperatorCost(1, 0, 32, 32),
    ("mul", "int32"): OperatorCost(3, 3, 40, 60),
    ("div", "int32"): OperatorCost(36, 0, 1000, 1200),
    ("cmp", "int32"): OperatorCost(1, 0, 32, 2),
    # and / or / xor: one LUT per bit; a shift by a run-time amount: a barrel shifter of
    # log2(bits) 2:1 multiplexer levels (the out-of-range test and select on top), one cycle
    ("bitwise", "int8"): OperatorCost(1, 0, 8, 8),
    ("bitwise", "int32"): OperatorCost(1, 0, 32, 32),
    ("shift", "int8"): OperatorCost(1, 0, 16, 8),
    ("shift", "int32"): OperatorCost(1, 0, 96, 32),
}


def _type_class(dtype: DType) -> str:
    if dtype is DType.FLOAT16:
        return "float16"
    if dtype.is_float:
        return "float32"
    return "int8" if dtype.bits <= 8 else "int32"


def operator_cost(operator: str, dtype: DType) -> OperatorCost:
    """The cost of ``operator`` on ``dtype`` values (a float16 math function costs its float32
    form: HLS computes it there)."""
    kind = _type_class(dtype)
    found = OPERATORS.get((operator, kind)) or OPERATORS.get((operator, "float32"))
    return found if found is not None else OPERATORS[("transcendental", "float32")]
