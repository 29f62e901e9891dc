"""bench/validate_stream.py's TileFlow half (Stream itself needs its own environment)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "validate_stream.py"
_spec = importlib.util.spec_from_file_location("validate_stream", _SCRIPT)
vs = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = vs
_spec.loader.exec_module(vs)


def test_tileflow_trees_move_what_the_schedules_imply():
    ours = vs.run_tileflow()
    inputs = vs.M * vs.K + vs.K * vs.L + vs.L * vs.N  # A, B, D once (int8)
    assert ours["fused rows"]["dram_bytes"] == inputs  # C never leaves L1; B, D stay
    assert ours["layer by layer"]["dram_bytes"] == inputs + 2 * vs.M * vs.L  # C out and in
    assert ours["fused rows"]["cycles"] < ours["layer by layer"]["cycles"]


def test_stream_workload_is_the_same_chain():
    layers = vs.stream_workload()
    first, second = layers[0]["loop_dim_size"], layers[1]["loop_dim_size"]
    assert (first["OY"], first["C"], first["K"]) == (vs.M, vs.K, vs.L)
    assert (second["OY"], second["C"], second["K"]) == (vs.M, vs.L, vs.N)
    assert layers[1]["operand_source"]["I"] == [0]


def test_table_without_stream(capsys):
    assert vs.main([]) == 0
    assert "fused rows" in capsys.readouterr().out
