"""The elementwise consumer of a depthwise convolution (a bias, ReLU6, a clip, a per-channel
scale) computed by the depthwise kernel (:func:`~.depthwise.lower_depthwise`) on the window
sums in registers, before the store: the convolution's output is never written and the
consumer has no kernel of its own.

Run apart, MobileNet-V2's ``relu6(conv + bias)`` after each depthwise convolution reads the
whole output back (1 thread: 17 kernels at 5-12 GFLOP/s, ~0.8 ms of ~11 ms).

What fuses (:func:`epilogue_problem` says why not otherwise): the convolution is not a graph
output and has one reader ``E``, elementwise (no reduction), of the convolution's shape, in
float32, reading the convolution only at its own index (``E[n, k, h, w] = f(C[n, k, h, w],
bias[k], ...)``); then each further compute that alone reads the last one the same way, as
long as the last one is no graph output and has no other reader (the chain is one
expression, the intermediates inlined). A read of a neighbouring element (a halo the kernel's
vector does not hold) stays a kernel of its own.

>>> from tilecraft import ops, te
>>> from tilecraft.graph import Graph
>>> y = ops.depthwise_conv2d(te.placeholder((1, 3, 9, 9), name="x"),
...                          te.placeholder((3, 1, 3, 3), name="w"), padding=1, name="y")
>>> bias = te.placeholder((3,), name="bias")
>>> e = te.compute(y.shape, lambda n, k, h, w: te.max(y[n, k, h, w] + bias[k], 0.0), name="e")
>>> six = te.compute(y.shape, lambda n, k, h, w: te.min(e[n, k, h, w], 6.0), name="six")
>>> epilogue = depthwise_epilogue(y, Graph.from_outputs([six]), set(), [])
>>> [t.name for t in epilogue.chain], [t.name for t in epilogue.operands]
(['e', 'six'], ['bias'])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Buffer
from tilecraft.te.expr import Expr, IterVar, Load
from tilecraft.te.tensor import ComputeOp, Tensor
from tilecraft.te.visit import loads_in, transform
from tilecraft_x86_avx512.blocking.building import inline_loads, kernel_expr, unit_axes
from tilecraft_x86_avx512.blocking.epilogue import at_own_index

__all__ = ["DepthwiseEpilogue", "depthwise_epilogue", "epilogue_problem"]


@dataclass(frozen=True)
class DepthwiseEpilogue:
    """The elementwise computes ``chain`` after the convolution ``conv``, the last one stored
    by the kernel: ``body`` is its expression with the others inlined, reading ``conv`` only
    at the last one's own index."""

    conv: Tensor
    chain: tuple[Tensor, ...]
    body: Expr

    @property
    def tensor(self) -> Tensor:
        """The compute the kernel stores."""
        return self.chain[-1]

    @property
    def operands(self) -> list[Tensor]:
        """The tensors ``body`` reads besides the convolution, in order of first read."""
        return list(dict.fromkeys(ld.tensor for ld in loads_in(self.body)
                                  if ld.tensor is not self.conv))

    def value(self, total: Expr, values: Mapping[IterVar, Expr],
              buffers: Mapping[Tensor, Buffer]) -> Expr:
        """The stored compute's value (Kernel IR) at its axes ``values`` where the
        convolution's is ``total`` (a Kernel IR expression), the operands read from
        ``buffers``."""
        body = transform(self.body, lambda node: total if isinstance(node, Load)
                         and node.tensor is self.conv else None)
        return kernel_expr(body, values, buffers, extra_zero=unit_axes(self.tensor))


def epilogue_problem(producer: Tensor, consumer: Tensor, conv: Tensor, graph: Graph,
                     taken: set[str]) -> str | None:
    """Why ``consumer`` cannot be computed where ``producer`` (the convolution ``conv`` or
    the last compute of its epilogue) is stored, or ``None`` when it can."""
    if producer in graph.outputs:
        return f"{producer.name} is also a graph output, so it must be written whole"
    others = [t.name for t in graph.consumers(producer) if t is not consumer]
    if others:
        return f"{producer.name} is also read by {', '.join(others)}"
    if consumer.name in taken:
        return f"{consumer.name} is fused elsewhere"
    if not isinstance(consumer.op, ComputeOp) or consumer.reduce_axes:
        return f"{consumer.name} is a reduction, an epilogue is elementwise"
    if consumer.dtype is not DType.FLOAT32 or tuple(consumer.shape) != tuple(conv.shape):
        return (f"{consumer.name} is {consumer.dtype.value}{list(consumer.shape)}, not float32 "
                f"of {conv.name}'s shape {list(conv.shape)}")
    if any(ld.tensor is producer and not at_own_index(ld, consumer)
           for ld in loads_in(consumer.op.body)):
        return (f"{consumer.name} reads {producer.name} at another index than its own (the "
                "kernel's vector holds no neighbouring elements)")
    return None


def depthwise_epilogue(conv: Tensor, graph: Graph, taken: set[str],
                       notes: list[str]) -> DepthwiseEpilogue | None:
    """The elementwise chain after the depthwise convolution ``conv`` that its kernel can
    compute before the store (module docstring), none of it in ``taken``; or ``None``, with
    a note in ``notes`` where ``conv``'s reader does not fuse."""
    chain: list[Tensor] = []
    producer = conv
    while True:
        readers = graph.consumers(producer)
        if len(readers) != 1 or producer in graph.outputs:
            if not chain and readers:
                why = "also a graph output, so it must be written whole" \
                    if producer in graph.outputs else \
                    f"read by {', '.join(sorted(t.name for t in readers))}"
                notes.append(f"epilogue of {conv.name} not fused: {conv.name} is {why}")
            break
        consumer = readers[0]
        problem = epilogue_problem(producer, consumer, conv, graph, taken)
        if problem is not None:
            if not chain:
                notes.append(f"epilogue {consumer.name} of {conv.name} not fused: {problem}")
            break
        chain.append(consumer)
        producer = consumer
    if not chain:
        return None
    body = inline_loads(chain[-1].op.body, set(chain[:-1]))
    # an intermediate read at its own index reads the convolution at the last one's
    if any(ld.tensor is conv and not at_own_index(ld, chain[-1]) for ld in loads_in(body)):
        return None
    return DepthwiseEpilogue(conv, tuple(chain), body)
