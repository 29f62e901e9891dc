"""te expressions to LLVM values, scalar or lane-parallel.

Two evaluation modes:

- :meth:`ExprEmitter.value` computes an expression in the compute type of its dtype, with the
  IR's semantics (integers wrap in their width, ``//`` and ``%`` floor, division by zero gives
  0, float max/min are ``llvm.maximum``/``minimum``: a NaN operand gives NaN, as numpy's
  ``np.maximum``/``np.minimum`` and the reference interpreter; ``nsz``: max(-0.0, 0.0) may be
  either zero, which spares a blend per vector);
- :meth:`ExprEmitter.index` computes an int32 index expression in i64 (no wrap-around in
  address arithmetic; adds and multiplies carry ``nsw`` so LLVM can reason about strides).

Inside a vector loop the loop variable is a vector (``base + <0, 1, ...>``) and every value that
depends on it becomes a ``<lanes x T>`` vector; values that do not stay scalar and are broadcast
where they meet a vector.
"""

from __future__ import annotations

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import BufferLoad
from tilecraft.te.expr import (
    INVERSE_HYPERBOLIC_UNARY,
    SHIFT_BINARY,
    TRIGONOMETRIC_UNARY,
    Binary,
    BinaryOp,
    Cast,
    Compare,
    CompareOp,
    Const,
    Expr,
    Logical,
    LogicalOp,
    Not,
    ReduceOp,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from tilecraft_x86_avx512.codegen import convert
from tilecraft_x86_avx512.codegen.builder import Value
from tilecraft_x86_avx512.codegen.context import EmitContext
from tilecraft_x86_avx512.codegen.mathlib import HELPER_OPS, call_math
from tilecraft_x86_avx512.codegen.memory import MemoryEmitter
from tilecraft_x86_avx512.codegen.types import INDEX, compute_type, literal, mangle

_FLOAT_OPS = {BinaryOp.ADD: "fadd", BinaryOp.SUB: "fsub", BinaryOp.MUL: "fmul",
              BinaryOp.DIV: "fdiv"}
_INT_OPS = {BinaryOp.ADD: "add", BinaryOp.SUB: "sub", BinaryOp.MUL: "mul"}
#: and, or, xor: exact on the sign-extended i64 of an index as on the i32 itself
_BITWISE_OPS = {BinaryOp.BITWISE_AND: "and", BinaryOp.BITWISE_OR: "or",
                BinaryOp.BITWISE_XOR: "xor"}
_FLOAT_PREDICATES = {CompareOp.LT: "olt", CompareOp.LE: "ole", CompareOp.GT: "ogt",
                     CompareOp.GE: "oge", CompareOp.EQ: "oeq", CompareOp.NE: "une"}
_INT_PREDICATES = {CompareOp.LT: "lt", CompareOp.LE: "le", CompareOp.GT: "gt",
                   CompareOp.GE: "ge"}


#: unary ops as LLVM intrinsics: the rounding ones (roundeven: halves to even, numpy's rint)
#: one vrndscaleps a vector; the trigonometric and hyperbolic ones, which LLVM's x86 back end
#: expands into libm calls lane by lane (sinf ... coshf: accurate, not vectorised)
_INTRINSICS = {UnaryOp.FLOOR: "floor", UnaryOp.CEIL: "ceil", UnaryOp.ROUND: "roundeven",
               **{op: op.value for op in TRIGONOMETRIC_UNARY}}
#: unary ops LLVM has no intrinsic for, as the libm functions called lane by lane: accurate
#: where the log / sqrt formulas cancel (in float32, log(x + sqrt(x*x + 1)) is 1e-4 off
#: asinh(1e-4) relatively, 5e-2 off asinh(1e-6)). The JIT resolves them in the process, as it
#: does the sinf ... coshf LLVM expands its trigonometric intrinsics into; exported libraries
#: link -lm (build.link_shared_library)
_LIBM = {op: f"{op.value}f" for op in INVERSE_HYPERBOLIC_UNARY}   # asinhf, acoshf, atanhf

class ExprEmitter:
    """Emits te expressions (with :class:`BufferLoad`) into the context's function."""

    def __init__(self, ctx: EmitContext) -> None:
        self.ctx = ctx
        self.fb = ctx.fb
        self.memory = MemoryEmitter(ctx, self)

    # value mode ------------------------------------------------------------------------------
    def value(self, expr: Expr) -> Value:
        """``expr`` in its compute type."""
        if isinstance(expr, Const):
            return Value(literal(expr.value, expr.dtype), compute_type(expr.dtype))
        if isinstance(expr, Var):
            return self.fb.convert("trunc", self.variable(expr), compute_type(expr.dtype))
        if isinstance(expr, Binary):
            return self.binary(expr.op, self.value(expr.a), self.value(expr.b), expr.a.dtype)
        if isinstance(expr, Unary):
            return self.unary(expr.op, self.value(expr.x), expr.x.dtype)
        if isinstance(expr, Compare):
            return self.compare(expr.op, self.value(expr.a), self.value(expr.b), expr.a.dtype)
        if isinstance(expr, Logical):
            op = "and" if expr.op is LogicalOp.AND else "or"
            return self.fb.binop(op, self.value(expr.a), self.value(expr.b))
        if isinstance(expr, Not):
            return self.fb.binop("xor", self.value(expr.x), Value("true", "i1"))
        if isinstance(expr, Select):
            cond = self.value(expr.cond)
            return self.fb.select(cond, self.value(expr.true_value),
                                  self.value(expr.false_value))
        if isinstance(expr, Cast):
            return convert.cast(self.fb, self.value(expr.x), expr.x.dtype, expr.to)
        if isinstance(expr, BufferLoad):
            return self.memory.load(expr.buffer, expr.indices)
        raise self.ctx.error(f"cannot generate the expression {expr} ({type(expr).__name__})")

    def variable(self, var: Var) -> Value:
        """A loop variable as i64 (a vector of lane indices for the vector loop's variable)."""
        vector = self.ctx.vector
        if vector is not None and var == vector.var:
            return vector.base if vector.scalar_lane else vector.lane_index
        if var not in self.ctx.env:
            raise self.ctx.error(f"the variable {var.name!r} is used outside any loop that "
                                 "binds it; every index variable must be a loop variable")
        return self.ctx.env[var]

    # index mode ------------------------------------------------------------------------------
    def index(self, expr: Expr) -> Value:
        """An integer expression in i64 (int32 arithmetic is widened, never wraps)."""
        if not (expr.dtype.is_int or expr.dtype is DType.BOOL):
            raise self.ctx.error(f"the index {expr} has dtype {expr.dtype}; indices must be "
                                 "integers: cast with .astype('int32')")
        if isinstance(expr, Const):
            return Value(str(int(expr.value)), INDEX)
        if isinstance(expr, Var):
            return self.variable(expr)
        # a shift is computed in i32 (its out-of-range rule and wrap-around depend on the width)
        if isinstance(expr, Binary) and expr.dtype is DType.INT32 \
                and expr.op not in SHIFT_BINARY:
            a, b = self.index(expr.a), self.index(expr.b)
            if expr.op in _INT_OPS:
                return self.fb.binop(_INT_OPS[expr.op], a, b, "nsw")
            return self.int_binary(expr.op, a, b, signed=True)
        if isinstance(expr, Select) and expr.dtype is DType.INT32:
            cond = self.value(expr.cond)
            return self.fb.select(cond, self.index(expr.true_value),
                                  self.index(expr.false_value))
        value = self.value(expr)
        signed = expr.dtype.is_signed and expr.dtype is not DType.BOOL
        return self.fb.convert("sext" if signed else "zext", value, INDEX)

    # operators -------------------------------------------------------------------------------
    def intrinsic(self, name: str, *args: Value, flags: str = "") -> Value:
        """``llvm.<name>`` overloaded on the (broadcast) type of its arguments."""
        lanes = max(arg.lanes for arg in args)
        wide = [self.fb.broadcast(arg, lanes) for arg in args]
        return self.fb.call(f"llvm.{name}.{mangle(wide[0].elem, lanes)}", wide[0].elem, wide,
                            lanes, flags)

    def binary(self, op: BinaryOp, a: Value, b: Value, dtype: DType) -> Value:
        if dtype.is_float:
            if op in _FLOAT_OPS:
                flags = "contract" if self.ctx.options.fp_contract else ""
                return self.fb.binop(_FLOAT_OPS[op], a, b, flags)
            if op is BinaryOp.MAX:  # not maxnum: it drops NaN (relu(NaN) gave 0, numpy NaN)
                return self.intrinsic("maximum", a, b, flags="nsz")
            if op is BinaryOp.MIN:
                return self.intrinsic("minimum", a, b, flags="nsz")
            raise self.ctx.error(f"'{op.value}' is not defined on {dtype} values; use integers")
        if dtype is DType.BOOL:
            raise self.ctx.error(f"'{op.value}' on conditions; use & | ~")
        if op is BinaryOp.DIV:
            raise self.ctx.error("'/' on integers; use // (floor division)")
        if op in _INT_OPS:
            return self.fb.binop(_INT_OPS[op], a, b)
        if op in SHIFT_BINARY:
            return self.shift(op, a, b, dtype)
        return self.int_binary(op, a, b, signed=dtype.is_signed)

    def int_binary(self, op: BinaryOp, a: Value, b: Value, signed: bool) -> Value:
        """max, min, floor division and floor modulo of integers (any width)."""
        if op in (BinaryOp.MAX, BinaryOp.MIN):
            name = ("s" if signed else "u") + ("max" if op is BinaryOp.MAX else "min")
            return self.intrinsic(name, a, b)
        if op in (BinaryOp.FLOORDIV, BinaryOp.MOD):
            return self.floor_divmod(a, b, signed, modulo=op is BinaryOp.MOD)
        if op in _INT_OPS:
            return self.fb.binop(_INT_OPS[op], a, b)
        if op in _BITWISE_OPS:
            return self.fb.binop(_BITWISE_OPS[op], a, b)
        raise self.ctx.error(f"'{op.value}' is not defined on integers")

    def shift(self, op: BinaryOp, a: Value, b: Value, dtype: DType) -> Value:
        """``a << b`` or ``a >> b`` of ``dtype`` values as te defines them (ONNX BitShift,
        :mod:`tilecraft.reference.bitwise`). LLVM's ``shl`` / ``lshr`` / ``ashr`` give poison
        for an amount of the width or more (and a negative amount is such an amount unsigned),
        so the amount is clamped into range first: right shifts of a signed type by
        ``bits - 1`` (the sign fills, as the reference's -1 / 0), the others by 0 and then
        replaced by 0. For int32 vectors LLVM folds the clamps into AVX-512's ``vpsllvd`` /
        ``vpsravd`` (which saturate the amount the same way): one instruction a vector."""
        fb = self.fb
        in_range = fb.compare("icmp", "ult", b, Value(str(dtype.bits), b.elem))
        if op is BinaryOp.SHIFT_RIGHT and dtype.is_signed:
            amount = fb.select(in_range, b, Value(str(dtype.bits - 1), b.elem))
            return fb.binop("ashr", a, amount)
        amount = fb.select(in_range, b, Value("0", b.elem))
        shifted = fb.binop("shl" if op is BinaryOp.SHIFT_LEFT else "lshr", a, amount)
        return fb.select(in_range, shifted, Value("0", a.elem))

    def floor_divmod(self, a: Value, b: Value, signed: bool, modulo: bool) -> Value:
        """Python-style ``a // b`` or ``a % b``; by zero gives 0, ``MIN // -1`` wraps to MIN
        (numpy's results) instead of trapping."""
        fb = self.fb
        zero, one = Value("0", a.elem), Value("1", a.elem)
        b_zero = fb.compare("icmp", "eq", b, zero)
        if not signed:
            safe = fb.select(b_zero, one, b)
            result = fb.binop("urem" if modulo else "udiv", a, safe)
            return fb.select(b_zero, zero, result)
        b_minus_one = fb.compare("icmp", "eq", b, Value("-1", a.elem))
        unsafe = fb.binop("or", b_zero, b_minus_one)
        safe = fb.select(unsafe, one, b)
        remainder = fb.binop("srem", a, safe)
        # C division truncates; floor when the remainder is nonzero and its sign differs from b's
        signs_differ = fb.compare("icmp", "slt", fb.binop("xor", remainder, safe), zero)
        adjust = fb.binop("and", fb.compare("icmp", "ne", remainder, zero), signs_differ)
        if modulo:
            floored = fb.select(adjust, fb.binop("add", remainder, safe), remainder)
            return fb.select(unsafe, zero, floored)
        quotient = fb.binop("sdiv", a, safe)
        floored = fb.select(adjust, fb.binop("sub", quotient, one), quotient)
        floored = fb.select(b_minus_one, fb.binop("sub", zero, a), floored)
        return fb.select(b_zero, zero, floored)

    def unary(self, op: UnaryOp, x: Value, dtype: DType) -> Value:
        if op is UnaryOp.NEG:
            if dtype.is_float:
                return self.fb.unop("fneg", x)
            return self.fb.binop("sub", Value("0", x.elem), x)
        if op is UnaryOp.ABS:
            if dtype.is_float:
                return self.intrinsic("fabs", x)
            if not dtype.is_signed:
                return x
            name = f"llvm.abs.{mangle(x.elem, x.lanes)}"
            return self.fb.call(name, x.elem, [x, Value("false", "i1")], x.lanes)
        if op is UnaryOp.BITWISE_NOT and dtype.is_int:
            return self.fb.binop("xor", x, Value("-1", x.elem))
        if not dtype.is_float:
            raise self.ctx.error(f"{op.value} needs a float operand, got {dtype}")
        if op in _INTRINSICS:
            return self.intrinsic(_INTRINSICS[op], x)
        if op in _LIBM:
            return self.fb.call_lanewise(_LIBM[op], x)
        if op is UnaryOp.SQRT:
            return self.intrinsic("sqrt", x)
        if op in HELPER_OPS:
            return call_math(self.fb, op, x)
        raise self.ctx.error(f"unknown unary operation {op.value}")

    def compare(self, op: CompareOp, a: Value, b: Value, dtype: DType) -> Value:
        if dtype.is_float:
            return self.fb.compare("fcmp", _FLOAT_PREDICATES[op], a, b)
        if op is CompareOp.EQ:
            return self.fb.compare("icmp", "eq", a, b)
        if op is CompareOp.NE:
            return self.fb.compare("icmp", "ne", a, b)
        sign = "s" if dtype.is_signed and dtype is not DType.BOOL else "u"
        return self.fb.compare("icmp", sign + _INT_PREDICATES[op], a, b)

    # reductions ------------------------------------------------------------------------------
    def combine(self, op: ReduceOp, a: Value, b: Value, dtype: DType) -> Value:
        """``a op b`` for an accumulating store or a partial result."""
        if op is ReduceOp.SUM:
            return self.binary(BinaryOp.ADD, a, b, dtype)
        if op is ReduceOp.PROD:
            return self.binary(BinaryOp.MUL, a, b, dtype)
        return self.binary(BinaryOp.MAX if op is ReduceOp.MAX else BinaryOp.MIN, a, b, dtype)

    def horizontal(self, op: ReduceOp, vector: Value, dtype: DType) -> Value:
        """Combine the lanes of ``vector`` (sums and products reassociate: a tree, not lane
        order)."""
        suffix = mangle(vector.elem, vector.lanes)
        if dtype.is_float:
            if op in (ReduceOp.SUM, ReduceOp.PROD):
                name, start_value = ("fadd", -0.0) if op is ReduceOp.SUM else ("fmul", 1.0)
                start = Value(literal(start_value, DType.FLOAT32), "float")
                return self.fb.call(f"llvm.vector.reduce.{name}.{suffix}", "float",
                                    [start, vector], flags="reassoc")
            name = "fmaximum" if op is ReduceOp.MAX else "fminimum"  # NaN-propagating
            return self.fb.call(f"llvm.vector.reduce.{name}.{suffix}", vector.elem, [vector],
                                flags="nsz")
        elif op is ReduceOp.SUM:
            name = "add"
        elif op is ReduceOp.PROD:
            name = "mul"
        else:
            name = ("s" if dtype.is_signed else "u") + ("max" if op is ReduceOp.MAX else "min")
        return self.fb.call(f"llvm.vector.reduce.{name}.{suffix}", vector.elem, [vector])
