"""A small builder of LLVM IR *text*: SSA values, blocks, loops, calls and a module.

The code generator writes textual IR (readable in dumps, parsed by llvmlite) through these
helpers rather than by string pasting, so that operands always carry their types and scalar
operands of vector operations are broadcast in one place.

>>> module = ModuleBuilder()
>>> fb = FunctionBuilder(module, "twice", "float", [("float", "%x", "")])
>>> x = Value("%x", "float")
>>> fb.ret(fb.binop("fmul", x, Value("0x4000000000000000", "float")))
>>> module.add_function(fb.render())
>>> print(module.render().strip())
define float @"twice"(float %x) nounwind {
entry:
  %t.0 = fmul float %x, 0x4000000000000000
  ret float %t.0
}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tilecraft_x86_avx512.codegen.types import INDEX, is_literal, vector_type


@dataclass(frozen=True)
class Value:
    """An SSA register or a constant, with its scalar LLVM type and lane count (0: scalar)."""

    ref: str
    elem: str
    lanes: int = 0

    @property
    def type(self) -> str:
        return vector_type(self.elem, self.lanes)

    @property
    def typed(self) -> str:
        return f"{self.type} {self.ref}"

    @property
    def is_vector(self) -> bool:
        return self.lanes > 0


def _clean(hint: str) -> str:
    """A hint usable in an LLVM local name (letters, digits, ``_`` and ``.``)."""
    return "".join(ch if ch.isalnum() or ch in "_." else "_" for ch in hint) or "v"


def index_const(value: int) -> Value:
    return Value(str(int(value)), INDEX)


class ModuleBuilder:
    """Collects functions, intrinsic declarations, helper functions and metadata nodes."""

    def __init__(self) -> None:
        self._declarations: dict[str, str] = {}
        self._helpers: dict[str, str] = {}
        self._functions: list[str] = []
        self._metadata: list[str] = []

    def declare(self, name: str, ret: str, arg_types: Sequence[str]) -> None:
        """Declare an external function or intrinsic once."""
        if name not in self._declarations:
            self._declarations[name] = f'declare {ret} @"{name}"({", ".join(arg_types)})'

    def helper(self, name: str, make: Callable[[], str]) -> str:
        """Define the internal helper function ``name`` once (``make`` renders it)."""
        if name not in self._helpers:
            self._helpers[name] = ""  # reserve the name: ``make`` may request other helpers
            self._helpers[name] = make()
        return name

    def add_function(self, text: str) -> None:
        self._functions.append(text)

    def metadata(self, body: str) -> str:
        """Add the metadata node ``!{body}`` and return its name (``!N``)."""
        name = f"!{len(self._metadata)}"
        self._metadata.append(f"{name} = !{{{body}}}")
        return name

    def loop_metadata(self, properties: Sequence[str]) -> str:
        """A distinct ``llvm.loop`` node with the given property bodies, e.g.
        ``'!"llvm.loop.unroll.full"'``."""
        props = [self.metadata(prop) for prop in properties]
        name = f"!{len(self._metadata)}"
        self._metadata.append(f"{name} = distinct !{{{', '.join([name, *props])}}}")
        return name

    def render(self) -> str:
        parts = [*self._declarations.values(), *self._helpers.values(),
                 *self._functions, *self._metadata]
        return "\n\n".join(part for part in parts if part) + "\n"


class FunctionBuilder:
    """Emits one function; tracks the current block for phis and collects entry allocas."""

    def __init__(self, module: ModuleBuilder, name: str, ret: str,
                 params: Sequence[tuple[str, str, str]], linkage: str = "",
                 attributes: str = "nounwind") -> None:
        self.module = module
        self.name = name
        self._ret = ret
        self._params = params
        self._linkage = linkage
        self._attributes = attributes
        self._counter = 0
        self._allocas: list[str] = []
        self._lines: list[str] = []
        self.block = "entry"

    # names -----------------------------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        name = f"%{_clean(hint)}.{self._counter}"
        self._counter += 1
        return name

    def new_label(self, hint: str) -> str:
        name = f"{_clean(hint)}.{self._counter}"
        self._counter += 1
        return name

    # emission --------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self._lines.append(f"  {line}")

    def define(self, rhs: str, hint: str = "t") -> str:
        reg = self.fresh(hint)
        self.emit(f"{reg} = {rhs}")
        return reg

    def start_block(self, label: str) -> None:
        self._lines.append(f"{label}:")
        self.block = label

    def br(self, label: str, loop_md: str | None = None) -> None:
        self.emit(f"br label %{label}" + (f", !llvm.loop {loop_md}" if loop_md else ""))

    def cond_br(self, cond: Value, then_label: str, else_label: str) -> None:
        self.emit(f"br i1 {cond.ref}, label %{then_label}, label %{else_label}")

    def ret(self, value: Value | None = None) -> None:
        self.emit(f"ret {value.typed}" if value is not None else "ret void")

    def alloca(self, elem: str, count: int, align: int, hint: str = "buf") -> str:
        """A stack slot in the entry block (allocated once per call, not per loop trip)."""
        reg = self.fresh(hint)
        size = f"[{count} x {elem}]" if count != 1 else elem
        self._allocas.append(f"  {reg} = alloca {size}, align {align}")
        return reg

    def entry_line(self, line: str) -> None:
        """An instruction at the top of the entry block (runs once per call)."""
        self._allocas.append(f"  {line}")

    def render(self) -> str:
        params = ", ".join(f"{ty} {attrs + ' ' if attrs else ''}{name}"
                           for ty, name, attrs in self._params)
        linkage = f"{self._linkage} " if self._linkage else ""
        head = f'define {linkage}{self._ret} @"{self.name}"({params}) {self._attributes} {{'
        return "\n".join([head, "entry:", *self._allocas, *self._lines, "}"])

    # values ----------------------------------------------------------------------------------
    def broadcast(self, value: Value, lanes: int) -> Value:
        """``value`` as a vector of ``lanes`` (unchanged when already a vector or lanes==0)."""
        if lanes == 0 or value.lanes == lanes:
            return value
        if value.lanes:
            raise ValueError(f"cannot broadcast a {value.type} to {lanes} lanes")
        if is_literal(value.ref):
            return Value(f"splat ({value.elem} {value.ref})", value.elem, lanes)
        vec = vector_type(value.elem, lanes)
        first = self.define(f"insertelement {vec} poison, {value.typed}, i64 0", "bc")
        reg = self.define(f"shufflevector {vec} {first}, {vec} poison, "
                          f"<{lanes} x i32> zeroinitializer", "splat")
        return Value(reg, value.elem, lanes)

    def extract(self, vector: Value, lane: int) -> Value:
        """Lane ``lane`` of ``vector``, a scalar."""
        return Value(self.define(f"extractelement {vector.typed}, i64 {lane}", "lane"),
                     vector.elem)

    def insert(self, vector: Value, scalar: Value, lane: int) -> Value:
        """``vector`` with lane ``lane`` replaced by ``scalar``."""
        return Value(self.define(f"insertelement {vector.typed}, {scalar.typed}, i64 {lane}",
                                 "ins"), vector.elem, vector.lanes)

    def call_lanewise(self, name: str, x: Value) -> Value:
        """The external scalar function ``name`` (``T name(T)``, e.g. libm's ``asinhf``)
        applied to ``x``: called once for a scalar, else once per lane (extract, call,
        insert), for functions with no vector form LLVM knows.

        >>> fb = FunctionBuilder(ModuleBuilder(), "f", "void", [])
        >>> fb.call_lanewise("asinhf", Value("%x", "float", 2)).typed
        '<2 x float> %ins.5'
        """
        if not x.lanes:
            return self.call(name, x.elem, [x])
        result = Value("poison", x.elem, x.lanes)
        for lane in range(x.lanes):
            result = self.insert(result, self.call(name, x.elem, [self.extract(x, lane)]), lane)
        return result

    def binop(self, op: str, a: Value, b: Value, flags: str = "") -> Value:
        lanes = max(a.lanes, b.lanes)
        a, b = self.broadcast(a, lanes), self.broadcast(b, lanes)
        flag = f" {flags}" if flags else ""
        return Value(self.define(f"{op}{flag} {a.typed}, {b.ref}"), a.elem, lanes)

    def unop(self, op: str, a: Value, flags: str = "") -> Value:
        flag = f" {flags}" if flags else ""
        return Value(self.define(f"{op}{flag} {a.typed}"), a.elem, a.lanes)

    def compare(self, kind: str, predicate: str, a: Value, b: Value) -> Value:
        """``icmp``/``fcmp`` with a predicate such as ``slt`` or ``olt``."""
        lanes = max(a.lanes, b.lanes)
        a, b = self.broadcast(a, lanes), self.broadcast(b, lanes)
        return Value(self.define(f"{kind} {predicate} {a.typed}, {b.ref}", "c"), "i1", lanes)

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        lanes = max(cond.lanes, a.lanes, b.lanes)
        a, b = self.broadcast(a, lanes), self.broadcast(b, lanes)
        if cond.lanes:
            cond = self.broadcast(cond, lanes)
        return Value(self.define(f"select {cond.typed}, {a.typed}, {b.typed}", "sel"),
                     a.elem, lanes)

    def convert(self, op: str, value: Value, to_elem: str) -> Value:
        """A conversion instruction (``sext``, ``fptrunc``, ``bitcast``...)."""
        if op in ("sext", "zext", "trunc", "fpext", "fptrunc", "bitcast") \
                and value.elem == to_elem:
            return value
        target = vector_type(to_elem, value.lanes)
        return Value(self.define(f"{op} {value.typed} to {target}", "cv"), to_elem, value.lanes)

    def call(self, name: str, ret_elem: str, args: Sequence[Value | tuple[str, str]],
             lanes: int = 0, flags: str = "", declare: bool = True) -> Value:
        """Call (and declare) ``name``; an argument is a Value or ``(declared type, call text)``
        for operands with attributes such as ``ptr align 4 %p``. ``declare=False`` for
        functions defined in the module."""
        decl_types, texts = self._call_parts(args)
        ret = vector_type(ret_elem, lanes)
        if declare:
            self.module.declare(name, ret, decl_types)
        flag = f"{flags} " if flags else ""
        reg = self.define(f'call {flag}{ret} @"{name}"({", ".join(texts)})', "call")
        return Value(reg, ret_elem, lanes)

    def call_void(self, name: str, args: Sequence[Value | tuple[str, str]]) -> None:
        decl_types, texts = self._call_parts(args)
        self.module.declare(name, "void", decl_types)
        self.emit(f'call void @"{name}"({", ".join(texts)})')

    @staticmethod
    def _call_parts(args: Sequence[Value | tuple[str, str]]) -> tuple[list[str], list[str]]:
        decl_types, texts = [], []
        for arg in args:
            if isinstance(arg, Value):
                decl_types.append(arg.type)
                texts.append(arg.typed)
            else:
                decl_types.append(arg[0])
                texts.append(arg[1])
        return decl_types, texts

    # control flow ----------------------------------------------------------------------------
    def counted_loop(self, start: Value, end: Value, step: int, body: Callable[[Value], None],
                     loop_md: str | None = None, hint: str = "i") -> None:
        """``for (iv = start; iv < end; iv += step) body(iv)`` over i64."""
        pre = self.block
        header, body_label = self.new_label(f"{hint}.head"), self.new_label(f"{hint}.body")
        latch, exit_label = self.new_label(f"{hint}.latch"), self.new_label(f"{hint}.exit")
        iv, iv_next = self.fresh(hint), self.fresh(f"{hint}.next")
        self.br(header)
        self.start_block(header)
        self.emit(f"{iv} = phi i64 [ {start.ref}, %{pre} ], [ {iv_next}, %{latch} ]")
        more = self.compare("icmp", "slt", Value(iv, INDEX), end)
        self.cond_br(more, body_label, exit_label)
        self.start_block(body_label)
        body(Value(iv, INDEX))
        self.br(latch)
        self.start_block(latch)
        self.emit(f"{iv_next} = add nuw nsw i64 {iv}, {step}")
        self.br(header, loop_md)
        self.start_block(exit_label)

    def if_then(self, cond: Value, then: Callable[[], None],
                otherwise: Callable[[], None] | None = None, hint: str = "if") -> None:
        """A two-way branch joined afterwards (``otherwise`` may be None)."""
        then_label, merge = self.new_label(f"{hint}.then"), self.new_label(f"{hint}.end")
        else_label = self.new_label(f"{hint}.else") if otherwise else merge
        self.cond_br(cond, then_label, else_label)
        self.start_block(then_label)
        then()
        self.br(merge)
        if otherwise is not None:
            self.start_block(else_label)
            otherwise()
            self.br(merge)
        self.start_block(merge)
