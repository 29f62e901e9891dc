"""The search space of the fpga_hls template (thesis §4.3.2 and §4.5): FlexTensor's engines
explore the PE array's shape (which spatial axis carries ``Tm`` rows and how many, which
reduce axis the ``Tn``-input adder tree sums and how wide), the other spatial axes' buffer
tiles, the loop order (which loops the pipeline walks) and the BRAM partitioning (banks per
PE: fewer banks save BRAM and raise the II through the ports); the model (estimate mode)
costs each point, and a design that does not fit the device is a failed candidate whose
reason names the resource.

>>> from tilecraft import ops, te
>>> C = ops.matmul(te.placeholder((64, 48), name="A"), te.placeholder((48, 40), name="B"))
>>> space = contraction_space(C)
>>> config = space.decode(space.space.random_point(__import__("numpy").random.default_rng(0)))
>>> sorted(config)
['banks', 'lanes', 'order', 'pe_in', 'pe_out', 'tiles', 'tm', 'tn']
"""

from __future__ import annotations

from typing import Any

from tilecraft.target.base import TemplateSpace
from tilecraft.te.tensor import Tensor
from tilecraft_fpga_hls.template.contraction import as_contraction

__all__ = ["contraction_space"]

#: PE rows and adder-tree widths tried: powers of two, and FPGA'15's 7 (3 and 7 fit odd
#: channel counts)
UNROLLS = (1, 2, 3, 4, 7, 8, 16, 32, 64, 128)
TILES = (1, 2, 4, 8, 13, 16, 27, 32, 55, 64)
#: elements per cycle in the read and write stages (16 float32 fill a 512-bit AXI beat)
LANES = (1, 2, 4, 8, 16)


def _choices(options: tuple[int, ...], extent: int) -> list[int]:
    """``options`` up to ``extent``, and ``extent`` itself (one tile)."""
    return sorted({o for o in options if o < extent} | {extent})


def contraction_space(tensor: Tensor) -> TemplateSpace | None:
    """The template's space for ``tensor``, or ``None`` where the template does not apply."""
    from tilecraft.search import ChoiceSpace, Space

    view = as_contraction(tensor)
    if view is None or not view.out_axes:
        return None
    extents = {a.name: a.extent for a in (*tensor.axes, *tensor.reduce_axes)}
    shapes = [(out, tm) for out in view.out_axes for tm in _choices(UNROLLS, extents[out])]
    trees: list[tuple[str | None, int]] = [
        (inner, tn) for inner in view.in_axes for tn in _choices(UNROLLS, extents[inner])]
    parts: list[tuple[str, Any]] = [("pe", ChoiceSpace(shapes)),
                                    ("tree", ChoiceSpace(trees or [(None, 1)]))]
    tiled = [a.name for a in tensor.axes if a.extent > 1]
    for name in tiled:
        parts.append((f"tile_{name}", ChoiceSpace(_choices(TILES, extents[name]))))
    orders = ["spatial", "reduce"] if len(view.in_axes) > 1 else ["spatial"]
    parts += [("order", ChoiceSpace(orders)), ("banks", ChoiceSpace([1, 2])),
              ("lanes", ChoiceSpace(LANES))]
    space = Space(parts)

    def decode(point: Any) -> dict[str, Any]:
        values = space.values(point)
        (out, tm), (inner, tn) = values["pe"], values["tree"]
        tiles = {name: values[f"tile_{name}"] for name in tiled if name != out}
        return {"pe_out": out, "tm": tm, "pe_in": inner, "tn": tn, "tiles": tiles,
                "order": values["order"], "banks": values["banks"], "lanes": values["lanes"]}

    return TemplateSpace(space, decode)
