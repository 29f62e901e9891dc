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

What is not converted falls back to eager PyTorch for the *whole* captured graph (not split:
dynamo already splits at graph breaks, and one eager graph costs less than a round trip
through numpy per partition), with the reason logged once on the ``tilecraft.torch_backend``
logger at WARNING, naming every unsupported node; so does a call under autograd (inference
only: run under ``torch.no_grad()`` or ``torch.inference_mode()``), and a failed compile.
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
    """What one captured graph became: ``"tilecraft"`` (compiled, with its kernel count) or
    ``"eager"`` with the reason."""

    graph: str
    mode: str
    reason: str = ""
    kernels: int = 0


#: one entry per graph the backend was given, in order
DECISIONS: list[Decision] = []


def _target() -> Any:
    from tilecraft.target.registry import get_target

    name = os.environ.get("TILECRAFT_TORCH_TARGET")
    if name:
        return get_target(name)
    from tilecraft.onnx_backend import host_target

    return host_target()


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


def tilecraft_backend(gm: Any, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
    """The dynamo backend: ``gm`` (a captured ``torch.fx.GraphModule``) compiled by tilecraft,
    or ``gm.forward`` with the reason logged (see the module docstring)."""
    import numpy as np
    import torch

    from tilecraft.api import compile as tc_compile
    from tilecraft.errors import TilecraftError
    from tilecraft.torch_backend.convert import UnsupportedGraph, convert

    label = f"graph {len(DECISIONS) + 1} ({len(gm.graph.nodes)} FX nodes)"
    if any(getattr(t, "device", None) is not None and t.device.type != "cpu"
           for t in example_inputs if isinstance(t, torch.Tensor)):
        return _eager(gm, label, "inputs are not on the CPU")
    try:
        aten = _aten_graph(gm, example_inputs)
        converted = convert(aten, example_inputs)
    except UnsupportedGraph as err:
        return _eager(gm, label, str(err))
    except Exception as err:  # noqa: BLE001 - tracing failures of any kind fall back
        return _eager(gm, label, f"tracing to ATen failed: {type(err).__name__}: {err}")
    try:
        exe = tc_compile(converted.graph, target=_target())
    except TilecraftError as err:
        return _eager(gm, label, f"compile failed: {type(err).__name__}: {err}")
    DECISIONS.append(Decision(label, "tilecraft", kernels=len(exe.compiled)))
    LOGGER.info("torch.compile backend 'tilecraft': %s compiled, %d kernels", label,
                len(exe.compiled))
    names = converted.input_names
    slots = converted.output_slots
    shapes = converted.output_shapes
    several = len(converted.graph.outputs) > 1
    warned = []

    def run(*args: Any) -> Any:
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in args):
            if not warned:
                warned.append(True)
                LOGGER.warning("torch.compile backend 'tilecraft': %s runs eagerly while "
                               "autograd records (inference only: call under "
                               "torch.no_grad() or torch.inference_mode())", label)
            return gm.forward(*args)
        arrays = {name: np.ascontiguousarray(arg.detach().numpy())
                  for name, arg in zip(names, args) if name is not None}
        result = exe(**arrays)
        results = result if several else (result,)
        tensors = [torch.from_numpy(np.asarray(r)) for r in results]
        return tuple(None if slot is None else tensors[slot].reshape(shape)
                     for slot, shape in zip(slots, shapes))

    return run
