"""tilecraft target plugin, data only: the Edge and Cloud accelerators of TileFlow's study
(thesis Table 3.7). Discovery loads :func:`make_edge` and :func:`make_cloud` from the entry point
group ``tilecraft.targets``.

>>> edge = make_edge()
>>> edge.spec.memory.names, edge.spec.compute.cores * edge.spec.compute.processing_elements
(('DRAM', 'L1'), 4096)
>>> make_cloud().spec.memory.names
('DRAM', 'L2', 'L1')
"""

from __future__ import annotations

from tilecraft_spatial_accel.target import SpatialAccelTarget, load_spec_file

__version__ = "0.1.0"


def make_edge() -> SpatialAccelTarget:
    """Entry point: the Edge accelerator (32 x 32 PEs x 4 cores, 4 MB L1, 60 GB/s)."""
    return SpatialAccelTarget("edge.yaml")


def make_cloud() -> SpatialAccelTarget:
    """Entry point: the Cloud accelerator (4 x 16 sub-cores, 40 MB L2, 384 GB/s)."""
    return SpatialAccelTarget("cloud.yaml")


__all__ = ["SpatialAccelTarget", "__version__", "load_spec_file", "make_cloud", "make_edge"]
