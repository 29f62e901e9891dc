"""ONNX's own backend node tests (onnx builds them in memory, offline) for every operator
tilecraft imports, compiled for the host's best target; known failures are listed with
reasons in tests/onnx_node_tests.py. Slow (each case compiles): `make test-slow`."""

import pytest

pytest.importorskip("onnx")
pytest.importorskip("llvmlite")

import runpy  # noqa: E402
from pathlib import Path  # noqa: E402

import onnx.backend.test  # noqa: E402

from tilecraft.onnx_backend import TilecraftBackend  # noqa: E402

_LISTS = runpy.run_path(str(Path(__file__).with_name("onnx_node_tests.py")))
INCLUDE, EXCLUDE = _LISTS["INCLUDE"], _LISTS["EXCLUDE"]

backend_test = onnx.backend.test.BackendTest(TilecraftBackend, __name__)
for pattern in INCLUDE:
    backend_test.include(pattern)
for pattern in EXCLUDE:
    backend_test.exclude(pattern)

# the node tests only (the model and real-model cases download or need other operators)
OnnxBackendNodeModelTest = pytest.mark.slow(backend_test.test_cases["OnnxBackendNodeModelTest"])
