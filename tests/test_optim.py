"""FusedAdam against paddle.optimizer.Adam, and the CPU-kernel choice of parl.utils.cpu."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

from parl.algorithms.optim import FusedAdam
from parl.utils import cpu


def _net(seed: int) -> paddle.nn.Layer:
    paddle.seed(seed)
    return paddle.nn.Sequential(paddle.nn.Linear(3, 8), paddle.nn.Tanh(), paddle.nn.Linear(8, 2))


def _loss(net: paddle.nn.Layer, scale: float) -> paddle.Tensor:
    rng = np.random.default_rng(1)
    x = paddle.to_tensor(rng.standard_normal((16, 3)).astype(np.float32))
    y = paddle.to_tensor(rng.standard_normal((16, 2)).astype(np.float32))
    return ((net(x) - y) ** 2).mean() * scale


def _params(net: paddle.nn.Layer) -> list[np.ndarray]:
    return [p.numpy().copy() for p in net.parameters()]


@pytest.mark.parametrize("max_norm", [0.0, 0.05])
def test_fused_adam_follows_paddle_adam(max_norm: float) -> None:
    ref, mine = _net(0), _net(0)
    clip = paddle.nn.ClipGradByGlobalNorm(max_norm) if max_norm else None
    opt_ref = paddle.optimizer.Adam(learning_rate=0.01, parameters=ref.parameters(), grad_clip=clip)
    opt = FusedAdam(mine.parameters(), learning_rate=0.01, max_grad_norm=max_norm)
    for step in range(30):
        scale = 1.0 + step  # growing gradients, so that clipping acts on later steps
        _loss(ref, scale).backward()
        opt_ref.step()
        opt_ref.clear_grad()
        _loss(mine, scale).backward()
        opt.step()
        opt.clear_grad()
    for a, b in zip(_params(ref), _params(mine)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    assert opt.steps == 30
    if max_norm:
        assert opt.last_grad_norm is not None and opt.last_grad_norm > max_norm  # clipping did act


def test_clear_grad_releases_gradients() -> None:
    net = _net(0)
    opt = FusedAdam(net.parameters(), learning_rate=0.01)
    _loss(net, 1.0).backward()
    assert all(p.grad is not None for p in net.parameters())
    opt.clear_grad()
    assert all(p.grad is None for p in net.parameters())


def test_parameters_without_gradient_are_left_alone() -> None:
    """A model whose other head trains elsewhere: only parameters with gradients move."""
    paddle.seed(0)
    used, unused = paddle.nn.Linear(3, 2), paddle.nn.Linear(3, 2)
    opt = FusedAdam([*used.parameters(), *unused.parameters()], learning_rate=0.1)
    before_used, before_unused = _params(used), _params(unused)
    x = paddle.ones([4, 3])
    used(x).sum().backward()
    opt.step()
    assert all(not np.allclose(a, b) for a, b in zip(before_used, _params(used)))
    for a, b in zip(before_unused, _params(unused)):
        np.testing.assert_array_equal(a, b)
    opt.clear_grad()
    opt.step()  # no gradient at all: nothing happens, no error
    assert opt.steps == 1


def test_state_dict_resumes_exactly() -> None:
    a, b = _net(0), _net(0)
    opt_a = FusedAdam(a.parameters(), learning_rate=0.02)
    for _ in range(5):
        _loss(a, 1.0).backward()
        opt_a.step()
        opt_a.clear_grad()
    b.set_state_dict(a.state_dict())
    opt_b = FusedAdam(b.parameters(), learning_rate=0.5)
    opt_b.set_state_dict(opt_a.state_dict())
    assert opt_b.get_lr() == pytest.approx(0.02)
    assert opt_b.steps == 5
    for net, opt in ((a, opt_a), (b, opt_b)):
        _loss(net, 1.0).backward()
        opt.step()
        opt.clear_grad()
    for x, y in zip(_params(a), _params(b)):
        np.testing.assert_array_equal(x, y)


def test_state_dict_of_other_parameters_is_refused() -> None:
    opt = FusedAdam(_net(0).parameters(), learning_rate=0.01)
    other = FusedAdam(paddle.nn.Linear(3, 5).parameters(), learning_rate=0.01)
    with pytest.raises(ValueError, match="shapes"):
        opt.set_state_dict(other.state_dict())
    with pytest.raises(ValueError, match="lacks"):
        opt.set_state_dict({"moment1": []})


def test_bad_arguments_say_what_was_expected() -> None:
    params = _net(0).parameters()
    with pytest.raises(ValueError, match="learning_rate must be > 0"):
        FusedAdam(params, learning_rate=0.0)
    with pytest.raises(ValueError, match="beta1"):
        FusedAdam(params, learning_rate=0.1, beta1=1.0)
    with pytest.raises(ValueError, match="max_grad_norm"):
        FusedAdam(params, learning_rate=0.1, max_grad_norm=-1.0)
    with pytest.raises(ValueError, match="at least one"):
        FusedAdam([], learning_rate=0.1)
    opt = FusedAdam(params, learning_rate=0.1)
    with pytest.raises(ValueError, match="> 0"):
        opt.set_lr(-1.0)
    opt.set_lr(0.25)
    assert opt.get_lr() == pytest.approx(0.25)


AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n"
AMD_OLD = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx\n"
INTEL = "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx avx2\n"


def test_amd_cpu_detection() -> None:
    assert cpu.amd_cpu_with_avx2(AMD)
    assert not cpu.amd_cpu_with_avx2(AMD_OLD)
    assert not cpu.amd_cpu_with_avx2(INTEL)
    assert not cpu.amd_cpu_with_avx2("")


def test_prefer_fast_cpu_kernels_sets_the_variable_once_and_respects_the_user(tmp_path, monkeypatch) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(AMD)
    monkeypatch.delenv("MKL_DEBUG_CPU_TYPE", raising=False)
    monkeypatch.setattr(cpu, "_done", False)
    assert cpu.prefer_fast_cpu_kernels(str(info))
    assert os.environ["MKL_DEBUG_CPU_TYPE"] == "5"
    assert not cpu.prefer_fast_cpu_kernels(str(info))  # once per process

    monkeypatch.setenv("MKL_DEBUG_CPU_TYPE", "0")
    monkeypatch.setattr(cpu, "_done", False)
    assert not cpu.prefer_fast_cpu_kernels(str(info))
    assert os.environ["MKL_DEBUG_CPU_TYPE"] == "0"

    info.write_text(INTEL)
    monkeypatch.delenv("MKL_DEBUG_CPU_TYPE")
    monkeypatch.setattr(cpu, "_done", False)
    assert not cpu.prefer_fast_cpu_kernels(str(info))
    assert "MKL_DEBUG_CPU_TYPE" not in os.environ
    monkeypatch.setattr(cpu, "_done", False)
    assert not cpu.prefer_fast_cpu_kernels(str(tmp_path / "missing"))


def test_building_a_model_applies_the_choice_and_import_does_not() -> None:
    """In a fresh process: ``import parl`` leaves the environment alone; the first Model applies the choice."""
    code = (
        "import os, parl\n"
        "before = os.environ.get('MKL_DEBUG_CPU_TYPE')\n"
        "from parl.utils import cpu\n"
        "expected = cpu.amd_cpu_with_avx2(open('/proc/cpuinfo').read())\n"
        "class M(parl.Model):\n"
        "    def input_specs(self): return []\n"
        "    def action_specs(self): return []\n"
        "M()\n"
        "after = os.environ.get('MKL_DEBUG_CPU_TYPE')\n"
        "assert before is None, before\n"
        "assert after == ('5' if expected else None), (after, expected)\n"
        "print('ok', expected)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MKL_DEBUG_CPU_TYPE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")
