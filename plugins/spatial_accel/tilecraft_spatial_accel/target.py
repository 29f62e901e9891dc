"""The target object of a spec file: a declared target with no code generator, evaluated by
tilecraft.dataflow's tree model only (capability "model only": ``tilecraft.compile`` refuses it,
``tilecraft.dataflow.analyze_tree(tree, target.spec)`` estimates a fused dataflow on it)."""

from __future__ import annotations

from functools import cache
from importlib import resources

from tilecraft.target.base import Availability
from tilecraft.target.declared import DeclaredTarget
from tilecraft.target.spec import TargetSpec

_WHY = "data-only plugin: the accelerator exists as a spec for tilecraft.dataflow's model"


@cache
def load_spec_file(filename: str) -> TargetSpec:
    """The validated spec in the package file ``filename``."""
    path = resources.files("tilecraft_spatial_accel") / filename
    return TargetSpec.from_yaml(path, plugin="spatial_accel")


class SpatialAccelTarget(DeclaredTarget):
    """One accelerator of Table 3.7."""

    availability = Availability(codegen=False, build=False, execute=False, emulate=False,
                                estimate=True, reasons={"codegen": _WHY, "execute": _WHY,
                                                        "emulate": _WHY})

    def __init__(self, filename: str):
        self._filename = filename

    @property
    def spec(self) -> TargetSpec:
        return load_spec_file(self._filename)

    @property
    def name(self) -> str:
        return self.spec.name


__all__ = ["SpatialAccelTarget", "load_spec_file"]
