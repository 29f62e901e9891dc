"""The fpga_hls performance and resource model (estimate mode; thesis §4.4: FPGA candidates are
modelled because synthesis takes hours): :mod:`.operators` (latency and resources of each
operator), :mod:`.cycles` (Eq. 4.6 refined per stage, walked from Kernel IR), :mod:`.design`
(the estimate of a kernel on a device, and feasibility).
"""

from tilecraft_fpga_hls.model.design import DesignEstimate, InfeasibleDesign, estimate_design

__all__ = ["DesignEstimate", "InfeasibleDesign", "estimate_design"]
