"""FlexTensor's searched design against the FPGA'15 design on one device, by the same model
(thesis §4.7.3: FlexTensor 1.5x over the FPGA'15 design on a VU9P).

The FPGA'15 design point moved to another device (:func:`fpga15_config`) keeps its shape —
``Tn = 7`` input channels per adder tree, output channels on the PE rows, whole-layer
``Tr x Tc`` tiles — and takes the same share of the device's DSP slices as on the VC707
(2240 of 2800, 80%): ``Tm = floor(0.8 x DSP slices / (5 DSP per float MAC x Tn))``, 156 on
the VU9P (1092 MACs, 5460 DSP slices). The searched design is the best the core's tuner finds
in the template's space (:mod:`..template.space`) in estimate mode: the same model costs both.

>>> from tilecraft_fpga_hls.device import VU9P
>>> from tilecraft_fpga_hls.published.fpga15 import ALEXNET
>>> fpga15_config(ALEXNET[2], VU9P)["tm"]
156
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilecraft_fpga_hls.device import DeviceSpec
from tilecraft_fpga_hls.model import DesignEstimate
from tilecraft_fpga_hls.published.fpga15 import (
    DESIGN_TN,
    VC707,
    ConvLayer,
    design_config,
    layer_compute,
    project_estimate,
)
from tilecraft_fpga_hls.resources import dsp_per_mac

__all__ = ["LayerComparison", "YOLO_V1", "compare_layer", "fpga15_config"]

#: the DSP share of the FPGA'15 design on its VC707 (2240 of 2800 slices)
FPGA15_DSP_SHARE = 64 * DESIGN_TN * 5 / VC707.dsp_slices

#: YOLO-v1's 24 conv layers (Redmon et al. 2016, Fig. 3) as distinct shapes, one group each
#: (m output, n input channels, r x c outputs, k x k kernels, stride s): the 448 x 448 input
YOLO_V1 = (
    ConvLayer("yolo_conv1", m=64, n=3, r=224, c=224, k=7, s=2, groups=1),
    ConvLayer("yolo_conv2", m=192, n=64, r=112, c=112, k=3, s=1, groups=1),
    ConvLayer("yolo_conv3", m=128, n=192, r=56, c=56, k=1, s=1, groups=1),
    ConvLayer("yolo_conv4", m=256, n=128, r=56, c=56, k=3, s=1, groups=1),
    ConvLayer("yolo_conv5", m=256, n=256, r=56, c=56, k=1, s=1, groups=1),
    ConvLayer("yolo_conv6", m=512, n=256, r=56, c=56, k=3, s=1, groups=1),
    ConvLayer("yolo_conv7", m=256, n=512, r=28, c=28, k=1, s=1, groups=1),
    ConvLayer("yolo_conv8", m=512, n=256, r=28, c=28, k=3, s=1, groups=1),
    ConvLayer("yolo_conv9", m=512, n=512, r=28, c=28, k=1, s=1, groups=1),
    ConvLayer("yolo_conv10", m=1024, n=512, r=28, c=28, k=3, s=1, groups=1),
    ConvLayer("yolo_conv11", m=512, n=1024, r=14, c=14, k=1, s=1, groups=1),
    ConvLayer("yolo_conv12", m=1024, n=512, r=14, c=14, k=3, s=1, groups=1),
    ConvLayer("yolo_conv13", m=1024, n=1024, r=14, c=14, k=3, s=1, groups=1),
    ConvLayer("yolo_conv14", m=1024, n=1024, r=7, c=7, k=3, s=2, groups=1),
    ConvLayer("yolo_conv15", m=1024, n=1024, r=7, c=7, k=3, s=1, groups=1),
)


def fpga15_config(layer: ConvLayer, device: DeviceSpec) -> dict[str, Any]:
    """The FPGA'15 design point for ``layer`` scaled to ``device`` (module docstring), with the
    largest row tile ``Tr`` (whole, or one of the template's tiles) whose buffers fit the
    device, as the paper chooses ``Tr x Tc`` under the BRAM budget."""
    from tilecraft_fpga_hls.template.space import TILES

    macs = FPGA15_DSP_SHARE * device.dsp_slices / dsp_per_mac(layer_compute(layer).dtype)
    config = design_config(layer, tm=max(1, int(macs // DESIGN_TN)), tn=DESIGN_TN)
    for rows in sorted({layer.r, *(t for t in TILES if t < layer.r)}, reverse=True):
        candidate = {**config, "tiles": {"h": rows, "w": layer.c}}
        if project_estimate(layer, device, candidate).feasible:
            return candidate
    return config


@dataclass(frozen=True)
class LayerComparison:
    """One layer: the FPGA'15 design and the searched one on the same device and model."""

    layer: ConvLayer
    fpga15: DesignEstimate
    searched: DesignEstimate
    searched_config: dict[str, Any]
    search_seconds: float
    trials: int

    def gops(self, design: DesignEstimate) -> float:
        """Operations per second of ``design`` over all groups of the layer, in G."""
        return self.layer.operations / (design.seconds * self.layer.groups) / 1e9

    @property
    def speedup(self) -> float:
        return self.fpga15.seconds / self.searched.seconds


def compare_layer(layer: ConvLayer, device: DeviceSpec, trials: int, database: str | Path,
                  engine: str = "q", seed: int = 0) -> LayerComparison:
    """Tune ``layer`` (one group) with the core's tuner on the model of ``device`` (estimate
    mode, ``trials`` designs, recorded in ``database``) and cost the FPGA'15 design point
    beside it."""
    from tilecraft.tuning.tuner import tune
    from tilecraft_fpga_hls.model import estimate_design
    from tilecraft_fpga_hls.target import FpgaHlsTarget
    from tilecraft_fpga_hls.template import as_contraction, lower_contraction

    compute = layer_compute(layer)
    target = FpgaHlsTarget(device=device)
    started = time.perf_counter()
    result = tune(compute, target, {"trials": trials, "database": str(database),
                                    "engine": engine, "seed": seed, "progress": False},
                  skip=())
    seconds = time.perf_counter() - started
    (task,) = [t for t in result.tasks if t.compute == compute.name]
    if task.best_config is None:
        from tilecraft.tuning.workload import TuningError

        raise TuningError(f"fpga_hls: no feasible design for {layer.name} on the {device.name} "
                          f"in {trials} trials; search longer")
    view = as_contraction(compute)
    assert view is not None
    searched = estimate_design(lower_contraction(view, task.best_config), device)
    fpga15 = project_estimate(layer, device, fpga15_config(layer, device))
    return LayerComparison(layer, fpga15, searched, dict(task.best_config), seconds,
                           len(task.trials))
