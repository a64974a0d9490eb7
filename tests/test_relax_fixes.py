"""A network whose PyTorch types TVM's frontend gets wrong (a scan of a bool tensor, bools compared) is
extracted, compiled and run end to end with PyTorch's results: GPT-2's causal mask is such a network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from costlab.datasets.extract import network_module
from costlab.datasets.relax_fixes import repair_frontend_types
from costlab.metaschedule.targets import host_target


class _Mask(torch.nn.Module):
    def forward(self, x):
        seq = (x[..., 0] > 0).cumsum(-1)  # PyTorch: int64 counts; the frontend kept bool
        same = seq[:, :, None] == seq[:, None, :]
        agree = (x[..., :1] > 0) == (x[..., 1:2] > 0)  # two bool tensors compared
        return x * same.float().sum(-1, keepdim=True) + agree.float()


def _types(mod) -> list[tuple[str, str]]:
    """(operator, result dtype) of every call of ``main`` that is a scan or a comparison."""
    out = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            name = getattr(getattr(b.value, "op", None), "name", "")
            if name in ("relax.cumsum", "relax.equal"):
                out.append((name, str(b.value.ty.dtype), [str(a.ty.dtype) for a in b.value.args]))
    return out


def test_a_bool_scan_gets_pytorchs_int64_and_bools_compare_as_integers():
    from tvm.relax.frontend.torch import from_exported_program

    x = torch.tensor([[[1.0, 1.0], [-1, 2], [0.5, -1], [-2, -2], [3, 1], [1, -4]]])
    with torch.no_grad():
        mod = from_exported_program(torch.export.export(_Mask().eval(), (x,)), keep_params_as_input=False)
    before, after = _types(mod), _types(repair_frontend_types(mod))
    assert ("relax.cumsum", "bool", ["bool"]) in before  # the frontend's type, which TVM cannot compile
    assert ("relax.cumsum", "int64", ["bool"]) in after
    assert not any(name == "relax.equal" and args == ["bool", "bool"] for name, _, args in after)
    assert _types(mod) == before  # the caller's module is left as it was


def test_the_network_compiles_and_computes_what_pytorch_does():
    import tvm
    from tvm import relax

    from costlab.export.network import build, check_output

    x = torch.tensor([[[1.0, 1.0], [-1, 2], [0.5, -1], [-2, -2], [3, 1], [1, -4]]])
    target = tvm.target.Target(host_target())
    mod = network_module(_Mask(), (x,), target)
    executable, _ = build(mod, target)
    vm = relax.VirtualMachine(executable, tvm.cpu(0))
    out = vm["main"](tvm.runtime.tensor(x.numpy()))
    got = (out[0] if isinstance(out, (list, tuple)) or type(out).__name__ == "Array" else out).numpy()
    np.testing.assert_allclose(got, _Mask()(x).numpy(), rtol=1e-6)

    # the output check a tuned network gets: ok, a difference, and a NaN where PyTorch gave a number (no
    # difference to report, nor to write in JSON: a reason instead)
    ref = _Mask()(x).numpy()
    assert check_output(executable, (x,), tvm.cpu(0), ref)["status"] == "ok"
    off = check_output(executable, (x,), tvm.cpu(0), ref + 1.0)
    assert off["status"] == "differs" and abs(off["max_abs_diff"] - 1.0) < 1e-5
    x_nan = x.clone()
    x_nan[0, 0, 0] = float("nan")
    nan = check_output(executable, (x_nan,), tvm.cpu(0), ref)
    assert nan["status"] == "differs" and "max_abs_diff" not in nan
    assert nan["reason"].endswith(f"of {ref.size} output elements are not finite where PyTorch's are")



def test_a_float16_network_output_is_checked_with_a_tasks_float16_tolerances():
    """A float16 network's sums round at every add, in another order than PyTorch's: its output was held to
    float32's 1e-3, so programs each task's check accepted (within 2 % of the output's magnitude) made the network
    differ. A float32 output keeps its tolerances."""
    from costlab.export.check import HALF_RTOL
    from costlab.export.network import output_tolerances

    ref = np.array([[0.5, -8.0], [2.0, np.inf]])
    assert output_tolerances(ref.astype(np.float32)) == (1e-3, 8e-4)
    assert output_tolerances(ref.astype(np.float16)) == (HALF_RTOL, HALF_RTOL * 8.0)
    assert output_tolerances(np.zeros(3, np.float16)) == (HALF_RTOL, HALF_RTOL)


class _LogRelu(torch.nn.Module):
    """log(relu(x)): -inf wherever x <= 0, as log-probabilities and masked scores have."""

    def forward(self, x):
        return torch.log(torch.relu(x))


def test_an_output_pytorch_computes_as_infinite_is_checked_as_the_same_infinity():
    """A difference of two equal infinities is NaN, and the tolerance took the output's largest magnitude (inf):
    a right network whose output holds -inf was reported as differing, and tune exited 1."""
    import tvm

    from costlab.export.network import build, check_output

    x = torch.tensor([[1.0, -1.0, 0.5, 0.0, 3.0, -2.0]])
    target = tvm.target.Target(host_target())
    executable, _ = build(network_module(_LogRelu(), (x,), target), target)
    ref = _LogRelu()(x).numpy()
    assert np.isinf(ref).sum() == 3
    ok = check_output(executable, (x,), tvm.cpu(0), ref)
    assert ok["status"] == "ok" and ok["atol"] == pytest.approx(1e-4 * 1.0986, rel=1e-3)  # of the finite: log 3
    off = check_output(executable, (x,), tvm.cpu(0), np.where(np.isinf(ref), ref, ref + 1.0))
    assert off["status"] == "differs" and abs(off["max_abs_diff"] - 1.0) < 1e-5
    zero = check_output(executable, (x,), tvm.cpu(0), np.where(np.isinf(ref), 0.0, ref))
    assert zero["status"] == "differs" and zero["reason"] == "3 of 6 output elements are not finite where PyTorch's are"
    flipped = check_output(executable, (x,), tvm.cpu(0), np.where(np.isinf(ref), np.inf, ref))
    assert flipped["status"] == "differs" and flipped["reason"] == "3 of 6 differ from PyTorch's inf or NaN there"

class _Layer(torch.nn.Module):
    """A linear layer, softmax and layer norm: a matmul, reductions and elementwise functions."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(torch.softmax(self.lin(x), dim=-1) + x)


def test_on_a_gpu_every_untuned_function_gets_a_thread_schedule():
    """A network's functions without a tuning record, built for a CUDA GPU: DLight's GPU rules bind every one's
    loops to blocks and threads (a CPU schedule there fails to build); on a CPU, its CPU rules leave them to
    TVM's CPU lowering; then each backend's lowering passes run on them. No GPU needed: the schedules are
    checked and lowered, not compiled."""
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight as dl

    from costlab.export.network import _lower_passes, default_rules

    x = torch.randn(1, 8, 16)
    for spec, bound in (({"kind": "cuda", "arch": "sm_90"}, True), (host_target(), False)):
        target = tvm.target.Target(spec)
        mod = relax.transform.LegalizeOps()(network_module(_Layer().eval(), (x,), target))
        with target:
            mod = dl.ApplyDefaultSchedule(*default_rules(target))(mod)
        funcs = {str(gv.name_hint): f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
        assert len(funcs) >= 3, funcs.keys()
        for name, func in funcs.items():
            assert ("threadIdx.x" in func.script()) == bound, name
        # then the backend's own lowering and finalizing passes, as the build runs them (all but code generation)
        with target, tvm.transform.PassContext(opt_level=3):
            lowered = tvm.transform.Sequential(_lower_passes(target))(mod)
        assert "main" in [str(gv.name_hint) for gv in lowered.functions]


def test_a_network_runs_on_its_targets_device():
    """A network tuned for a CUDA GPU is timed and checked on that GPU (device 0 of kind cuda), one for a CPU on
    the CPU: the benchmark's untuned tasks, its finals timed together and its output check all run there.
    No GPU needed: a device handle is made, nothing runs on it."""
    import tvm

    from costlab.metaschedule.targets import device_of

    gpu = device_of(tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    assert gpu.dlpack_device_type() == tvm.cuda(0).dlpack_device_type()
    assert device_of(tvm.target.Target(host_target())).dlpack_device_type() == tvm.cpu(0).dlpack_device_type()
