"""FPGA device facts the fpga_hls target plans with: DSP slices, on-chip RAM, off-chip DDR and
the kernel clock.

Sources: AMD/Xilinx DS890 "UltraScale Architecture and Product Data Sheet: Overview" and
DS891 (Zynq UltraScale+ MPSoC) for the resource counts; the AWS EC2 F1 / VCU1525 board
configuration of the VU9P (four DDR4-2400 72-bit channels, 16 GiB each, 19.2 GB/s each; 250 MHz
kernel clock), the ZCU102 board for the ZU9EG (PS DDR4-2400, 64-bit, 4 GiB) and the ZCU104
board for the ZU7EV (PS DDR4-2400, 64-bit, 2 GiB); flip-flop counts from the same tables.

A BRAM36 block holds 36 Kbit (4608 bytes with parity bits used as data) and reads up to 72
bits per cycle per port in simple dual-port mode; a URAM block holds 288 Kbit (36864 bytes),
72 bits per port.

Each AXI master port moves ``axi_port_bits`` per cycle: 512 bits on all three parts. That is the
widest m_axi port Vitis HLS builds (UG1399, "Automatic Port Widening": ``max_widen_bitwidth``,
up to 512 bits, widens a port whose accesses burst) and the data width of the boards' memory
controllers' AXI slave (PG150, UltraScale DDR4 MIG: AXI data width = 8 x the 64-bit DQ width at
4:1 clocking; the AWS F1 shell's DDR4 ports are 512-bit AXI4). A read of ``n`` consecutive
elements of ``b`` bytes takes ``ceil(n * b / 64)`` beats of such a port.

>>> VU9P.dsp_slices, VU9P.bram_bytes, VU9P.uram_bytes
(6840, 9953280, 35389440)
>>> round(VU9P.bram_bytes * 8 / 2 ** 20, 1)  # the data sheet's 75.9 Mb (2**20 bits each)
75.9
"""

from __future__ import annotations

from dataclasses import dataclass

BRAM36_BYTES = 36 * 1024 // 8
URAM_BYTES = 288 * 1024 // 8
#: bytes one block reads per cycle through one 72-bit port
BLOCK_PORT_BYTES = 72 // 8


@dataclass(frozen=True)
class DeviceSpec:
    """One FPGA part on its board: resources, memory and the kernel clock."""

    name: str
    part: str
    dsp_slices: int
    bram36_blocks: int
    uram_blocks: int
    luts: int
    ddr_bytes: int
    ddr_bytes_per_second: float
    clock_hz: float
    flip_flops: int = 0
    #: data bits one AXI master port moves per cycle (module docstring)
    axi_port_bits: int = 512

    @property
    def bram_bytes(self) -> int:
        return self.bram36_blocks * BRAM36_BYTES

    @property
    def uram_bytes(self) -> int:
        return self.uram_blocks * URAM_BYTES

    @property
    def axi_port_bytes(self) -> int:
        return self.axi_port_bits // 8


#: Virtex UltraScale+ VU9P (AWS F1, VCU1525): the FPGA of the thesis' FlexTensor experiments
VU9P = DeviceSpec(name="VU9P", part="xcvu9p-flgb2104-2-i", dsp_slices=6840, bram36_blocks=2160,
                  uram_blocks=960, luts=1_182_240, ddr_bytes=4 * 16 * 1024 ** 3,
                  ddr_bytes_per_second=4 * 19.2e9, clock_hz=250e6, flip_flops=2_364_480)

#: Zynq UltraScale+ ZU9EG (ZCU102): a smaller device without URAM
ZU9EG = DeviceSpec(name="ZU9EG", part="xczu9eg-ffvb1156-2-e", dsp_slices=2520,
                   bram36_blocks=912, uram_blocks=0, luts=274_080, ddr_bytes=4 * 1024 ** 3,
                   ddr_bytes_per_second=19.2e9, clock_hz=200e6, flip_flops=548_160)

#: Zynq UltraScale+ ZU7EV (ZCU104, PS DDR4-2400 64-bit, 2 GiB): the smaller part a large design
#: does not fit (DS891: 1728 DSP48E2, 312 BRAM36, 96 URAM, 230,400 LUTs, 460,800 FFs)
ZU7EV = DeviceSpec(name="ZU7EV", part="xczu7ev-ffvc1156-2-e", dsp_slices=1728,
                   bram36_blocks=312, uram_blocks=96, luts=230_400, ddr_bytes=2 * 1024 ** 3,
                   ddr_bytes_per_second=19.2e9, clock_hz=200e6, flip_flops=460_800)

DEVICES = {device.name: device for device in (VU9P, ZU9EG, ZU7EV)}
