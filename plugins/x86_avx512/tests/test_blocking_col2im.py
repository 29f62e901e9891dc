"""The col2im gather of a transposed convolution's scatter form, lowered phase by phase
(:mod:`tilecraft_x86_avx512.blocking.col2im`), in the Kernel IR interpreter against the
reference."""

import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.col2im import lower_col2im, phase_taps

from tilecraft import ops, te
from tilecraft.kernel_ir.interpreter import run_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.transposed_conv import as_transposed_conv, transposed_as_gemm
from tilecraft.reference import run

RNG = np.random.default_rng(7)

TRANSPOSED = [  # (nd, x shape, w shape, kwargs)
    (2, (1, 4, 5, 5), (4, 3, 4, 4), dict(stride=2, padding=1)),
    (2, (2, 3, 4, 3), (3, 2, 3, 3), dict(stride=1)),
    (2, (1, 4, 3, 5), (4, 1, 3, 2), dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                                         groups=2)),
    (2, (1, 3, 4, 4), (3, 5, 3, 3), dict(stride=2, dilation=2, padding=2)),
    (2, (1, 2, 3, 3), (2, 2, 1, 1), dict(stride=3)),  # taps miss some outputs entirely
    (1, (1, 5, 7), (5, 3, 5), dict(stride=2, padding=2, output_padding=1)),
    (3, (1, 2, 2, 3, 3), (2, 2, 2, 3, 2), dict(stride=2, padding=(0, 1, 0))),
]
BUILDERS = {1: ops.conv_transpose1d, 2: ops.conv_transpose2d, 3: ops.conv_transpose3d}


@pytest.mark.parametrize("nd, x_shape, w_shape, kwargs", TRANSPOSED)
def test_col2im_kernel_matches_reference(nd, x_shape, w_shape, kwargs):
    x = te.placeholder(x_shape, name="x")
    w = te.placeholder(w_shape, name="w")
    y = BUILDERS[nd](x, w, name="y", **kwargs)
    conv = as_transposed_conv(y)
    assert conv is not None
    inputs = {t.name: RNG.standard_normal(t.shape).astype(np.float32) for t in (x, w)}
    expected = run(y, **inputs)
    cols, _ = transposed_as_gemm(conv)
    cols_value = run(cols, **{t.name: inputs[t.name].reshape(t.shape) for t in cols.inputs})
    kernel = lower_col2im(conv, cols.name, LoweringOptions(vector_lanes=4, cores=2))
    out = np.full(y.shape, np.nan, np.float32)  # every element must be written
    run_kernel(kernel, {"y_cols": cols_value, "y": out})
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_phase_taps():
    assert phase_taps(1, stride=2, padding=1, dilation=1, kernel=4) == [(0, 1), (2, 0)]
    assert phase_taps(0, stride=3, padding=0, dilation=1, kernel=1) == [(0, 0)]
    assert phase_taps(1, stride=3, padding=0, dilation=1, kernel=1) == []
    assert phase_taps(0, stride=2, padding=0, dilation=2, kernel=3) == [(0, 0), (1, -1), (2, -2)]
