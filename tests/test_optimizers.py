"""tinytorch.core.optimizers against torch.optim, step by step, plus state and clipping."""

import numpy as np
import pytest

from tinytorch.core.optimizers import SGD, Adam, AdamW, Optimizer, clip_grad_norm_
from tinytorch.core.tensor import Tensor

torch = pytest.importorskip("torch")

SHAPES = [(4, 3), (3,), (), (2, 2, 5)]

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.05, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, weight_decay=0.1, nesterov=True)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=3e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=3e-2, betas=(0.85, 0.95), eps=1e-7, weight_decay=0.2)),
]
OURS = {"SGD": SGD, "Adam": Adam, "AdamW": AdamW}
THEIRS = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}


def config_id(config):
    name, kwargs = config
    return name + "(" + ",".join(f"{k}={v}" for k, v in kwargs.items()) + ")"


def make_pair(dtype, seed=0):
    rng = np.random.default_rng(seed)
    start = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    ours = [Tensor(a.copy(), dtype=dtype) for a in start]
    theirs = [torch.tensor(a.copy(), requires_grad=True) for a in start]
    return ours, theirs


def gradients(steps, dtype, seed=1):
    """Per step, per parameter: a gradient, or None (parameter 1 sits out steps 2 and 4)."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        row = []
        for i, s in enumerate(SHAPES):
            if i == 1 and step in (2, 4):
                row.append(None)
            else:
                row.append((rng.standard_normal(s) * (i + 1)).astype(dtype))
        out.append(row)
    return out


def run_steps(opt, topt, ours, theirs, grads, lrs):
    for row, lr in zip(grads, lrs):
        opt.lr = lr
        for group in topt.param_groups:
            group["lr"] = lr
        for p, tp, g in zip(ours, theirs, row):
            p.grad = None if g is None else Tensor(g.copy(), dtype=g.dtype)
            tp.grad = None if g is None else torch.tensor(g.copy())
        opt.step()
        topt.step()


def assert_same(ours, theirs, rtol, atol=0.0):
    for i, (p, tp) in enumerate(zip(ours, theirs)):
        want = tp.detach().numpy()
        assert p.data.dtype == want.dtype, f"param {i}: dtype {p.data.dtype}, torch {want.dtype}"
        np.testing.assert_allclose(p.data, want, rtol=rtol, atol=atol, err_msg=f"param {i}")


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_matches_torch_float64(config):
    name, kwargs = config
    ours, theirs = make_pair(np.float64)
    opt, topt = OURS[name](ours, **kwargs), THEIRS[name](theirs, **kwargs)
    lr = kwargs["lr"]
    lrs = [lr, lr, lr * 0.5, lr * 0.5, lr * 2, lr * 0.1, lr]  # a schedule changes opt.lr
    run_steps(opt, topt, ours, theirs, gradients(len(lrs), np.float64), lrs)
    assert_same(ours, theirs, rtol=1e-6, atol=1e-12)
    assert opt.steps == len(lrs)


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_matches_torch_float32(config):
    name, kwargs = config
    ours, theirs = make_pair(np.float32)
    opt, topt = OURS[name](ours, **kwargs), THEIRS[name](theirs, **kwargs)
    lrs = [kwargs["lr"]] * 6
    run_steps(opt, topt, ours, theirs, gradients(len(lrs), np.float32), lrs)
    assert_same(ours, theirs, rtol=1e-4, atol=1e-6)
    for state in opt.state:
        for key, value in state.items():
            if isinstance(value, np.ndarray):
                assert value.dtype == np.float32, f"state {key} is {value.dtype}"


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_state_dict_round_trip_continues_identically(config, tmp_path):
    name, kwargs = config
    steps = 6
    grads = gradients(steps, np.float64, seed=5)
    lrs = [kwargs["lr"]] * steps

    straight, theirs = make_pair(np.float64, seed=3)
    opt, topt = OURS[name](straight, **kwargs), THEIRS[name](theirs, **kwargs)
    run_steps(opt, topt, straight, theirs, grads, lrs)

    resumed, theirs2 = make_pair(np.float64, seed=3)
    first, topt2 = OURS[name](resumed, **kwargs), THEIRS[name](theirs2, **kwargs)
    run_steps(first, topt2, resumed, theirs2, grads[:3], lrs[:3])
    # Through an .npz file without pickle, as module 08's checkpoints store it.
    np.savez(tmp_path / "opt.npz", **first.state_dict())
    with np.load(tmp_path / "opt.npz", allow_pickle=False) as f:
        loaded = {k: f[k] for k in f.files}
    second = OURS[name]([Tensor(p.data.copy(), dtype=np.float64) for p in resumed], **kwargs)
    # The new optimizer owns new tensors holding the same values.
    resumed = second.params
    second.load_state_dict(loaded)
    assert second.steps == 3
    run_steps(second, topt2, resumed, theirs2, grads[3:], lrs[3:])
    for a, b in zip(resumed, straight):
        assert np.array_equal(a.data, b.data), "resumed run differs from the uninterrupted run"
    assert second.steps == steps
    assert_same(resumed, theirs, rtol=1e-6, atol=1e-12)


def test_state_dict_is_plain_and_copied():
    w = Tensor(np.ones((2, 3), dtype=np.float32))
    opt = Adam([w], lr=0.1)
    w.grad = Tensor(np.full((2, 3), 0.5, dtype=np.float32))
    opt.step()
    sd = opt.state_dict()
    assert set(sd) == {"steps", "lr", "num_params", "param.0.step", "param.0.exp_avg",
                       "param.0.exp_avg_sq", "group.0.lr", "group.0.betas", "group.0.eps",
                       "group.0.weight_decay"}
    for key, value in sd.items():
        assert isinstance(value, (int, float, np.ndarray)), (key, type(value))
    before = sd["param.0.exp_avg"].copy()
    opt.step()
    assert np.array_equal(sd["param.0.exp_avg"], before), "state_dict must copy buffers"
    loaded = Adam([Tensor(np.ones((2, 3), dtype=np.float32))])
    loaded.load_state_dict(sd)
    assert loaded.lr == 0.1 and loaded.steps == 1
    assert loaded.state[0]["exp_avg"].dtype == np.float32
    assert not np.shares_memory(loaded.state[0]["exp_avg"], sd["param.0.exp_avg"])


def test_load_state_dict_mismatches_are_listed_and_change_nothing():
    a, b = Tensor(np.zeros((2, 3))), Tensor(np.zeros(4))
    opt = Adam([a, b], lr=0.1)
    a.grad, b.grad = Tensor(np.ones((2, 3))), Tensor(np.ones(4))
    opt.step()
    sd = opt.state_dict()

    fewer = Adam([Tensor(np.zeros((2, 3)))])
    with pytest.raises(ValueError, match="saved for 2 parameters, this optimizer has 1"):
        fewer.load_state_dict(sd)

    other_shapes = Adam([Tensor(np.zeros((3, 2))), Tensor(np.zeros(4))], lr=0.5)
    with pytest.raises(ValueError) as info:
        other_shapes.load_state_dict(sd)
    message = str(info.value)
    assert "param.0.exp_avg" in message and "(2, 3)" in message and "(3, 2)" in message
    assert other_shapes.lr == 0.5 and other_shapes.steps == 0 and other_shapes.state[0] == {}, (
        "a failed load must change nothing"
    )

    sgd = SGD([Tensor(np.zeros((2, 3))), Tensor(np.zeros(4))], lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="exp_avg"):
        sgd.load_state_dict(sd)
    with pytest.raises(ValueError, match="missing key 'steps'"):
        sgd.load_state_dict({"lr": 0.1, "num_params": 2})


@pytest.mark.parametrize("max_norm", [0.5, 3.0, 1e6])
def test_clip_grad_norm_matches_torch(max_norm):
    rng = np.random.default_rng(2)
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (5,), (2, 2)]]
    ours = [Tensor(np.zeros(g.shape, dtype=np.float32)) for g in grads] + [Tensor([1.0])]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads] + [
        torch.ones(1, requires_grad=True)]
    for p, tp, g in zip(ours, theirs, grads):
        p.grad = Tensor(g.copy())
        tp.grad = torch.tensor(g.copy())
    total = clip_grad_norm_(ours, max_norm)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert isinstance(total, float)
    assert total == pytest.approx(float(ttotal), rel=1e-6)
    for p, tp in zip(ours[:3], theirs[:3]):
        assert p.grad.dtype == np.float32
        np.testing.assert_allclose(p.grad.data, tp.grad.numpy(), rtol=1e-6, atol=1e-7)
    assert ours[3].grad is None


def test_clip_grad_norm_single_tensor_and_float64():
    w = Tensor(np.zeros(2), dtype=np.float64)
    w.grad = Tensor(np.array([30.0, 40.0]), dtype=np.float64)
    assert clip_grad_norm_(w, 5.0) == pytest.approx(50.0)
    assert np.linalg.norm(w.grad.data) == pytest.approx(5.0, rel=1e-6)
    assert w.grad.dtype == np.float64


def test_parameters_kept_once_and_validated():
    w = Tensor([1.0, 2.0])
    opt = SGD([w, w, Tensor([3.0])], lr=0.1)
    assert len(opt.params) == 2
    w.grad = Tensor([1.0, 1.0])
    opt.step()
    np.testing.assert_allclose(w.data, [0.9, 1.9], rtol=1e-6)  # stepped once, not twice
    opt.zero_grad()
    assert all(p.grad is None for p in opt.params)
    with pytest.raises(TypeError, match="single Tensor"):
        SGD(w, lr=0.1)
    with pytest.raises(TypeError, match="parentheses"):
        SGD(lambda: [w], lr=0.1)
    with pytest.raises(ValueError, match="no parameters"):
        Adam(iter([]))
    with pytest.raises(ValueError, match="nesterov"):
        SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        Adam([w], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="learning rate"):
        AdamW([w], lr=-1.0)
    assert "Adam(lr=0.001" in repr(Adam([w])) and "1 parameters" in repr(Adam([w]))


def test_all_optimizers_keep_float32_and_update_in_place():
    for make in (lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True),
                 lambda ps: Adam(ps, weight_decay=0.1), lambda ps: AdamW(ps)):
        w = Tensor(np.ones((3, 3), dtype=np.float32))
        array = w.data
        opt = make([w])
        for _ in range(3):
            w.grad = Tensor(np.full((3, 3), 0.25))  # float32 gradient
            opt.step()
        assert w.data is array and w.dtype == np.float32
        # a float64 gradient (float64 creep upstream) must not make the parameter float64
        w.grad = Tensor(np.full((3, 3), 0.25), dtype=np.float64)
        opt.step()
        assert w.data is array and w.dtype == np.float32


def test_subclass_contract():
    class Halve(Optimizer):
        def update(self, param, grad, state):
            param *= 0.5

    w = Tensor([4.0])
    opt = Halve([w], lr=0.0)
    opt.step()
    assert w.data[0] == 4.0, "no grad, no update"
    w.grad = Tensor([0.0])
    opt.step()
    assert w.data[0] == 2.0 and opt.steps == 2
    with pytest.raises(NotImplementedError):
        Optimizer([w], lr=0.1).step()
