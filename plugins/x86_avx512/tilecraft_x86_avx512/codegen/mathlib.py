"""Vectorisable float32 math: exp, log, tanh, sigmoid, erf as internal LLVM functions.

Each function is generated for a lane count (0 for scalar) and marked ``alwaysinline``, so the
same polynomial runs in vector loops, in their masked tails and in scalar code; results
therefore never depend on how a loop was vectorised or split across threads.

- ``exp``: Cody-Waite range reduction ``x = n ln2 + r`` (|r| <= ln2/2), Cephes' degree-5
  minimax polynomial, then ``2^n`` applied as two exact power-of-two factors so that results
  near overflow and in the subnormal range are rounded once — on 16 lanes by ``vscalefps``,
  which rounds the same product once (bit-identical; the attention chain's exp pass,
  transformer_base, 1 thread, Xeon family 6 model 167: 6.33 -> 6.08 ms). About 1 ulp;
  ``exp(+inf) = inf``, ``exp(-inf) = 0``, NaN propagates.
- ``log``: ``x = m 2^e`` with ``m`` in [sqrt(1/2), sqrt(2)) read from the bits (subnormals are
  pre-scaled by 2^23), Cephes' degree-8 polynomial; ``log(0) = -inf``, ``log(x<0) = NaN``.
- ``tanh``: an odd polynomial for |x| < 0.625 (no cancellation near 0), else
  ``1 - 2 / (exp(2|x|) + 1)`` with the sign of x.
- ``sigmoid``: ``1 / (1 + exp(-x))`` (the reference's definition).
- ``erf``: ``x P(x^2)`` for |x| < 1 (Cephes, relative error ~1e-9 before rounding), the
  Abramowitz-Stegun 7.1.26 form ``1 - t P(t) exp(-x^2)`` above (absolute error <= 1.5e-7),
  its argument capped at 4, where the float32 result is already +-1 (no subnormal ``exp``).

Polynomials are evaluated by Horner's rule with ``llvm.fma``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tilecraft.te.expr import UnaryOp
from tilecraft_x86_avx512.codegen.builder import FunctionBuilder, ModuleBuilder, Value
from tilecraft_x86_avx512.codegen.types import float_literal, mangle, vector_type

_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)
_LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
             1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
             3.3333331174e-1)
_TANH_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
              -3.33332819422e-1)
_ERF_SMALL_POLY = (7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3,
                   -2.685381193529856e-2, 1.128358514861418e-1, -3.761262582423300e-1,
                   1.128379165726710e0)
_ERF_AS_P = 0.3275911
_ERF_AS_POLY = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
#: |x| from which erf(x) rounds to +-1 in float32 (the tail form's argument is capped there)
_ERF_ONE = 4.0


#: AVX-512's ``vscalefps`` (``y * 2^floor(n)``, one rounding) for exp's last step on 16 lanes:
#: the same result as the two exact power-of-two factors (every ``n`` the clamped argument
#: gives: the first factor is exact, the second rounds once), in one instruction instead of
#: nine; ``SCALEF`` is a switch for measuring
SCALEF_INTRINSIC = "llvm.x86.avx512.mask.scalef.ps.512"
SCALEF_LANES = 16
SCALEF = True


class _Math:
    """Float ops at a fixed lane count, constants broadcast as needed."""

    def __init__(self, fb: FunctionBuilder, lanes: int) -> None:
        self.fb, self.lanes = fb, lanes

    def c(self, value: float) -> Value:
        return self.fb.broadcast(Value(float_literal(value), "float"), self.lanes)

    def i(self, value: int) -> Value:
        return self.fb.broadcast(Value(str(value), "i32"), self.lanes)

    def op(self, name: str, a: Value, b: Value) -> Value:
        return self.fb.binop(name, a, b)

    def intrinsic(self, name: str, *args: Value) -> Value:
        full = f"llvm.{name}.{mangle(args[0].elem, self.lanes)}"
        return self.fb.call(full, args[0].elem, list(args), self.lanes)

    def fma(self, a: Value, b: Value, c: Value) -> Value:
        return self.intrinsic("fma", a, b, c)

    def poly(self, x: Value, coefficients: Sequence[float]) -> Value:
        acc = self.c(coefficients[0])
        for coefficient in coefficients[1:]:
            acc = self.fma(acc, x, self.c(coefficient))
        return acc

    def lt(self, a: Value, b: Value) -> Value:
        return self.fb.compare("fcmp", "olt", a, b)

    def gt(self, a: Value, b: Value) -> Value:
        return self.fb.compare("fcmp", "ogt", a, b)

    def eq(self, a: Value, b: Value) -> Value:
        return self.fb.compare("fcmp", "oeq", a, b)

    def is_nan(self, a: Value) -> Value:
        return self.fb.compare("fcmp", "uno", a, a)

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        return self.fb.select(cond, a, b)

    def helper(self, op: UnaryOp, x: Value) -> Value:
        return call_math(self.fb, op, x)


def _exp(m: _Math, x: Value) -> Value:
    fb = m.fb
    clamped = m.select(m.gt(x, m.c(89.0)), m.c(89.0), x)
    clamped = m.select(m.lt(clamped, m.c(-104.0)), m.c(-104.0), clamped)
    n_float = m.intrinsic("rint", m.op("fmul", clamped, m.c(1.44269504088896341)))
    r = m.fma(n_float, m.c(-0.693359375), clamped)
    r = m.fma(n_float, m.c(2.12194440e-4), r)
    p = m.poly(r, _EXP_POLY)
    y = m.op("fadd", m.fma(p, m.op("fmul", r, r), r), m.c(1.0))
    if m.lanes == SCALEF_LANES and SCALEF:
        # y * 2^n in one instruction (vscalefps), rounded once like the two factors below
        result = fb.call(SCALEF_INTRINSIC, "float",
                         [y, n_float, m.c(0.0), Value("-1", "i16"), Value("4", "i32")],
                         m.lanes)
        return m.select(m.is_nan(x), x, result)
    n = fb.convert("fptosi", n_float, "i32")
    half = m.op("ashr", n, m.i(1))
    rest = m.op("sub", n, half)
    scale_a = fb.convert("bitcast", m.op("shl", m.op("add", half, m.i(127)), m.i(23)), "float")
    scale_b = fb.convert("bitcast", m.op("shl", m.op("add", rest, m.i(127)), m.i(23)), "float")
    result = m.op("fmul", m.op("fmul", y, scale_a), scale_b)
    return m.select(m.is_nan(x), x, result)


def _log(m: _Math, x: Value) -> Value:
    fb = m.fb
    tiny = m.lt(x, m.c(1.1754943508222875e-38))
    scaled = m.select(tiny, m.op("fmul", x, m.c(8388608.0)), x)
    bits = fb.convert("bitcast", scaled, "i32")
    exponent = m.op("sub", m.op("and", m.op("lshr", bits, m.i(23)), m.i(0xFF)), m.i(126))
    exponent = m.op("sub", exponent, m.select(tiny, m.i(23), m.i(0)))
    mantissa_bits = m.op("or", m.op("and", bits, m.i(0x007FFFFF)), m.i(0x3F000000))
    mantissa = fb.convert("bitcast", mantissa_bits, "float")
    low = m.lt(mantissa, m.c(0.707106781186547524))
    exponent = m.op("sub", exponent, m.select(low, m.i(1), m.i(0)))
    mantissa = m.op("fsub", m.select(low, m.op("fadd", mantissa, mantissa), mantissa), m.c(1.0))
    z = m.op("fmul", mantissa, mantissa)
    y = m.op("fmul", m.op("fmul", m.poly(mantissa, _LOG_POLY), mantissa), z)
    e = fb.convert("sitofp", exponent, "float")
    y = m.fma(e, m.c(-2.12194440e-4), y)
    y = m.fma(z, m.c(-0.5), y)
    result = m.fma(e, m.c(0.693359375), m.op("fadd", mantissa, y))
    result = m.select(m.eq(x, m.c(math.inf)), x, result)
    result = m.select(m.eq(x, m.c(0.0)), m.c(-math.inf), result)
    result = m.select(m.lt(x, m.c(0.0)), m.c(math.nan), result)
    return m.select(m.is_nan(x), x, result)


def _tanh(m: _Math, x: Value) -> Value:
    magnitude = m.intrinsic("fabs", x)
    z = m.op("fmul", x, x)
    small = m.fma(m.op("fmul", m.poly(z, _TANH_POLY), z), x, x)
    e = m.helper(UnaryOp.EXP, m.op("fadd", magnitude, magnitude))
    large = m.op("fsub", m.c(1.0), m.op("fdiv", m.c(2.0), m.op("fadd", e, m.c(1.0))))
    large = m.intrinsic("copysign", large, x)
    return m.select(m.lt(magnitude, m.c(0.625)), small, large)


def _sigmoid(m: _Math, x: Value) -> Value:
    e = m.helper(UnaryOp.EXP, m.fb.unop("fneg", x))
    return m.op("fdiv", m.c(1.0), m.op("fadd", m.c(1.0), e))


def _erf(m: _Math, x: Value) -> Value:
    magnitude = m.intrinsic("fabs", x)
    z = m.op("fmul", x, x)
    small = m.op("fmul", x, m.poly(z, _ERF_SMALL_POLY))
    # past |x| = 4 the float32 result is 1 (erf(4) = 1 - 1.5e-8, under half an ulp below 1);
    # clamping keeps exp(-x^2) out of the subnormal range, whose operations take microcode
    # assists (BERT's FFN chain shape with GELU inputs of magnitude ~30: 49.5 -> 40.4 ms)
    capped = m.select(m.gt(magnitude, m.c(_ERF_ONE)), m.c(_ERF_ONE), magnitude)
    t = m.op("fdiv", m.c(1.0), m.fma(m.c(_ERF_AS_P), capped, m.c(1.0)))
    tail = m.op("fmul", t, m.poly(t, _ERF_AS_POLY))
    gauss = m.helper(UnaryOp.EXP, m.fb.unop("fneg", m.op("fmul", capped, capped)))
    large = m.op("fsub", m.c(1.0), m.op("fmul", tail, gauss))
    large = m.intrinsic("copysign", large, x)
    return m.select(m.lt(magnitude, m.c(1.0)), small, large)


_BODIES: dict[UnaryOp, Callable[[_Math, Value], Value]] = {
    UnaryOp.EXP: _exp, UnaryOp.LOG: _log, UnaryOp.TANH: _tanh, UnaryOp.SIGMOID: _sigmoid,
    UnaryOp.ERF: _erf,
}

#: unary ops implemented by a helper function of this module
HELPER_OPS = frozenset(_BODIES)


def _define(module: ModuleBuilder, name: str, op: UnaryOp, lanes: int) -> str:
    ty = vector_type("float", lanes)
    fb = FunctionBuilder(module, name, ty, [(ty, "%x", "")], linkage="internal",
                         attributes="alwaysinline nounwind")
    fb.ret(_BODIES[op](_Math(fb, lanes), Value("%x", "float", lanes)))
    return fb.render()


def call_math(fb: FunctionBuilder, op: UnaryOp, x: Value) -> Value:
    """``op(x)`` for a float (vector) ``x`` through the module's helper for its lane count."""
    name = f"tc.{op.value}.{'v' + str(x.lanes) if x.lanes else 's'}"
    fb.module.helper(name, lambda: _define(fb.module, name, op, x.lanes))
    return fb.call(name, "float", [x], x.lanes, declare=False)
