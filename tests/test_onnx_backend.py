"""A fast, representative subset of ONNX's own backend node tests in the default run (one or
two cases per operator family, ~0.25 s each: every case compiles for the host's best target);
tests/test_onnx_backend_full.py runs all of the included ones (slow)."""

import pytest

pytest.importorskip("onnx")
pytest.importorskip("llvmlite")

import runpy  # noqa: E402
from pathlib import Path  # noqa: E402

import onnx.backend.test  # noqa: E402

from tilecraft.onnx_backend import TilecraftBackend  # noqa: E402

_LISTS = runpy.run_path(str(Path(__file__).with_name("onnx_node_tests.py")))
EXCLUDE = _LISTS["EXCLUDE"]

backend_test = onnx.backend.test.BackendTest(TilecraftBackend, __name__)
FAST = ["relu", "add_bcast", "sub", "mul", "div", "pow", "sqrt", "exp", "erf", "sigmoid",
        "tanh", "gelu_default_1", "matmul_2d", "matmul_4d", "gemm_all_attributes",
        "conv_with_strides_padding",
        "convtranspose_pads", "batchnorm_example", "layer_normalization_4d_axis1",
        "softmax_axis_1", "reshape_negative_dim", "transpose_default", "concat_2d_axis_1",
        "split_equal_parts_1d_opset18", "slice_neg_steps", "gather_1", "flatten_axis1",
        "squeeze", "unsqueeze_axis_1", "maxpool_2d_pads", "averagepool_2d_pads",
        "globalaveragepool", "reduce_mean_keepdims_example", "reduce_sum_keepdims_example",
        "reduce_max_keepdims_example", "depthtospace_crd_mode_example", "constant_pad",
        "cast_FLOAT_to_INT32", "where_example", "clip", "expand_dim_changed", "equal",
        "argmax_keepdims_example", "hardmax_example", "reduce_l2_do_not_keepdims_example",
        "instancenorm_example", "prelu_broadcast", "tril", "tile_precomputed",
        "resize_upsample_scales_linear", "attention_3d_gqa_causal",
        "attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal"]
for name in FAST:
    backend_test.include(rf"^test_{name}_cpu$")
for pattern in EXCLUDE:
    backend_test.exclude(pattern)

# the node tests only (the model and real-model cases download or need other operators)
OnnxBackendNodeModelTest = backend_test.test_cases["OnnxBackendNodeModelTest"]
