"""Names that explain themselves: a class name the public API uses is defined once, across the
core and every target plugin (two ``CompiledKernel`` classes once meant three different things)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: class names that must name exactly one class in the core and the plugins
DEFINED_ONCE = ("CompiledKernel", "InterpretedKernel", "NativeKernel", "Executable", "Chain",
                "ContractionChain")


def _class_definitions(name: str) -> list[str]:
    packages = [ROOT / "core", *sorted((ROOT / "plugins").glob("*/tilecraft_*"))]
    found = []
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
                      if isinstance(node, ast.ClassDef) and node.name == name]
    return found


def test_each_name_is_one_class() -> None:
    where = {name: _class_definitions(name) for name in DEFINED_ONCE}
    assert {name: len(places) for name, places in where.items()} == \
        dict.fromkeys(DEFINED_ONCE, 1), where
    assert where["CompiledKernel"][0].startswith("core/runtime/executable.py:")
    # Chimera's chain is the core's; the x86 blocking's GEMM chain has a name of its own
    assert where["Chain"][0].startswith("core/fusion/chain.py:")


def test_microkernel_names_only_the_replaceable_micro_kernels() -> None:
    """In the core "microkernel" is thesis §3.4.1.2's replaceable micro-kernel (its
    declaration) and nothing else: a target's blocking around micro-kernels is the target's."""
    named = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "core").rglob("*microkernel*")
                   if "__pycache__" not in path.parts)
    assert named == ["core/target/microkernel.py"], named
