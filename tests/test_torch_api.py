"""PyTorch spellings a PyTorch user expects (issue #15), checked against torch itself."""

import numpy as np
import pytest

from tinytorch.core.activations import LogSoftmax, Softmax, log_softmax, softmax
from tinytorch.core.tensor import Tensor, manual_seed

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("name", ["sum", "mean", "max"])
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2), [1, 2]])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_take_dim_and_keepdim(name, dim, keepdim):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    t = torch.from_numpy(x)
    if dim is None:
        want = getattr(t, name)()
        if keepdim:
            want = want.reshape((1,) * x.ndim)
    elif name == "max":
        want = t.amax(dim=dim, keepdim=keepdim)
    else:
        want = getattr(t, name)(dim=dim, keepdim=keepdim)
    torch_style = getattr(Tensor(x), name)(dim=dim, keepdim=keepdim)
    numpy_style = getattr(Tensor(x), name)(axis=dim, keepdims=keepdim)
    for got in (torch_style, numpy_style):
        assert got.shape == tuple(want.shape) and got.dtype == np.float32
        np.testing.assert_allclose(got.data, want.numpy(), rtol=1e-6, atol=1e-6)


def test_reduction_dim_positional_and_gradient():
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    a = Tensor(x, requires_grad=True)
    a.sum(1, keepdim=True).sum().backward()
    np.testing.assert_array_equal(a.grad.data, np.ones_like(x))


@pytest.mark.parametrize("name", ["sum", "mean", "max"])
def test_reduction_both_spellings_is_a_type_error(name):
    t = Tensor(np.ones((2, 3), dtype=np.float32))
    with pytest.raises(TypeError, match="both axis=0 and dim=1"):
        getattr(t, name)(axis=0, dim=1)
    with pytest.raises(TypeError, match="both keepdims=True and keepdim=False"):
        getattr(t, name)(dim=0, keepdims=True, keepdim=False)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_takes_dim(dim):
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    t = torch.from_numpy(x)
    for ours, theirs, cls, tcls in (
        (softmax, F.softmax, Softmax, torch.nn.Softmax),
        (log_softmax, F.log_softmax, LogSoftmax, torch.nn.LogSoftmax),
    ):
        want = theirs(t, dim=dim).numpy()
        for got in (ours(Tensor(x), dim=dim), ours(Tensor(x), axis=dim), cls(dim=dim)(Tensor(x))):
            np.testing.assert_allclose(got.data, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cls(dim)(Tensor(x)).data, tcls(dim)(t).numpy(), atol=1e-6)
    # the default stays the last axis
    np.testing.assert_allclose(softmax(Tensor(x)).data, F.softmax(t, dim=-1).numpy(), atol=1e-6)


def test_softmax_both_spellings_is_a_type_error():
    x = Tensor(np.ones((2, 3), dtype=np.float32))
    for call in (
        lambda: softmax(x, axis=0, dim=1),
        lambda: log_softmax(x, axis=0, dim=1),
        lambda: Softmax(axis=0, dim=1),
        lambda: LogSoftmax(axis=0, dim=1),
    ):
        with pytest.raises(TypeError, match="both axis=0 and dim=1"):
            call()


# ---- optimizers: parameter groups and exact resumption (module 07) ---------------------
from tinytorch.core.optimizers import SGD, Adam, AdamW  # noqa: E402


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3,), (3, 2))]
    grads = [[rng.standard_normal(w.shape).astype(np.float32) for w in weights] for _ in range(8)]
    return weights, grads


def _groups_ours(ts, kind):
    return [{"params": [ts[0], ts[2]]}, {"params": [ts[1]], "weight_decay": 0.0, "lr": 0.02}]


def _make(kind, groups):
    if kind == "sgd":
        return SGD(groups, lr=0.1, momentum=0.9, weight_decay=0.01)
    return AdamW(groups, lr=0.05, betas=(0.9, 0.99), weight_decay=0.1)


def _make_torch(kind, groups):
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=0.1, momentum=0.9, weight_decay=0.01)
    return torch.optim.AdamW(groups, lr=0.05, betas=(0.9, 0.99), weight_decay=0.1)


def _run(opt, ts, grads):
    for step_grads in grads:
        for t, g in zip(ts, step_grads):
            t.grad = Tensor(g)
        opt.step()


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_param_groups_match_torch(kind):
    weights, grads = _problem()
    ts = [Tensor(w.copy()) for w in weights]
    opt = _make(kind, _groups_ours(ts, kind))
    tt = [torch.tensor(w.copy(), requires_grad=True) for w in weights]
    topt = _make_torch(kind, [{"params": [tt[0], tt[2]]},
                              {"params": [tt[1]], "weight_decay": 0.0, "lr": 0.02}])
    assert [len(g["params"]) for g in opt.param_groups] == [2, 1]
    assert opt.param_groups[1]["weight_decay"] == 0.0 and opt.param_groups[0]["weight_decay"] > 0
    for n, step_grads in enumerate(grads):
        if n == 4:  # change one group's lr the PyTorch way
            opt.param_groups[0]["lr"] = 0.03
            topt.param_groups[0]["lr"] = 0.03
        for t, tw, g in zip(ts, tt, step_grads):
            t.grad = Tensor(g)
            tw.grad = torch.from_numpy(g.copy())
        opt.step()
        topt.step()
    for t, tw in zip(ts, tt):
        np.testing.assert_allclose(t.data, tw.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert opt.param_groups[0]["lr"] == 0.03 and opt.param_groups[1]["lr"] == 0.02


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_state_dict_resumes_bit_for_bit_with_groups(kind):
    weights, grads = _problem(1)
    straight = [Tensor(w.copy()) for w in weights]
    opt = _make(kind, _groups_ours(straight, kind))
    opt.param_groups[0]["lr"] = 0.04  # a changed lr must be saved too
    _run(opt, straight, grads)

    resumed = [Tensor(w.copy()) for w in weights]
    first = _make(kind, _groups_ours(resumed, kind))
    first.param_groups[0]["lr"] = 0.04
    _run(first, resumed, grads[:3])
    # through an .npz-like conversion: every value becomes an array
    saved = {k: np.asarray(v) for k, v in first.state_dict().items()}
    second = _make(kind, _groups_ours(resumed, kind))
    second.load_state_dict(saved)
    assert second.param_groups[0]["lr"] == 0.04 and second.param_groups[1]["lr"] == 0.02
    _run(second, resumed, grads[3:])
    for a, b in zip(resumed, straight):
        assert np.array_equal(a.data, b.data)
    assert second.steps == opt.steps == len(grads)


def test_param_group_errors_and_lr_attribute():
    a, b = Tensor(np.zeros(2)), Tensor(np.zeros(3))
    with pytest.raises(ValueError, match="more than one parameter group"):
        SGD([{"params": [a]}, {"params": [a, b]}], lr=0.1)
    with pytest.raises(ValueError, match="no 'params'"):
        SGD([{"lr": 0.1}], lr=0.1)
    with pytest.raises(TypeError, match="wd"):
        SGD([{"params": [a], "wd": 0.1}], lr=0.1).param_groups  # noqa: B018 (reading it raises)
    opt = Adam([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    opt.lr = 0.2  # the module 08 schedule loop sets optimizer.lr: every group follows
    assert [g["lr"] for g in opt.param_groups] == [0.2, 0.2] and opt.lr == 0.2
    other = Adam([{"params": [a]}], lr=0.1)
    with pytest.raises(ValueError, match="parameter group 1"):
        other.load_state_dict({**opt.state_dict(), "num_params": 1,
                               "param.0.step": 0})  # wrong number of groups


# ---- tinytorch.optim.lr_scheduler (module 08) -------------------------------------------
def _lr_pairs(make_ours, make_torch, steps=40, lrs=(0.1, 0.02)):
    """lr sequences (one list per group) from ours and torch's, .step() after each step."""
    ours_opt = SGD([{"params": [Tensor(np.zeros(2))], "lr": lr} for lr in lrs], lr=lrs[0])
    torch_opt = torch.optim.SGD(
        [{"params": [torch.zeros(2, requires_grad=True)], "lr": lr} for lr in lrs], lr=lrs[0]
    )
    ours, theirs = make_ours(ours_opt), make_torch(torch_opt)
    got, want = [], []
    for _ in range(steps):
        got.append([g["lr"] for g in ours_opt.param_groups])
        want.append([g["lr"] for g in torch_opt.param_groups])
        assert ours.get_last_lr() == got[-1]
        torch_opt.step()  # torch warns when the scheduler steps before the optimizer
        ours.step()
        theirs.step()
    return np.array(got), np.array(want)


def test_lr_scheduler_namespace():
    import tinytorch.optim
    from tinytorch.optim.lr_scheduler import CosineWarmupLR, LambdaLR, StepLR  # noqa: F401

    assert tinytorch.optim.lr_scheduler.StepLR is StepLR


def test_step_lr_matches_torch():
    from tinytorch.optim import lr_scheduler

    got, want = _lr_pairs(lambda o: lr_scheduler.StepLR(o, step_size=7, gamma=0.5),
                          lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=7, gamma=0.5))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_lambda_lr_matches_torch():
    from tinytorch.optim import lr_scheduler

    def f(s):
        return 1.0 / (1.0 + 0.3 * s)

    got, want = _lr_pairs(lambda o: lr_scheduler.LambdaLR(o, f),
                          lambda o: torch.optim.lr_scheduler.LambdaLR(o, f))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_cosine_warmup_lr_matches_torch():
    from tinytorch.optim import lr_scheduler

    w, total, min_lr = 5, 30, 1e-3

    def nanogpt(base):  # nanoGPT's get_lr, written out independently, as a factor of base
        def f(s):
            if s < w:
                return (s + 1) / (w + 1)
            if s > total:
                return min_lr / base
            ratio = 0.5 * (1 + np.cos(np.pi * (s - w) / (total - w)))
            return (min_lr + ratio * (base - min_lr)) / base
        return f

    got, want = _lr_pairs(
        lambda o: lr_scheduler.CosineWarmupLR(o, warmup_steps=w, total_steps=total, min_lr=min_lr),
        lambda o: torch.optim.lr_scheduler.LambdaLR(o, [nanogpt(0.1), nanogpt(0.02)]),
    )
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    # without warm-up it is torch's CosineAnnealingLR up to step total
    got, want = _lr_pairs(
        lambda o: lr_scheduler.CosineWarmupLR(o, warmup_steps=0, total_steps=total, min_lr=min_lr),
        lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=total, eta_min=min_lr),
        steps=total + 1,
    )
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)


def test_scheduler_state_dict_resumes_and_schedule_functions():
    from tinytorch.core.training import CosineWarmup
    from tinytorch.optim import lr_scheduler

    sched_fn = CosineWarmup(max_lr=0.1, min_lr=0.01, warmup_steps=3, total_steps=20)
    opt = SGD([Tensor(np.zeros(2))], lr=0.1)
    sched = lr_scheduler.ScheduleLR(opt, sched_fn)
    seen = []
    for _ in range(10):
        seen.append(opt.lr)
        sched.step()
    assert seen == [sched_fn(s) for s in range(10)]  # the function schedules, unchanged
    saved = {k: np.asarray(v) for k, v in sched.state_dict().items()}
    opt2 = SGD([Tensor(np.zeros(2))], lr=0.1)
    other = lr_scheduler.ScheduleLR(opt2, sched_fn)
    other.load_state_dict(saved)
    other.step()
    sched.step()
    assert opt2.lr == opt.lr == sched_fn(11)
    with pytest.raises(ValueError, match="parameter groups"):
        lr_scheduler.StepLR(SGD([{"params": [Tensor(np.zeros(1))]}, {"params": [Tensor(
            np.zeros(1))]}], lr=0.1), step_size=2).load_state_dict(saved)


# ---- cross-entropy: (N, C, d1, ...), ignore_index, label_smoothing (module 04) ----------
from tinytorch.core.losses import CrossEntropyLoss, cross_entropy  # noqa: E402

CE_CASES = [  # (logits shape, ignore some targets, label_smoothing)
    ((6, 5), False, 0.0), ((6, 5), True, 0.1), ((3, 4, 5), True, 0.0),
    ((2, 4, 3, 2), True, 0.2), ((2, 4, 3), False, 0.3),
]


def _ce_inputs(shape, ignore, seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(shape) * 2
    target_shape = (shape[0],) + shape[2:]
    target = rng.integers(0, shape[1], size=target_shape)
    if ignore:
        target.reshape(-1)[::3] = -100
    return logits, target


@pytest.mark.parametrize("shape,ignore,smoothing", CE_CASES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch(shape, ignore, smoothing, reduction):
    logits, target = _ce_inputs(shape, ignore)
    for dtype, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
        x = Tensor(logits, dtype=dtype, requires_grad=True)
        got = cross_entropy(x, target, reduction=reduction, label_smoothing=smoothing)
        tx = torch.tensor(logits.astype(dtype), requires_grad=True)
        want = F.cross_entropy(tx, torch.from_numpy(target), reduction=reduction,
                               label_smoothing=smoothing)
        assert got.shape == tuple(want.shape) and got.dtype == dtype
        np.testing.assert_allclose(got.data, want.detach().numpy(), rtol=tol, atol=tol)
        weights = np.random.default_rng(1).standard_normal(got.shape).astype(dtype)
        (got * Tensor(weights, dtype=dtype)).sum().backward()
        (want * torch.from_numpy(weights)).sum().backward()
        np.testing.assert_allclose(x.grad.data, tx.grad.numpy(), rtol=tol, atol=tol)
        assert x.grad.data.dtype == dtype


@pytest.mark.parametrize("shape,ignore,smoothing", CE_CASES[1:4])
def test_cross_entropy_gradient_finite_differences(shape, ignore, smoothing):
    logits, target = _ce_inputs(shape, ignore, seed=2)
    x = Tensor(logits, dtype=np.float64, requires_grad=True)
    cross_entropy(x, target, label_smoothing=smoothing).backward()
    eps, numeric = 1e-6, np.zeros_like(logits)
    for i in np.ndindex(logits.shape):
        up, down = logits.copy(), logits.copy()
        up[i] += eps
        down[i] -= eps
        f_up = cross_entropy(Tensor(up, dtype=np.float64), target, label_smoothing=smoothing)
        f_down = cross_entropy(Tensor(down, dtype=np.float64), target, label_smoothing=smoothing)
        numeric[i] = (f_up.item() - f_down.item()) / (2 * eps)
    np.testing.assert_allclose(x.grad.data, numeric, rtol=1e-6, atol=1e-8)


def test_cross_entropy_all_ignored_is_nan_and_errors():
    logits = Tensor(np.zeros((2, 3, 4), dtype=np.float32))
    target = np.full((2, 4), -100)
    assert np.isnan(cross_entropy(logits, target).item())
    assert np.isnan(cross_entropy(logits, target, label_smoothing=0.1).item())
    with pytest.raises(ValueError, match="label_smoothing"):
        cross_entropy(logits, np.zeros((2, 4), dtype=np.int64), label_smoothing=1.5)
    with pytest.raises(Exception, match=r"\(2, 3, 4\)"):  # a target fitting neither layout
        cross_entropy(logits, np.zeros((2, 3), dtype=np.int64))
    loss = CrossEntropyLoss(label_smoothing=0.1, ignore_index=0)
    assert "label_smoothing=0.1" in repr(loss)
    x = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    t = np.array([0, 1, 2, 1])
    want = F.cross_entropy(torch.from_numpy(x), torch.from_numpy(t), ignore_index=0,
                           label_smoothing=0.1)
    np.testing.assert_allclose(loss(Tensor(x), t).item(), want.item(), rtol=1e-6)


# ---- Embedding(padding_idx=) (module 11) -------------------------------------------------
from tinytorch.core.embeddings import Embedding  # noqa: E402


@pytest.mark.parametrize("padding_idx", [0, 3, -1])
def test_embedding_padding_idx_matches_torch(padding_idx):
    ours = Embedding(6, 4, padding_idx=padding_idx)
    row = padding_idx % 6
    assert np.array_equal(ours.weight.data[row], np.zeros(4, np.float32))
    assert ours.weight.data.dtype == np.float32 and f"padding_idx={row}" in repr(ours)
    theirs = torch.nn.Embedding(6, 4, padding_idx=padding_idx)
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(ours.weight.data))
    ids = np.array([[row, 1, 2, row], [5, row, 0, 3]])
    out = ours(ids)
    want = theirs(torch.from_numpy(ids))
    np.testing.assert_array_equal(out.data, want.detach().numpy())
    w = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
    (out * Tensor(w)).sum().backward()
    (want * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(ours.weight.grad.data, theirs.weight.grad.numpy(), atol=1e-6)
    assert not ours.weight.grad.data[row].any()
    # a padding row given a value (as PyTorch allows) is looked up as it is, still no gradient
    ours.weight.data[row] = 2.0
    ours.weight.grad = None
    out = ours(ids)
    np.testing.assert_array_equal(out.data[0, 0], np.full(4, 2.0, np.float32))
    out.sum().backward()
    assert not ours.weight.grad.data[row].any() and ours.weight.grad.data[1].all()


def test_embedding_padding_idx_out_of_range():
    with pytest.raises(ValueError, match=r"padding_idx=6.*\[0, 6\)"):
        Embedding(6, 4, padding_idx=6)


# ---- LayerNorm(normalized_shape), elementwise_affine, RMSNorm eps (module 13) -----------
from tinytorch.models.transformer import LayerNorm, RMSNorm  # noqa: E402


@pytest.mark.parametrize("shape,affine,bias", [
    (5, True, True), ((5,), False, True), ((3, 5), True, True), ((3, 5), True, False),
    ((2, 3, 5), False, True),
])
def test_layer_norm_shapes_match_torch(shape, affine, bias):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 2, 3, 5)).astype(np.float32)
    ours = LayerNorm(shape, elementwise_affine=affine, bias=bias)
    theirs = torch.nn.LayerNorm(shape, elementwise_affine=affine, bias=bias)
    if affine:
        ours.weight.data[...] = rng.standard_normal(ours.weight.shape).astype(np.float32)
        with torch.no_grad():
            theirs.weight.copy_(torch.from_numpy(ours.weight.data))
            if bias:
                ours.bias.data[...] = rng.standard_normal(ours.bias.shape).astype(np.float32)
                theirs.bias.copy_(torch.from_numpy(ours.bias.data))
    else:
        assert ours.weight is None and ours.bias is None
        assert len(list(ours.parameters())) == 0 and "elementwise_affine=False" in repr(ours)
    xt = Tensor(x, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    y, want = ours(xt), theirs(tx)
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_allclose(y.data, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    w = rng.standard_normal(x.shape).astype(np.float32)
    (y * Tensor(w)).sum().backward()
    (want * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(xt.grad.data, tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    if affine:
        assert ours.weight.grad.shape == ours.weight.shape
        np.testing.assert_allclose(ours.weight.grad.data, theirs.weight.grad.numpy(),
                                   rtol=1e-4, atol=1e-4)


def test_layer_norm_tuple_gradient_finite_differences():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4))
    ln = LayerNorm((3, 4))
    ln.weight.data = rng.standard_normal((3, 4))  # float64 weights, for the check
    ln.bias.data = rng.standard_normal((3, 4))
    w = rng.standard_normal(x.shape)

    def f(xv, wv):
        ln.weight.data = wv
        return float(np.sum(ln(Tensor(xv, dtype=np.float64)).data * w))

    xt = Tensor(x, dtype=np.float64, requires_grad=True)
    weight0 = ln.weight.data.copy()
    (ln(xt) * Tensor(w, dtype=np.float64)).sum().backward()
    eps = 1e-6
    for value, grad, is_x in ((x, xt.grad.data, True), (weight0, ln.weight.grad.data, False)):
        numeric = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            up, down = value.copy(), value.copy()
            up[i] += eps
            down[i] -= eps
            if is_x:
                numeric[i] = (f(up, weight0) - f(down, weight0)) / (2 * eps)
            else:
                numeric[i] = (f(x, up) - f(x, down)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def test_layer_norm_shape_error_names_both_shapes():
    with pytest.raises(Exception, match=r"\(3, 5\).*\(2, 4, 5\)"):
        LayerNorm((3, 5))(Tensor(np.zeros((2, 4, 5), np.float32)))


def test_rms_norm_eps_none_is_torch_default():
    x = np.random.default_rng(6).standard_normal((3, 8)).astype(np.float32) * 1e-3
    want = torch.nn.RMSNorm(8)(torch.from_numpy(x)).detach().numpy()  # eps=None
    np.testing.assert_allclose(RMSNorm(8, eps=None)(Tensor(x)).data, want, rtol=1e-5)
    assert RMSNorm(8).eps == 1e-6  # LLaMA's default, documented in the docstring
    want_llama = torch.nn.RMSNorm(8, eps=1e-6)(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(RMSNorm(8)(Tensor(x)).data, want_llama, rtol=1e-5)


def test_grouped_adamw_resumes_through_a_checkpoint_file(tmp_path):
    """The TinyGPT pattern: one AdamW, no decay for 1-D parameters, saved with the model."""
    from tinytorch.core.layers import Linear
    from tinytorch.core.training import load_checkpoint, save_checkpoint

    def build():
        manual_seed(0)
        model = Linear(3, 2)
        params = list(model.parameters())
        opt = AdamW([{"params": [p for p in params if p.ndim >= 2]},
                     {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
                     {"params": []}],  # an empty group is allowed, as in PyTorch
                    lr=0.01, betas=(0.9, 0.99), weight_decay=0.1)
        return model, opt

    rng = np.random.default_rng(8)
    grads = [[rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (2,))] for _ in range(6)]

    def run(model, opt, gs):
        for g in gs:
            for p, gp in zip(model.parameters(), g):
                p.grad = Tensor(gp)
            opt.step()

    model, opt = build()
    run(model, opt, grads)
    model2, opt2 = build()
    run(model2, opt2, grads[:2])
    save_checkpoint(tmp_path / "ck.npz", model2, opt2, step=2)
    model3, opt3 = build()
    load_checkpoint(tmp_path / "ck.npz", model3, opt3)
    run(model3, opt3, grads[2:])
    for a, b in zip(model.parameters(), model3.parameters()):
        assert np.array_equal(a.data, b.data)
