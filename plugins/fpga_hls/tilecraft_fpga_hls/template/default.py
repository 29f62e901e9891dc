"""The default design of a contraction, chosen by the model: what ``tc.compile(graph,
target="fpga_hls")`` builds when nothing was tuned.

A small, deterministic search on the template's own space (:mod:`.space`): coordinate descent
— from a start point, try every value of one sub-space at a time (PE shape, adder tree, each
tile, order, banks, lanes) with the others held, keep the fastest feasible design, and repeat
until no single change helps (at most ``rounds`` sweeps). Every point is costed by the model
on the target's device (:mod:`..model`); designs that do not fit it cost infinity. Two start
points: whole-extent tiles and a 1 x 1 array, and the same with the smallest tiles, so a
compute too large for the device's BRAM still finds a design. A few hundred model calls at
most (about a millisecond each), no processes.

>>> from tilecraft import ops, te
>>> from tilecraft_fpga_hls.device import ZU7EV
>>> C = ops.matmul(te.placeholder((64, 48), name="A"), te.placeholder((48, 40), name="B"))
>>> choice = model_default_design(C, ZU7EV)
>>> choice.estimate.feasible, choice.config["tm"] * choice.config["tn"] > 1
(True, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tilecraft.errors import TilecraftError
from tilecraft.te.tensor import Tensor
from tilecraft_fpga_hls.device import DeviceSpec
from tilecraft_fpga_hls.model import DesignEstimate, estimate_design
from tilecraft_fpga_hls.template.contraction import as_contraction, lower_contraction
from tilecraft_fpga_hls.template.space import contraction_space

__all__ = ["DefaultDesign", "model_default_design"]


@dataclass(frozen=True)
class DefaultDesign:
    """The design the model chose: its template config, its estimate and how many designs
    were costed."""

    config: dict[str, Any]
    estimate: DesignEstimate
    evaluated: int

    def summary(self) -> str:
        """One line for the compile report: the PE array, predicted time and resources."""
        cfg, est = self.config, self.estimate
        tree = f"{cfg['pe_in']} x {cfg['tn']}" if cfg["pe_in"] else "no tree"
        capacity = est.capacity()
        dsp, bram = capacity["DSP slices"], capacity["BRAM18K blocks"]
        return (f"fpga_hls contraction chosen by the model ({self.evaluated} designs costed): "
                f"PE array {cfg['pe_out']} x {cfg['tm']} rows, adder tree {tree}, tiles "
                f"{cfg['tiles']}, order {cfg['order']}, banks {cfg['banks']}, lanes "
                f"{cfg['lanes']}; predicted {est.seconds * 1e6:.1f} us ({est.cycles:.0f} "
                f"cycles at {est.device.clock_hz / 1e6:g} MHz on the {est.device.name}), "
                f"DSP {dsp[0]:.0f}/{dsp[1]:.0f}, BRAM18K {bram[0]:.0f}/{bram[1]:.0f}")


def model_default_design(tensor: Tensor, device: DeviceSpec,
                         rounds: int = 4) -> DefaultDesign | None:
    """The fastest design coordinate descent finds for ``tensor`` on ``device`` (module
    docstring), or ``None`` where the template does not apply or nothing fits."""
    template = contraction_space(tensor)
    view = as_contraction(tensor)
    if template is None or view is None:
        return None
    space = template.space
    costs: dict[tuple[int, ...], tuple[float, DesignEstimate | None]] = {}

    def cost(point: tuple[int, ...]) -> float:
        if point not in costs:
            try:
                estimate = estimate_design(lower_contraction(view, template.decode(point)),
                                           device)
            except TilecraftError:  # a config the template refuses: not a candidate
                costs[point] = (math.inf, None)
            else:
                costs[point] = (estimate.seconds if estimate.feasible else math.inf, estimate)
        return costs[point][0]

    names = space.names
    sizes = space.sizes
    best: tuple[int, ...] | None = None
    for smallest_tiles in (False, True):
        point = tuple(0 if smallest_tiles or not name.startswith("tile_") else sizes[name] - 1
                      for name in names)
        point = _descend(point, names, sizes, cost, rounds)
        if best is None or cost(point) < cost(best):
            best = point
    if best is None or math.isinf(cost(best)):
        return None
    estimate = costs[best][1]
    assert estimate is not None
    return DefaultDesign(dict(template.decode(best)), estimate, len(costs))


def _descend(point: tuple[int, ...], names: tuple[str, ...], sizes: dict[str, int],
             cost: Any, rounds: int) -> tuple[int, ...]:
    for _ in range(rounds):
        improved = False
        for position, name in enumerate(names):
            for index in range(sizes[name]):
                candidate = point[:position] + (index,) + point[position + 1:]
                if cost(candidate) < cost(point):
                    point, improved = candidate, True
        if not improved:
            break
    return point
