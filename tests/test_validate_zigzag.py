"""bench/validate_zigzag.py: TileFlow's single-layer analysis against ZigZag's cost model on the
same mappings (issue 17 item 5). Slow, and skipped where ZigZag (tilecraft[validate]) is not
installed."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

pytest.importorskip("zigzag", reason="ZigZag is not installed: pip install 'tilecraft[validate]'")
pytest.importorskip("tilecraft_spatial_accel", reason="the spatial_accel plugin is not installed")

_SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "validate_zigzag.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("validate_zigzag", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


vz = _load_script()
COUNTS = ("I fill", "W fill", "O out", "O psum in")


@pytest.mark.slow
@pytest.mark.parametrize("layer", [vz.gemm(30, 14, 22), vz.gemm(1, 13, 7), vz.conv(6, 5, 9, 7, 3)],
                         ids=lambda layer: layer.name)
def test_access_counts_equal_zigzag_and_latency_never_above_it(layer, tmp_path):
    rows = vz.compare(layer, vz.edge_core(), (32, 32), 8, seed=len(layer.name),
                      workdir=tmp_path)
    assert len(rows) == 8
    for mapping, ours, theirs in rows:
        assert {q: ours[q] for q in COUNTS} == {q: theirs[q] for q in COUNTS}, mapping
        # TileFlow overlaps every transfer with the compute; ZigZag adds the first load, the
        # last store and serialises the DRAM port's transfers: never below TileFlow
        assert ours["latency"] <= theirs["latency"] + 1e-6, mapping


@pytest.mark.slow
def test_mappings_by_hand_move_what_both_tools_count(tmp_path):
    # M 8 x N 6 x K 4 in L1 tiles (4, 6, 2); N's tile is whole
    layer = vz.gemm(8, 6, 4)
    zigzag = vz.ZigZag(layer, vz.edge_core(), (32, 32), tmp_path)
    spatial = (("M", 4), ("N", 2))
    # m outside k: B (K x N) read once per m tile, C leaves once per m tile
    mk = vz.Mapping({"M": 4, "N": 6, "K": 2}, ("M", "K", "N"), spatial, ("M", "N", "K"))
    # k outside m: B stays over m; C's partial sums leave per k tile and come back
    km = vz.Mapping({"M": 4, "N": 6, "K": 2}, ("K", "M", "N"), spatial, ("M", "N", "K"))
    for mapping, counts in ((mk, (32, 24 * 2, 48, 0)), (km, (32, 24, 48 * 2, 48))):
        ours = vz.tileflow(layer, mapping, vz.edge_core())
        theirs = zigzag.evaluate(layer, mapping)
        assert tuple(ours[q] for q in COUNTS) == tuple(theirs[q] for q in COUNTS) == counts


def test_sampled_mappings_are_exact_factorisations():
    layer = vz.conv(6, 5, 9, 7, 3)
    rng = random.Random(3)
    for _ in range(50):
        mapping = vz.sample_mapping(layer, rng, (32, 32))
        for var, size in layer.dims.items():
            assert size % mapping.tiles[var] == 0
        for var, factor in mapping.spatial:
            assert mapping.tiles[var] % factor == 0 and factor <= 32
        vz.tileflow_tree(layer, mapping)  # a valid tree


@pytest.mark.slow
def test_script_prints_r_squared(capsys):
    assert vz.main(["--mappings", "4"]) == 0
    out = capsys.readouterr().out
    assert out.count("R^2 over") == 4 and "all layers" in out
