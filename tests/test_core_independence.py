"""The core imports no target and depends on no target's toolchain (issue 20, item 2).

Every module of the ``tilecraft`` package is imported in a fresh interpreter in which the
target plugins and llvmlite cannot be imported: a core module that reaches for one fails here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = ("llvmlite", "tilecraft_x86_avx512", "tilecraft_nvidia_tc", "tilecraft_ascend_npu",
           "tilecraft_mali", "tilecraft_fpga_hls")

_SCRIPT = textwrap.dedent("""
    import importlib, pkgutil, sys
    for name in {blocked!r}:
        sys.modules[name] = None  # any import of it raises ImportError
    import tilecraft
    failed = []
    for info in pkgutil.walk_packages(tilecraft.__path__, "tilecraft."):
        try:
            importlib.import_module(info.name)
        except ImportError as err:
            failed.append(f"{{info.name}}: {{err}}")
    print("\\n".join(failed))
    raise SystemExit(1 if failed else 0)
""")


def test_every_core_module_imports_without_targets_or_llvmlite():
    result = subprocess.run([sys.executable, "-c", _SCRIPT.format(blocked=BLOCKED)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        "core modules that import a target plugin or llvmlite:\n" + result.stdout + result.stderr)


def test_core_distribution_does_not_depend_on_llvmlite():
    from importlib.metadata import requires

    needs = [req.split(";")[0].strip().lower() for req in requires("tilecraft") or []]
    assert not any(req.startswith("llvmlite") for req in needs), needs
