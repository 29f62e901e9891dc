"""The fpga_hls schedule template (thesis §4.5) and its search space: contractions as a
``Tm`` x ``Tn`` PE array fed from partitioned BRAM tiles (:mod:`.contraction`), tuned on the
model (:mod:`.space`)."""

from tilecraft_fpga_hls.template.contraction import (
    ContractionView,
    TemplateConfig,
    as_contraction,
    lower_contraction,
)

__all__ = ["ContractionView", "TemplateConfig", "as_contraction", "lower_contraction"]
