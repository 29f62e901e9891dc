"""tilecraft: a compiler for AI workloads on AI chips.

>>> import tilecraft as tc
>>> from tilecraft import te
>>> A = te.placeholder((4,), name="A")
>>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
>>> print(tc.Graph.from_outputs([B]))
graph(A: float32[4]) -> (B):
  B[i] = A[i] * 2.0
"""

from __future__ import annotations

import importlib
from typing import Any

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import TilecraftError

__version__ = "0.1.0"

# Names resolved on first use, so that `import tilecraft` stays cheap and plugins are never
# loaded as an import side effect.
_LAZY = {
    "Graph": ("tilecraft.graph", "Graph"),
    "compile": ("tilecraft.api", "compile"),
    "from_onnx": ("tilecraft.onnx.loader", "from_onnx"),
    "Executable": ("tilecraft.runtime.executable", "Executable"),
    "list_targets": ("tilecraft.target.registry", "list_targets"),
    "get_target": ("tilecraft.target.registry", "get_target"),
    "ops": ("tilecraft.ops", None),
    "reference": ("tilecraft.reference", None),
    "autodiff": ("tilecraft.autodiff", None),
    "kernel_ir": ("tilecraft.kernel_ir", None),
    "lower": ("tilecraft.lower", None),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tilecraft' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


__all__ = ["DType", "TilecraftError", "te", "__version__", *_LAZY]
