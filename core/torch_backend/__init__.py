"""A ``torch.compile`` backend (the optional extra ``tilecraft[torch]``):

>>> import torch  # doctest: +SKIP
>>> fast = torch.compile(model.eval(), backend="tilecraft")  # doctest: +SKIP
>>> with torch.no_grad():  # doctest: +SKIP
...     y = fast(x)

Registered through the ``torch_dynamo_backends`` entry point. Each graph dynamo captures is
traced to ATen operators (``make_fx`` with the core ATen decompositions), converted to a
tilecraft Graph (:mod:`tilecraft.torch_backend.convert`; the weights stay inputs, read from
the model at every call) and compiled for the host's best target (``TILECRAFT_TORCH_TARGET``
names another). Calls convert tensors to numpy arrays and back, without copies where the
tensors are contiguous CPU float tensors.

Where some nodes cannot be converted, the ATen graph is split
(``torch.fx.passes.infra.partitioner.CapabilityBasedPartitioner``): each region of two or
more convertible nodes is compiled by tilecraft, the unsupported nodes run in PyTorch between
them; the reason, naming every unsupported node, is logged once on the
``tilecraft.torch_backend`` logger at WARNING. The whole graph runs eagerly when nothing is
left to compile, when tracing fails or when the compile fails (said likewise); so does a call
under autograd (inference only: run under ``torch.no_grad()`` or
``torch.inference_mode()``).
:data:`DECISIONS` keeps what each captured graph became.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DECISIONS", "Decision", "tilecraft_backend"]

LOGGER = logging.getLogger("tilecraft.torch_backend")


@dataclass
class Decision:
    """What one captured graph became: ``"tilecraft"`` (compiled whole), ``"split"`` (its
    convertible regions compiled, the rest eager; the reason names the unsupported nodes) or
    ``"eager"`` with the reason; the kernels and regions tilecraft compiled."""

    graph: str
    mode: str
    reason: str = ""
    kernels: int = 0
    regions: int = 0


#: one entry per graph the backend was given, in order
DECISIONS: list[Decision] = []


def _target() -> Any:
    from tilecraft.target.registry import get_target

    name = os.environ.get("TILECRAFT_TORCH_TARGET")
    if name:
        return get_target(name)
    from tilecraft.cli_target import choose_host_target
    from tilecraft.target.registry import list_targets

    return choose_host_target(list_targets()).target  # the CLI's default


def _aten_graph(gm: Any, example_inputs: Sequence[Any]) -> Any:
    import torch
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    with torch.no_grad():
        # traced on the example inputs themselves ("real"): fake tracing would add symbols
        # to dynamo's shape environment that its guards cannot source
        return make_fx(gm, decomposition_table=core_aten_decompositions())(*example_inputs)


def _eager(gm: Any, label: str, reason: str) -> Callable[..., Any]:
    DECISIONS.append(Decision(label, "eager", reason))
    LOGGER.warning("torch.compile backend 'tilecraft': %s runs eagerly in PyTorch: %s",
                   label, reason)
    return gm.forward


def _tilecraft_call(converted: Any, exe: Any) -> Callable[..., tuple]:
    """Tensors in, the FX outputs (a tuple) out, through the compiled executable."""
    import numpy as np
    import torch

    names, slots = converted.input_names, converted.output_slots
    shapes = converted.output_shapes
    several = len(converted.graph.outputs) > 1

    def call(*args: Any) -> tuple:
        arrays = {name: np.ascontiguousarray(arg.detach().numpy())
                  for name, arg in zip(names, args) if name is not None}
        result = exe(**arrays)
        results = result if several else (result,)
        tensors = [torch.from_numpy(np.asarray(r)) for r in results]
        return tuple(None if slot is None else tensors[slot].reshape(shape)
                     for slot, shape in zip(slots, shapes))

    return call


def _split(aten: Any, problems: Sequence[tuple[str, str, str]]) -> tuple[Any, int, int]:
    """``aten`` with its convertible regions (of two nodes or more) compiled by tilecraft, as
    submodules, the rest left to PyTorch: the module, the regions compiled and their kernels.
    A region that fails to convert or compile stays eager."""
    import torch
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    from tilecraft.api import compile as tc_compile
    from tilecraft.torch_backend.convert import supported_targets

    bad = {node for node, _, _ in problems}
    known = set(supported_targets())

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules: Any, node: Any) -> bool:
            return node.op == "call_function" and node.name not in bad and \
                str(node.target) in known

    partitioner = CapabilityBasedPartitioner(aten, Support(),
                                             allows_single_node_partition=False)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    regions = kernels = 0
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not str(node.target).startswith("fused_"):
            continue
        sub = getattr(fused, node.target)
        examples = [arg.meta.get("val") for arg in node.args]
        try:
            converted = convert_graph(sub, examples)
            exe = tc_compile(converted.graph, target=_target())
        except Exception as err:  # noqa: BLE001 - this region stays eager, said why
            LOGGER.warning("torch.compile backend 'tilecraft': region %s stays eager: %s: %s",
                           node.target, type(err).__name__, err)
            continue
        call = _tilecraft_call(converted, exe)
        single = not isinstance(sub.graph.output_node().args[0], (list, tuple))

        class Region(torch.nn.Module):
            def forward(self, *args: Any, call: Any = call, single: bool = single) -> Any:
                out = call(*args)
                return out[0] if single else out

        setattr(fused, node.target, Region())
        regions += 1
        kernels += len(exe.compiled)
    fused.recompile()
    return fused, regions, kernels


def convert_graph(gm: Any, example_inputs: Sequence[Any]) -> Any:
    from tilecraft.torch_backend.convert import convert

    return convert(gm, example_inputs)


def tilecraft_backend(gm: Any, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
    """The dynamo backend: ``gm`` (a captured ``torch.fx.GraphModule``) compiled by tilecraft
    — whole, or in its convertible regions with the rest left to PyTorch — or ``gm.forward``
    with the reason logged (see the module docstring)."""
    import torch

    from tilecraft.api import compile as tc_compile
    from tilecraft.errors import TilecraftError
    from tilecraft.torch_backend.convert import UnsupportedGraph

    label = f"graph {len(DECISIONS) + 1} ({len(gm.graph.nodes)} FX nodes)"
    if any(getattr(t, "device", None) is not None and t.device.type != "cpu"
           for t in example_inputs if isinstance(t, torch.Tensor)):
        return _eager(gm, label, "inputs are not on the CPU")
    try:
        aten = _aten_graph(gm, example_inputs)
    except Exception as err:  # noqa: BLE001 - tracing failures of any kind fall back
        return _eager(gm, label, f"tracing to ATen failed: {type(err).__name__}: {err}")
    try:
        converted = convert_graph(aten, example_inputs)
    except UnsupportedGraph as err:
        try:
            split, regions, kernels = _split(aten, err.problems)
        except Exception as split_err:  # noqa: BLE001 - the whole graph falls back
            return _eager(gm, label, f"{err}; splitting failed: {split_err}")
        if not regions:
            return _eager(gm, label, str(err))
        DECISIONS.append(Decision(label, "split", str(err), kernels=kernels, regions=regions))
        LOGGER.warning("torch.compile backend 'tilecraft': %s split: %d region(s) compiled "
                       "(%d kernels), the rest runs eagerly in PyTorch: %s", label, regions,
                       kernels, err)
        return _guarded(gm, split.forward, label)
    try:
        exe = tc_compile(converted.graph, target=_target())
    except TilecraftError as err:
        return _eager(gm, label, f"compile failed: {type(err).__name__}: {err}")
    DECISIONS.append(Decision(label, "tilecraft", kernels=len(exe.compiled), regions=1))
    LOGGER.info("torch.compile backend 'tilecraft': %s compiled, %d kernels", label,
                len(exe.compiled))
    return _guarded(gm, _tilecraft_call(converted, exe), label)


def _guarded(gm: Any, compiled: Callable[..., Any], label: str) -> Callable[..., Any]:
    """``compiled``, except while autograd records (then ``gm`` eagerly, said once)."""
    import torch

    warned: list[bool] = []

    def run(*args: Any) -> Any:
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in args):
            if not warned:
                warned.append(True)
                LOGGER.warning("torch.compile backend 'tilecraft': %s runs eagerly while "
                               "autograd records (inference only: call under "
                               "torch.no_grad() or torch.inference_mode())", label)
            return gm.forward(*args)
        return compiled(*args)

    return run
