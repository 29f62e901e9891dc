"""The target plugin contract: specs, intrinsic abstractions (thesis §5.3), hooks, discovery.

>>> from tilecraft.target import TARGET_API_VERSION, SchedulePrimitive
>>> TARGET_API_VERSION, SchedulePrimitive("vectorize").name
(1, 'VECTORIZE')
"""

from tilecraft.target.base import (
    Artifact,
    Availability,
    Capability,
    Estimate,
    FusedGroup,
    KernelFunction,
    Source,
    Target,
    TemplateSpace,
)
from tilecraft.target.checks import check_kernel_supported, kernel_problems
from tilecraft.target.intrinsic import (
    AddressForm,
    ComputeAbstraction,
    IntrinsicDecl,
    IntrinsicLoop,
    IntrinsicOperand,
    MemoryAbstraction,
    OperandMove,
    OperandRole,
)
from tilecraft.target.memory import MemoryHierarchy, MemoryKind, MemoryLevel
from tilecraft.target.microkernel import (
    MicroKernelDecl,
    MicroKernelLoop,
    MicroKernelOperand,
    MicroKernelParameter,
)
from tilecraft.target.plugins import (
    BrokenPlugin,
    ExtensionInfo,
    ExtensionKind,
    broken_plugins,
    collect,
    extensions,
    get_plugin_manager,
    make_plugin_manager,
)
from tilecraft.target.registry import (
    TargetInfo,
    TargetStatus,
    discover_targets,
    format_target_table,
    get_target,
    list_targets,
    register_target,
    unregister_target,
)
from tilecraft.target.semantics import IntrinsicProgram
from tilecraft.target.spec import (
    TARGET_API_VERSION,
    ComputeUnits,
    EvaluationMode,
    SchedulePrimitive,
    TargetCapabilities,
    TargetSpec,
    load_spec,
)

__all__ = [
    "TARGET_API_VERSION", "AddressForm", "Artifact", "Availability", "BrokenPlugin",
    "FusedGroup", "TemplateSpace",
    "Capability", "ComputeAbstraction", "ComputeUnits", "Estimate", "EvaluationMode",
    "ExtensionInfo", "ExtensionKind", "IntrinsicDecl", "IntrinsicLoop", "IntrinsicOperand",
    "IntrinsicProgram", "KernelFunction", "MemoryAbstraction", "MemoryHierarchy", "MemoryKind",
    "MemoryLevel", "MicroKernelDecl", "MicroKernelLoop", "MicroKernelOperand",
    "MicroKernelParameter", "OperandMove", "OperandRole", "SchedulePrimitive", "Source",
    "Target", "TargetCapabilities", "TargetInfo", "TargetSpec", "TargetStatus",
    "broken_plugins", "check_kernel_supported", "collect", "discover_targets", "extensions",
    "format_target_table", "get_plugin_manager", "get_target", "kernel_problems",
    "list_targets", "load_spec", "make_plugin_manager", "register_target", "unregister_target",
]
