"""Named variants of the nvidia_tc target (``get_target("nvidia_tc:h100")``): the same plugin
with another chip's spec, declared in ``variants.yaml`` (name, description, spec file, and
the factor of its Tensor Core rates over the intrinsic declarations, which are A100's).

The default target stays the A100 (``spec.yaml``, sm_80). A variant changes the figures the
performance model and the build's occupancy use (its architecture is the first of its
``threads.residency``, so the build's own cubin is for it) — never the generated code.

>>> from tilecraft.target import get_target
>>> h100 = get_target("nvidia_tc:h100")
>>> h100.name, h100.spec.name, h100.spec.compute.cores, h100.spec.threads.architectures
('nvidia_tc:h100', 'nvidia_tc', 132, ('sm_90', 'sm_80'))
>>> h100.spec.intrinsic("wmma_m16n16k16_f16_f32").throughput_per_cycle
0.5
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib.resources import files

import yaml

from tilecraft.errors import PluginError, TargetError
from tilecraft.target.spec import TargetSpec

__all__ = ["VariantDecl", "known_variants", "load_variant_spec"]

VARIANTS_FILE = "variants.yaml"


@dataclass(frozen=True)
class VariantDecl:
    """One entry of ``variants.yaml``."""

    name: str
    description: str
    spec: str
    intrinsic_throughput_scale: float = 1.0


@functools.cache
def known_variants() -> dict[str, VariantDecl]:
    """The variants of ``variants.yaml`` by name (a PluginError naming the field otherwise)."""
    path = files("tilecraft_nvidia_tc") / "variants" / VARIANTS_FILE
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    found: dict[str, VariantDecl] = {}
    for entry in data.get("variants", ()):
        try:
            decl = VariantDecl(**entry)
        except TypeError as err:
            raise PluginError(f"plugin nvidia_tc: {path}: a variant entry {entry!r} is "
                              f"malformed ({err}); give name, description, spec and "
                              "optionally intrinsic_throughput_scale") from err
        found[decl.name] = decl
    return found


@functools.cache
def load_variant_spec(variant: str) -> TargetSpec:
    """The spec of ``variant``: its spec file with the plugin's intrinsics, their throughput
    scaled by the variant's factor."""
    from tilecraft_nvidia_tc.target import INTRINSIC_FILES, TARGET_NAME

    decl = known_variants().get(variant)
    if decl is None:
        raise TargetError(f"target {TARGET_NAME} has no variant {variant!r}; its variants are "
                          f"{', '.join(sorted(known_variants())) or 'none'}")
    package = files("tilecraft_nvidia_tc")
    spec = TargetSpec.from_yaml(
        package / "variants" / decl.spec, plugin=TARGET_NAME,
        intrinsic_files=[package / "intrinsics" / name for name in INTRINSIC_FILES])
    if decl.intrinsic_throughput_scale == 1.0:
        return spec
    scaled = tuple(
        intrinsic.model_copy(update={"throughput_per_cycle": intrinsic.throughput_per_cycle
                                     * decl.intrinsic_throughput_scale})
        if intrinsic.compute is not None else intrinsic for intrinsic in spec.intrinsics)
    return spec.model_copy(update={"intrinsics": scaled})
