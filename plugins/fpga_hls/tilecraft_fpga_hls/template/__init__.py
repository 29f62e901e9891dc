"""The fpga_hls schedule template (thesis §4.5) and its search space: contractions as a
``Tm`` x ``Tn`` PE array fed from partitioned BRAM tiles (:mod:`.contraction`), tuned on the
model (:mod:`.space`), and the default design the model picks when nothing was tuned
(:mod:`.default`)."""

from tilecraft_fpga_hls.template.contraction import (
    ContractionView,
    TemplateConfig,
    as_contraction,
    lower_contraction,
)
from tilecraft_fpga_hls.template.default import DefaultDesign, model_default_design

__all__ = ["ContractionView", "DefaultDesign", "TemplateConfig", "as_contraction",
           "lower_contraction", "model_default_design"]
