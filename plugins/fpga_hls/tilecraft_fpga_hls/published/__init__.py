"""Published FPGA designs the fpga_hls model is checked against (:mod:`.fpga15`)."""
