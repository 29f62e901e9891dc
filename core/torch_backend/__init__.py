"""A ``torch.compile`` backend (the optional extra ``tilecraft[torch]``):

>>> import torch  # doctest: +SKIP
>>> fast = torch.compile(model.eval(), backend="tilecraft")  # doctest: +SKIP
>>> with torch.no_grad():  # doctest: +SKIP
...     y = fast(x)

Registered through the ``torch_dynamo_backends`` entry point. Each graph dynamo captures is
traced to ATen operators (``make_fx`` with the core ATen decompositions), converted to a
tilecraft Graph (:mod:`tilecraft.torch_backend.convert`) and compiled for the host's best
target (``TILECRAFT_TORCH_TARGET`` names another). Calls convert tensors to numpy arrays and
back, without copies where the tensors are contiguous CPU float tensors.

The module's parameters and buffers are frozen (inference): the FX placeholders dynamo lifted
from them (their source is a module's ``_parameters`` / ``_buffers``) become ``te.constant``
tensors holding a copy of their values at compile time, so the graph passes fold what reads
only them (transposed weights, batch norm into the convolution before it) once, and the
Executable runs each kernel that reads only constants (a template's weight packing) once,
at load. Dynamo's guards recompile when the module's structure, a parameter's shape, dtype,
stride or ``requires_grad`` change, not when its *values* do; so each call also checks that
every frozen parameter is still the same tensor, at the same address, with the same version
counter (``Tensor._version``, which every in-place write bumps: ``optimizer.step()``,
``load_state_dict``, ``p.mul_(2)`` under ``no_grad``, writes through views). On the first
difference, the graph is compiled again with the weights as inputs, read from the module at
every call (logged at WARNING), and that version serves from then on. Writes that move no
version counter go unseen: through ``p.data`` (its own counter) and, inside
``torch.inference_mode()``, into parameters created there (inference tensors have none);
after such a write, call ``torch._dynamo.reset()``. ``TILECRAFT_TORCH_FREEZE=0`` keeps the
weights inputs from the start.

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
    #: the module's parameters and buffers the compiled graph holds as constants
    frozen: int = 0


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


def _freeze() -> bool:
    return os.environ.get("TILECRAFT_TORCH_FREEZE", "1").strip().lower() not in (
        "0", "false", "no", "off")


def _parameter_positions(gm: Any, example_inputs: Sequence[Any]) -> list[int]:
    """Positions of ``gm``'s placeholders that dynamo lifted from a module's parameters or
    buffers (empty when freezing is off)."""
    if not _freeze():
        return []
    import torch
    from torch._dynamo.source import is_from_unspecialized_param_buffer_source

    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    positions = []
    for index, node in enumerate(placeholders[:len(example_inputs)]):
        source = getattr(node.meta.get("grapharg"), "source", None)
        if source is not None and is_from_unspecialized_param_buffer_source(source) and \
                isinstance(example_inputs[index], torch.Tensor):
            positions.append(index)
    return positions


def _compiled(aten: Any, examples: Sequence[Any], positions: Sequence[int],
              label: str) -> tuple[Callable[..., tuple], int]:
    """``aten`` converted and compiled by tilecraft, its placeholders at ``positions`` frozen
    (guarded: see the module docstring): the call and its number of kernels. Raises
    :class:`~tilecraft.torch_backend.convert.UnsupportedGraph` or the compile's error."""
    from tilecraft.api import compile as tc_compile

    converted = convert_graph(aten, examples, positions)
    exe = tc_compile(converted.graph, target=_target())
    call = _tilecraft_call(converted, exe)
    if positions:
        call = _guard_frozen(call, examples, positions, label,
                             lambda: _compiled(aten, examples, (), label)[0])
    return call, len(exe.compiled)


def _guard_frozen(call: Callable[..., tuple], examples: Sequence[Any],
                  positions: Sequence[int], label: str,
                  unfrozen: Callable[[], Callable[..., tuple]]) -> Callable[..., tuple]:
    """``call`` while every frozen argument is the tensor it was compiled with, unchanged;
    from the first change on, ``unfrozen()`` (compiled once, then kept)."""
    watched = [(index, examples[index], _version(examples[index]), examples[index].data_ptr())
               for index in positions]
    current: list[Callable[..., tuple]] = []

    def run(*args: Any) -> tuple:
        if current:
            return current[0](*args)
        for index, tensor, version, address in watched:
            arg = args[index]
            if arg is not tensor or _version(arg) != version or arg.data_ptr() != address:
                LOGGER.warning("torch.compile backend 'tilecraft': %s: a frozen parameter or "
                               "buffer (input %d) changed since it was compiled; compiling "
                               "again with the weights as inputs", label, index)
                current.append(unfrozen())
                return current[0](*args)
        return call(*args)

    return run


def _version(tensor: Any) -> int | None:
    """The version counter of ``tensor`` (``None`` for an inference tensor, which has none)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


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


def _split(aten: Any, problems: Sequence[tuple[str, str, str]], example_inputs: Sequence[Any],
           frozen: Sequence[int], label: str) -> tuple[Any, int, int]:
    """``aten`` with its convertible regions (of two nodes or more) compiled by tilecraft, as
    submodules, the rest left to PyTorch: the module, the regions compiled and their kernels.
    A region that fails to convert or compile stays eager. A region argument that is one of
    ``aten``'s placeholders at a ``frozen`` position is frozen in that region."""
    import torch
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    from tilecraft.torch_backend.convert import supported_targets

    placeholders = {node.name: index for index, node in enumerate(
        n for n in aten.graph.nodes if n.op == "placeholder")}
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
        examples, positions = [], []
        for position, arg in enumerate(node.args):
            index = placeholders.get(arg.name) if arg.op == "placeholder" else None
            if index is not None and index in frozen:
                examples.append(example_inputs[index])
                positions.append(position)
            else:
                examples.append(arg.meta.get("val"))
        try:
            call, count = _compiled(sub, examples, positions, f"{label}, {node.target}")
        except Exception as err:  # noqa: BLE001 - this region stays eager, said why
            LOGGER.warning("torch.compile backend 'tilecraft': region %s stays eager: %s: %s",
                           node.target, type(err).__name__, err)
            continue
        single = not isinstance(sub.graph.output_node().args[0], (list, tuple))

        class Region(torch.nn.Module):
            def forward(self, *args: Any, call: Any = call, single: bool = single) -> Any:
                out = call(*args)
                return out[0] if single else out

        setattr(fused, node.target, Region())
        regions += 1
        kernels += count
    fused.recompile()
    return fused, regions, kernels


def convert_graph(gm: Any, example_inputs: Sequence[Any], constants: Sequence[int] = ()
                  ) -> Any:
    from tilecraft.torch_backend.convert import convert

    return convert(gm, example_inputs, constants)


def tilecraft_backend(gm: Any, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
    """The dynamo backend: ``gm`` (a captured ``torch.fx.GraphModule``) compiled by tilecraft
    — whole, or in its convertible regions with the rest left to PyTorch — or ``gm.forward``
    with the reason logged (see the module docstring)."""
    import torch

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
    frozen = _parameter_positions(gm, example_inputs)
    try:
        call, kernels = _compiled(aten, example_inputs, frozen, label)
    except UnsupportedGraph as err:
        try:
            split, regions, kernels = _split(aten, err.problems, example_inputs, frozen, label)
        except Exception as split_err:  # noqa: BLE001 - the whole graph falls back
            return _eager(gm, label, f"{err}; splitting failed: {split_err}")
        if not regions:
            return _eager(gm, label, str(err))
        DECISIONS.append(Decision(label, "split", str(err), kernels=kernels, regions=regions))
        LOGGER.warning("torch.compile backend 'tilecraft': %s split: %d region(s) compiled "
                       "(%d kernels), the rest runs eagerly in PyTorch: %s", label, regions,
                       kernels, err)
        return _guarded(gm, split.forward, label)
    except TilecraftError as err:
        return _eager(gm, label, f"compile failed: {type(err).__name__}: {err}")
    DECISIONS.append(Decision(label, "tilecraft", kernels=kernels, regions=1,
                              frozen=len(frozen)))
    LOGGER.info("torch.compile backend 'tilecraft': %s compiled, %d kernels, %d parameters "
                "and buffers frozen", label, kernels, len(frozen))
    return _guarded(gm, call, label)


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
