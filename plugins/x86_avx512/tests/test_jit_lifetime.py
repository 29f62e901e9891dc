"""JIT engines freed while others are built: each MCJIT engine owns (and frees) the target
machine it is given, so sharing one machine between engines left it dangling once the first
engine died — LLVM crashed a few hundred compiles into a test run. Run in a subprocess: the
failure mode is a segfault."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc
import numpy as np
import tilecraft as tc
from tilecraft import ops, te
from tilecraft_x86_avx512 import build

build.JIT_CACHE_SIZE = 2          # evict early: engines die while new ones are built
for i in range(60):
    A = te.placeholder((8 + i, 16), name="A")
    B = te.placeholder((16, 24), name="B")
    exe = tc.compile(ops.relu(ops.matmul(A, B)), target="x86_avx512")
    a = np.ones((8 + i, 16), np.float32)
    b = np.ones((16, 24), np.float32)
    assert float(exe(a, b)[0, 0]) == 16.0
    del exe
    gc.collect()
print("ok")
"""


def test_engines_die_while_others_are_built():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok")
