"""Repairs of a network's Relax module where TVM's PyTorch frontend departs from PyTorch's types, applied
before the module is legalized, so that the tasks extracted from it and the network built from it are one.

- ``cumsum``/``cumprod`` of a bool or narrow integer tensor: PyTorch returns int64 (its type promotion for
  integral scans); the frontend keeps the input's type. A bool scan then reaches LLVM code generation as an
  ``i1`` addition, which TVM 0.27 refuses (GPT-2's causal mask counts packed sequences with
  ``(position_ids == 0).cumsum(-1)``). The scan is given PyTorch's int64, and what follows is typed from it.
- ``equal``/``not_equal``/ordering of two bool tensors: TVM 0.27's LLVM code generation compares a bool
  (DLPack's bool type code) as a float (``fcmp`` on ``i1``, an invalid LLVM module). The operands are
  compared as int8, which is the same comparison.
"""

from __future__ import annotations

_SCANS = ("relax.cumsum", "relax.cumprod")
_COMPARISONS = ("relax.equal", "relax.not_equal", "relax.less", "relax.less_equal", "relax.greater",
                "relax.greater_equal")


def _dtype(expr) -> str | None:
    ty = getattr(expr, "ty", None)  # TVM 0.27: a Relax expression's type (struct info before)
    return str(ty.dtype) if ty is not None and hasattr(ty, "dtype") else None


def _narrow_integral(dtype: str | None) -> bool:
    return dtype is not None and (dtype == "bool" or dtype.startswith(("int", "uint"))) and dtype != "int64"


def repair_frontend_types(mod):
    """A copy of ``mod`` with the scans and bool comparisons above rewritten in every Relax function."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Repair(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", None)
            if name in _SCANS and call.attrs.dtype is None and _narrow_integral(_dtype(call.args[0])):
                op = relax.op.cumsum if name == "relax.cumsum" else relax.op.cumprod
                return op(call.args[0], axis=call.attrs.axis, dtype="int64", exclusive=call.attrs.exclusive)
            if name in _COMPARISONS and all(_dtype(a) == "bool" for a in call.args):
                args = [relax.op.astype(a, "int8") for a in call.args]
                return relax.Call(call.op, args, call.attrs, call.ty_args)
            return call

    mod = mod.clone()
    repair = _Repair(mod)
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gvar] = repair.visit_expr(func)
    return mod
