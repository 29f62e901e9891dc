"""Target names with a variant (``"name:variant"``): the registry asks the target for it
(``Target.with_variant``) without knowing what a variant is; a target without variants refuses
one; broken variants are reported as the plugin's fault."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tilecraft.errors import PluginError, TargetError
from tilecraft.target import Availability, Source, Target, TargetSpec, load_spec
from tilecraft.target.registry import (
    TargetInfo,
    TargetStatus,
    format_variants,
    get_target,
    register_target,
    unregister_target,
)

SPEC = {
    "name": "toy", "api_version": 1, "version": "1.0",
    "memory": {"levels": [{"name": "DRAM", "size_bytes": None,
                           "bandwidth_bytes_per_cycle": 8}]},
    "compute": {"cores": 1, "frequency_hz": 1e9, "vector_bits": 0},
    "primitives": ["split"], "loop_kinds": ["serial"], "evaluation": "estimate",
    "capabilities": {"models_performance": True, "emulates": True},
}


class Toy(Target):
    """A target whose variants are chip sizes: ``toy:big`` has 8 cores."""

    SIZES = {"small": 1, "big": 8}

    def __init__(self, size: str | None = None, spec_name: str = "toy") -> None:
        self.size = size
        cores = self.SIZES[size] if size else 1
        self._spec = load_spec(dict(SPEC, name=spec_name,
                                    compute=dict(SPEC["compute"], cores=cores)))

    @property
    def spec(self) -> TargetSpec:
        return self._spec

    @property
    def name(self) -> str:
        return "toy" if self.size is None else f"toy:{self.size}"

    def available(self) -> Availability:
        return Availability(codegen=True, build=False, execute=False, emulate=True)

    def codegen(self, kernel):  # pragma: no cover - not used here
        return Source(self.name, kernel.name, "text", "", kernel.name)

    def variants(self) -> dict[str, str]:
        return {size: f"{cores} cores" for size, cores in self.SIZES.items()}

    def with_variant(self, variant: str) -> Target:
        if variant == "crash":
            raise ZeroDivisionError("a bug in the plugin")
        if variant == "renamed":
            return Toy("big", spec_name="other")
        if variant == "nothing":
            return 3  # type: ignore[return-value]
        if variant not in self.SIZES:
            return super().with_variant(variant)
        return Toy(variant)


class Plain(Toy):
    def variants(self) -> dict[str, str]:
        return {}

    def with_variant(self, variant: str) -> Target:
        return Target.with_variant(self, variant)


@pytest.fixture
def toy() -> Iterator[Toy]:
    target = Toy()
    register_target(target)
    yield target
    unregister_target("toy")


def test_a_variant_is_made_by_its_target_once(toy: Toy) -> None:
    big = get_target("toy:big")
    assert isinstance(big, Toy) and big.name == "toy:big" and big.spec.compute.cores == 8
    assert get_target("toy:big") is big
    assert get_target("toy") is toy
    line = format_variants([TargetInfo(name="toy", status=TargetStatus.OK, target=toy)])
    assert line == "toy:<variant> for another machine; variants: big, small"


def test_unknown_and_malformed_variants(toy: Toy) -> None:
    with pytest.raises(TargetError, match="target toy has no variant 'huge'; its variants "
                                          "are big, small"):
        get_target("toy:huge")
    with pytest.raises(TargetError, match="malformed"):
        get_target("toy:")
    with pytest.raises(TargetError, match="unknown target 'nope'"):
        get_target("nope:big")


def test_broken_variants_are_the_plugins_fault(toy: Toy) -> None:
    with pytest.raises(PluginError, match="failed to make its variant 'crash': "
                                          "ZeroDivisionError: a bug in the plugin"):
        get_target("toy:crash")
    with pytest.raises(PluginError, match="returned int, not a Target"):
        get_target("toy:nothing")
    with pytest.raises(PluginError, match="entry point is named 'toy' but its spec is named "
                                          "'other'"):
        get_target("toy:renamed")


def test_a_target_without_variants_refuses_one() -> None:
    register_target(Plain())
    try:
        with pytest.raises(TargetError, match="target toy has no variants, so toy:big names "
                                              "nothing; use target 'toy'"):
            get_target("toy:big")
        assert format_variants([TargetInfo(name="toy", status=TargetStatus.OK,
                                           target=Plain())]) == ""
    finally:
        unregister_target("toy")
