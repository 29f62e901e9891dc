"""ONNX recurrent layers: RNN, GRU and LSTM, forward, reverse or bidirectional, both layouts,
``sequence_lens`` (a run-time input: steps past a sequence's length keep its state and output
zeros), initial states, LSTM peepholes, ``clip`` and ``linear_before_reset``; the gate
activations Sigmoid, Tanh and Relu.

The sequence is unrolled at import time: the input products of every step are one contraction
per direction (``X W^T + biases``), then each step is a contraction with the recurrent weights
and the elementwise gate updates — a few computes per step and direction, so a long sequence
makes a long program (compile time grows with it).

>>> # LSTM(X[5, 2, 3], W[1, 16, 3], R[1, 16, 4], hidden_size=4): per step t,
>>> # gates = XW[t] + H[t-1] R^T; C[t] = f * C[t-1] + i * g; H[t] = o * tanh(C[t])
"""

from __future__ import annotations

from collections.abc import Callable

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value
from tilecraft.ops.building import compute_float, named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.te.tensor import Tensor

Activation = Callable[[te.Expr], te.Expr]
_ACTIVATIONS: dict[str, Activation] = {
    "sigmoid": te.sigmoid, "tanh": te.tanh, "relu": lambda v: te.maximum(v, 0.0)}
#: per operator: gates per step, and the default activations of one direction
_GATES = {"RNN": (1, ["Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]),
          "LSTM": (4, ["Sigmoid", "Tanh", "Tanh"])}


class _Layer:
    """What every step of one node reads: the inputs, sizes and attributes."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.op = ctx.op_type
        x = ctx.tensor(0)
        if x.ndim != 3 or not x.dtype.is_float:
            raise ctx.unsupported(f"X of shape {x.shape} and dtype {x.dtype.value} (3-d float)")
        self.layout = int(ctx.attr("layout", 0))
        self.x = x
        self.seq, self.batch = (x.shape[0], x.shape[1]) if self.layout == 0 else \
            (x.shape[1], x.shape[0])
        self.hidden = int(ctx.attr("hidden_size"))
        self.direction = ctx.attr("direction", "forward")
        if self.direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.unsupported(f"direction {self.direction!r}")
        self.directions = 2 if self.direction == "bidirectional" else 1
        self.gates, defaults = _GATES[self.op]
        names = list(ctx.attr("activations", defaults * self.directions))
        if "activation_alpha" in ctx.attrs or "activation_beta" in ctx.attrs or \
                any(n.lower() not in _ACTIVATIONS for n in names):
            raise ctx.unsupported(f"activations {names} (Sigmoid, Tanh and Relu, without "
                                  "alpha / beta)")
        self.activations = [_ACTIVATIONS[n.lower()] for n in names]
        if int(ctx.attr("input_forget", 0)):
            raise ctx.unsupported("input_forget (coupled input and forget gates)")
        self.clip = ctx.attr("clip")
        self.linear_before_reset = int(ctx.attr("linear_before_reset", 0))
        self.w, self.r = ctx.tensor(1), ctx.tensor(2)
        self.b = ctx.tensor(3) if ctx.has(3) else None
        self.lengths = ctx.tensor(4) if ctx.has(4) else None
        self.initial_h = ctx.tensor(5) if ctx.has(5) else None
        self.initial_c = ctx.tensor(6) if self.op == "LSTM" and ctx.has(6) else None
        self.peepholes = ctx.tensor(7) if self.op == "LSTM" and ctx.has(7) else None
        expected = (self.directions, self.gates * self.hidden)
        if tuple(self.w.shape[:2]) != expected or tuple(self.r.shape) != (*expected,
                                                                           self.hidden):
            raise ctx.unsupported(f"W {self.w.shape} and R {self.r.shape} for "
                                  f"{self.directions} direction(s) of {self.gates} gates of "
                                  f"{self.hidden}")

    def name(self, what: str) -> str:
        return self.ctx.state.unique(f"{self.ctx.node.output[0] or self.op}_{what}")

    def x_at(self, t: te.Expr, b: te.Expr, k: te.Expr) -> te.Expr:
        return self.x[t, b, k] if self.layout == 0 else self.x[b, t, k]

    def state_at(self, initial: Tensor | None, d: int, b: te.Expr, h: te.Expr) -> te.Expr:
        if initial is None:
            return te.as_expr(0.0)
        return compute_float(initial[d, b, h] if self.layout == 0 else initial[b, d, h])

    def bias(self, d: int, g: te.Expr, recurrent: bool) -> te.Expr:
        if self.b is None:
            return te.as_expr(0.0)
        offset = self.gates * self.hidden if recurrent else 0
        return compute_float(self.b[d, g + offset])

    def inputs(self, d: int) -> Tensor:
        """``XW[t, b, g] = sum_k x[t, b, k] W[d, g, k] + Wb[g] + Rb[g]`` (GRU's hidden gate
        without ``Rb``: its step adds it): every step's input products at once."""
        k = te.reduce_axis(self.x.shape[2], "k")
        product = named_compute((self.seq, self.batch, self.gates * self.hidden),
                                axis_names(3), lambda t, b, g: te.sum(
                                    compute_float(self.x_at(t, b, k))
                                    * compute_float(self.w[d, g, k]), axis=[k]),
                                self.name(f"xw{d}"))

        def biased(t: te.Expr, b: te.Expr, g: te.Expr) -> te.Expr:
            value = product[t, b, g] + self.bias(d, g, False)
            if self.op == "GRU":  # the hidden gate's recurrent bias: added by the step
                return value + te.select(g < 2 * self.hidden, self.bias(d, g, True), 0.0)
            return value + self.bias(d, g, True)

        if self.b is None:
            return product
        return named_compute(product.shape, axis_names(3), biased, self.name(f"xwb{d}"))

    def recurrent(self, state: Tensor, d: int, first: int, count: int, what: str) -> Tensor:
        """``state[b, :] R[d, first + g, :]^T`` for ``count`` gate rows."""
        k = te.reduce_axis(self.hidden, "k")
        return named_compute((self.batch, count), axis_names(2), lambda b, g: te.sum(
            state[b, k] * compute_float(self.r[d, first + g, k]), axis=[k]), self.name(what))

    def clipped(self, v: te.Expr) -> te.Expr:
        if self.clip is None:
            return v
        limit = float(self.clip)
        return te.minimum(te.maximum(v, -limit), limit)

    def running(self, t: int, b: te.Expr) -> te.Expr | None:
        """Whether step ``t`` is inside sequence ``b`` (None: every step is)."""
        if self.lengths is None:
            return None
        return te.as_expr(t) < self.lengths[(b,)].astype(DType.INT32)


def _direction(layer: _Layer, d: int) -> tuple[list[Tensor], Tensor, Tensor | None]:
    """The outputs of every step (in time order), the last state and (LSTM) the last cell."""
    hidden, batch = layer.hidden, layer.batch
    f = layer.activations[len(layer.activations) // layer.directions * d]
    g = layer.activations[len(layer.activations) // layer.directions * d + 1] \
        if layer.gates > 1 else f
    h_act = layer.activations[len(layer.activations) // layer.directions * d + 2] \
        if layer.op == "LSTM" else g
    xw = layer.inputs(d)
    state = named_compute((batch, hidden), axis_names(2), lambda b, h: layer.state_at(
        layer.initial_h, d, b, h), layer.name(f"h_init{d}"))
    cell = named_compute((batch, hidden), axis_names(2), lambda b, h: layer.state_at(
        layer.initial_c, d, b, h), layer.name(f"c_init{d}")) if layer.op == "LSTM" else None
    reverse = layer.direction == "reverse" or d == 1
    steps = range(layer.seq - 1, -1, -1) if reverse else range(layer.seq)
    outputs: dict[int, Tensor] = {}
    for t in steps:
        pre = layer.recurrent(state, d, 0, layer.gates * hidden, f"hr{d}_{t}")

        def gate(b: te.Expr, h: te.Expr, which: int, t: int = t, pre: Tensor = pre) -> te.Expr:
            return xw[t, b, which * hidden + h] + pre[b, which * hidden + h]

        prev, prev_cell = state, cell
        if layer.op == "RNN":
            new = named_compute((batch, hidden), axis_names(2), lambda b, h, gate=gate: f(
                layer.clipped(gate(b, h, 0))), layer.name(f"h{d}_{t}"))
        elif layer.op == "GRU":
            new = _gru_step(layer, d, t, gate, prev, xw, f, g)
        else:
            new, cell = _lstm_step(layer, d, t, gate, prev, prev_cell, f, g, h_act)
        if layer.lengths is not None:
            state, outputs[t] = _masked(layer, t, new, prev, d)
            if cell is not None and prev_cell is not None:
                kept = cell
                cell = named_compute((batch, hidden), axis_names(2), lambda b, h, kept=kept,
                                     prev_cell=prev_cell, t=t: te.select(
                                         layer.running(t, b), kept[b, h], prev_cell[b, h]),
                                     layer.name(f"c{d}_{t}_kept"))
        else:
            state = outputs[t] = new
    return [outputs[t] for t in range(layer.seq)], state, cell


def _masked(layer: _Layer, t: int, new: Tensor, prev: Tensor, d: int
            ) -> tuple[Tensor, Tensor]:
    """Past a sequence's length: the state kept, the output zero."""
    shape = new.shape
    kept = named_compute(shape, axis_names(2), lambda b, h: te.select(
        layer.running(t, b), new[b, h], prev[b, h]), layer.name(f"h{d}_{t}_kept"))
    out = named_compute(shape, axis_names(2), lambda b, h: te.select(
        layer.running(t, b), new[b, h], 0.0), layer.name(f"y{d}_{t}"))
    return kept, out


def _gru_step(layer: _Layer, d: int, t: int, gate: Callable[..., te.Expr], prev: Tensor,
              xw: Tensor, f: Activation, g: Activation) -> Tensor:
    hidden, batch = layer.hidden, layer.batch
    z = named_compute((batch, hidden), axis_names(2), lambda b, h: f(layer.clipped(
        gate(b, h, 0))), layer.name(f"z{d}_{t}"))
    r = named_compute((batch, hidden), axis_names(2), lambda b, h: f(layer.clipped(
        gate(b, h, 1))), layer.name(f"r{d}_{t}"))
    if layer.linear_before_reset:   # g(x Wh + r * (h Rh + Rbh) + Wbh)
        recurrent = layer.recurrent(prev, d, 2 * hidden, hidden, f"hrh{d}_{t}")

        def candidate(b: te.Expr, h: te.Expr) -> te.Expr:
            inner = recurrent[b, h] + layer.bias(d, 2 * hidden + h, True)
            return g(layer.clipped(xw[t, b, 2 * hidden + h] + r[b, h] * inner))
    else:   # g(x Wh + (r * h) Rh + Rbh + Wbh)
        reset = named_compute((batch, hidden), axis_names(2), lambda b, h: r[b, h] * prev[b, h],
                              layer.name(f"reset{d}_{t}"))
        recurrent = layer.recurrent(reset, d, 2 * hidden, hidden, f"hrh{d}_{t}")

        def candidate(b: te.Expr, h: te.Expr) -> te.Expr:
            inner = recurrent[b, h] + layer.bias(d, 2 * hidden + h, True)
            return g(layer.clipped(xw[t, b, 2 * hidden + h] + inner))

    proposed = named_compute((batch, hidden), axis_names(2), candidate,
                             layer.name(f"hc{d}_{t}"))
    return named_compute((batch, hidden), axis_names(2), lambda b, h: (1.0 - z[b, h])
                         * proposed[b, h] + z[b, h] * prev[b, h], layer.name(f"h{d}_{t}"))


def _lstm_step(layer: _Layer, d: int, t: int, gate: Callable[..., te.Expr], prev: Tensor,
               prev_cell: Tensor | None, f: Activation, g: Activation, h_act: Activation
               ) -> tuple[Tensor, Tensor]:
    hidden, batch = layer.hidden, layer.batch
    assert prev_cell is not None
    peep = layer.peepholes

    def peephole(which: int, h: te.Expr, c: te.Expr) -> te.Expr:
        return compute_float(peep[d, which * hidden + h]) * c if peep is not None else 0.0

    # W's gate order is i, o, f, c; P's is i, o, f
    def cell_update(b: te.Expr, h: te.Expr) -> te.Expr:
        i = f(layer.clipped(gate(b, h, 0) + peephole(0, h, prev_cell[b, h])))
        forget = f(layer.clipped(gate(b, h, 2) + peephole(2, h, prev_cell[b, h])))
        c = g(layer.clipped(gate(b, h, 3)))
        return forget * prev_cell[b, h] + i * c

    cell = named_compute((batch, hidden), axis_names(2), cell_update, layer.name(f"c{d}_{t}"))

    def output(b: te.Expr, h: te.Expr) -> te.Expr:
        o = f(layer.clipped(gate(b, h, 1) + peephole(1, h, cell[b, h])))
        return o * h_act(cell[b, h])

    return named_compute((batch, hidden), axis_names(2), output, layer.name(f"h{d}_{t}")), cell


@converter("RNN", "GRU", "LSTM")
def convert_recurrent(ctx: NodeContext) -> list[Value]:
    layer = _Layer(ctx)
    runs = [_direction(layer, d) for d in range(layer.directions)]
    dtype = layer.x.dtype
    seq, batch, hidden, directions = layer.seq, layer.batch, layer.hidden, layer.directions

    def stacked(name: str, per_direction: list[Tensor], with_time: bool) -> Tensor:
        """Y ([seq, dir, batch, hidden]; layout 1: [batch, seq, dir, hidden]) or Y_h / Y_c
        ([dir, batch, hidden]; layout 1: [batch, dir, hidden])."""
        if with_time:
            shape = (seq, directions, batch, hidden) if layer.layout == 0 else \
                (batch, seq, directions, hidden)
        else:
            shape = (directions, batch, hidden) if layer.layout == 0 else \
                (batch, directions, hidden)

        def body(*idx: te.Expr) -> te.Expr:
            if with_time:
                t, dd, b, h = idx if layer.layout == 0 else (idx[1], idx[2], idx[0], idx[3])
                value: te.Expr | None = None
                for d in range(directions):
                    for step in range(seq):
                        here = per_direction[d * seq + step][b, h]
                        value = here if value is None else te.select(
                            te.eq(t, step) & te.eq(dd, d), here, value)
            else:
                dd, b, h = idx if layer.layout == 0 else (idx[1], idx[0], idx[2])
                value = None
                for d in range(directions):
                    here = per_direction[d][b, h]
                    value = here if value is None else te.select(te.eq(dd, d), here, value)
            assert value is not None
            return te.as_expr(value).astype(dtype)

        return named_compute(shape, axis_names(len(shape)), body, name)

    outputs = list(ctx.node.output)
    results: list[Value] = []
    for position, wanted in enumerate(outputs):
        if position == 0 and wanted:
            results.append(stacked(ctx.out(0), [y for run in runs for y in run[0]], True))
        elif position == 1 and wanted:
            results.append(stacked(ctx.out(1), [run[1] for run in runs], False))
        elif position == 2 and wanted:
            cells = [run[2] for run in runs]
            assert all(c is not None for c in cells)
            results.append(stacked(ctx.out(2), cells, False))  # type: ignore[arg-type]
        else:
            results.append(runs[0][1])  # an output left out: its place kept, never read
    return results
