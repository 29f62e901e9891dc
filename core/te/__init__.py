"""The tensor-expression DSL (thesis §2.5.1, Def. 1).

>>> from tilecraft import te
>>> A = te.placeholder((3, 5), "float32", name="A")
>>> B = te.compute((3, 5), lambda i, j: te.max(A[i, j], 0.0), name="B")
>>> print(B.statement())
B[i, j] = max(A[i, j], 0.0)
"""

from tilecraft.te.bitwise import (
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    left_shift,
    right_shift,
)
from tilecraft.te.expr import (
    AxisKind,
    Binary,
    BinaryOp,
    Cast,
    Compare,
    CompareOp,
    Const,
    Expr,
    IterVar,
    Load,
    Logical,
    LogicalOp,
    Not,
    Reduce,
    ReduceOp,
    Select,
    Unary,
    UnaryOp,
    Var,
    as_expr,
    cast,
    const,
    select,
)
from tilecraft.te.functions import (
    abs,
    acos,
    acosh,
    all_of,
    asin,
    asinh,
    atan,
    atanh,
    ceil,
    cos,
    cosh,
    eq,
    erf,
    exp,
    floor,
    log,
    max,
    maximum,
    min,
    minimum,
    ne,
    neg,
    prod,
    round_even,
    sigmoid,
    sin,
    sinh,
    sqrt,
    sum,
    tan,
    tanh,
)
from tilecraft.te.tensor import (
    ComputeOp,
    ConstantOp,
    PlaceholderOp,
    Tensor,
    compute,
    constant,
    placeholder,
    reduce_axis,
)

__all__ = [
    "AxisKind", "Binary", "BinaryOp", "Cast", "Compare", "CompareOp", "ComputeOp", "Const",
    "ConstantOp", "constant",
    "Expr", "IterVar", "Load", "Logical", "LogicalOp", "Not", "PlaceholderOp", "Reduce",
    "ReduceOp", "Select", "Tensor", "Unary", "UnaryOp", "Var", "abs", "all_of", "as_expr",
    "cast", "compute", "const", "eq", "erf", "exp", "log", "max", "maximum", "min", "minimum",
    "ne", "neg", "placeholder", "prod", "reduce_axis", "select", "sigmoid", "sqrt", "sum", "tanh",
    "ceil", "floor", "round_even", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
    "asinh", "acosh", "atanh", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "left_shift", "right_shift",
]
