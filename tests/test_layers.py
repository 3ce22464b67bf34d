"""Module 03 (layers) as exported into the package: registry, Linear, Dropout, Sequential.

Compared with PyTorch where the behaviour is meant to match (layouts, names, orders, repr).
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinytorch.core.tensor import ShapeError, Tensor, default_generator, manual_seed
from tinytorch.nn import Dropout, Linear, Module, Parameter, Sequential, StateDictError


def torch_or_skip():
    return pytest.importorskip("torch")


def relu_or_skip():
    try:
        from tinytorch.nn import ReLU
    except ImportError:
        pytest.skip("module 02 (activations) is not exported")
    return ReLU


class Leaf(Module):
    def __init__(self, n_in=3, n_out=2):
        super().__init__()
        self.weight = Parameter(np.ones((n_out, n_in)))
        self.bias = Parameter(np.zeros(n_out))


# ---- Parameter ------------------------------------------------------------------------


def test_parameter_is_float32_tensor_requiring_grad():
    p = Parameter([[1, 2], [3, 4]])
    assert isinstance(p, Tensor) and p.requires_grad and p.dtype == np.float32
    assert Parameter(np.ones(2), dtype=np.float64).dtype == np.float64
    a = np.ones(3, dtype=np.float32)
    assert np.shares_memory(Parameter(a).data, a)
    assert type(p + 1) is Tensor and (p + 1).requires_grad
    assert repr(p).startswith("Parameter containing:")
    with pytest.raises(TypeError):
        Parameter(np.ones(2, dtype=np.int64), dtype=np.int64)


# ---- the registry -----------------------------------------------------------------------


def test_setattr_registers_replaces_and_removes():
    class Net(Module):
        def __init__(self):
            super().__init__()
            self.a = Leaf()
            self.w = Parameter(np.ones(2))
            self.b = Leaf()
            self.plain = Tensor([1.0])  # a plain Tensor is not a parameter
            self.items = [Leaf()]  # a list is not scanned

    net = Net()
    assert list(net._modules) == ["a", "b"] and list(net._parameters) == ["w"]
    old_order = [n for n, _ in net.named_parameters()]
    net.a = Leaf(3, 4)  # replace: keeps its place
    assert [n for n, _ in net.named_parameters()] == old_order
    assert net.a.weight.shape == (4, 3)
    net.w = Leaf()  # a Parameter name re-used for a Module moves registries
    assert "w" not in net._parameters and "w" in net._modules
    net.w = Parameter(np.zeros(1))
    assert "w" in net._parameters and "w" not in net._modules
    net.b = None
    assert "b" not in net._modules and net.b is None
    net.w = 3
    assert "w" not in net._parameters and net.w == 3
    del net.a
    assert "a" not in net._modules and not hasattr(net, "a")
    assert [n for n, _ in net.named_parameters()] == []


def test_missing_super_init_names_the_fix():
    class Forgot(Module):
        def __init__(self):
            self.fc = Leaf()

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Forgot()

    class PlainFirst(Module):
        def __init__(self):
            self.size = 3  # plain attributes before super().__init__() are allowed
            super().__init__()
            self.fc = Leaf()

    assert PlainFirst().size == 3


def test_base_forward_not_implemented():
    with pytest.raises(NotImplementedError, match="forward"):
        Module()(Tensor([1.0]))


def test_named_parameters_order_matches_torch():
    torch = torch_or_skip()

    class Encoder(Module):
        def __init__(self):
            super().__init__()
            self.fc = Linear(4, 8)

    class Net(Module):
        def __init__(self):
            super().__init__()
            self.encoder = Encoder()
            self.scale = Parameter(np.ones(8))
            self.head = Linear(8, 2)

    class TEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 8)

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = TEncoder()
            self.scale = torch.nn.Parameter(torch.ones(8))
            self.head = torch.nn.Linear(8, 2)

    ours, theirs = Net(), TNet()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [tuple(p.shape) for p in ours.parameters()] == [
        tuple(p.shape) for p in theirs.parameters()
    ]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters())


def test_tied_weights_counted_once_like_torch():
    torch = torch_or_skip()

    class Tied(Module):
        def __init__(self):
            super().__init__()
            self.embed = Linear(6, 6)
            self.head = Linear(6, 6)
            self.head.weight = self.embed.weight

    class TTied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(6, 6)
            self.head = torch.nn.Linear(6, 6)
            self.head.weight = self.embed.weight

    ours, theirs = Tied(), TTied()
    names = [n for n, _ in ours.named_parameters()]
    assert names == [n for n, _ in theirs.named_parameters()] == [
        "embed.weight", "embed.bias", "head.bias"
    ]
    assert len(list(ours.parameters())) == 3
    assert ours.num_parameters() == 36 + 6 + 6
    # state dicts list a tied parameter under every name, as PyTorch's do
    assert list(ours.state_dict()) == list(theirs.state_dict())
    state = ours.state_dict()
    assert state["embed.weight"] is state["head.weight"]  # one copy for one parameter
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    assert ours.head.weight is ours.embed.weight


def test_shared_module_visited_once_like_torch():
    torch = torch_or_skip()
    layer = Linear(3, 3)
    seq = Sequential(layer, layer)
    t_layer = torch.nn.Linear(3, 3)
    t_seq = torch.nn.Sequential(t_layer, t_layer)
    assert [n for n, _ in seq.named_parameters()] == [n for n, _ in t_seq.named_parameters()]
    assert len(list(seq.modules())) == len(list(t_seq.modules())) == 2
    assert list(seq.state_dict()) == list(t_seq.state_dict())
    assert [n for n, _ in seq.named_parameters(remove_duplicate=False)] == [
        "0.weight", "0.bias", "1.weight", "1.bias"
    ]


def test_named_parameters_prefix_and_recurse():
    class Net(Module):
        def __init__(self):
            super().__init__()
            self.own = Parameter(np.ones(1))
            self.child = Leaf()

    net = Net()
    assert [n for n, _ in net.named_parameters(prefix="model")] == [
        "model.own", "model.child.weight", "model.child.bias"
    ]
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["own"]
    assert len(list(net.parameters(recurse=False))) == 1
    assert list(net.children()) == [net.child]
    assert list(net.modules()) == [net, net.child]


def test_train_eval_recursive_and_return_self():
    model = Sequential(Linear(2, 2), Sequential(Dropout(0.5), Linear(2, 2)))
    assert model.eval() is model
    assert [m.training for m in model.modules()] == [False] * 5
    assert model.train() is model
    assert all(m.training for m in model.modules())
    model[1].eval()
    assert model.training and not model[1][0].training
    with pytest.raises(TypeError):
        model.train("no")


def test_zero_grad_sets_none():
    model = Sequential(Linear(2, 3), Linear(3, 1))
    for p in model.parameters():
        p.grad = Tensor(np.ones(p.shape))
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


# ---- state dicts ------------------------------------------------------------------------


def test_state_dict_round_trip_copies_and_loads_in_place():
    manual_seed(0)
    a = Sequential(Linear(4, 3), Linear(3, 2))
    b = Sequential(Linear(4, 3), Linear(3, 2))
    state = a.state_dict()
    assert all(isinstance(v, np.ndarray) and v.dtype == np.float32 for v in state.values())
    state["0.weight"][...] = 7.0
    assert not np.any(a[0].weight.data == 7.0), "state_dict must hold copies"
    params_before = [(p, p.data) for p in b.parameters()]
    b.load_state_dict({k: v.astype(np.float64) for k, v in a.state_dict().items()})
    for (p, data), q in zip(params_before, b.parameters()):
        assert p is q and q.data is data and q.dtype == np.float32
    x = Tensor(np.ones((5, 4), dtype=np.float32))
    assert np.array_equal(a(x).data, b(x).data)


def test_load_state_dict_lists_every_problem_and_loads_nothing():
    model = Sequential(Linear(3, 4), Linear(4, 2))
    before = {k: v.copy() for k, v in model.state_dict().items()}
    bad = {
        "0.weight": np.zeros((4, 5)),  # mis-shaped
        "0.bias": np.zeros(4),  # fine (but must not load: the load fails)
        "2.weight": np.zeros((2, 4)),  # unexpected
        "extra": np.zeros(1),  # unexpected
    }  # missing: 1.weight, 1.bias
    with pytest.raises(StateDictError) as info:
        model.load_state_dict(bad)
    message = str(info.value)
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
    for key in ("'1.weight'", "'1.bias'", "'2.weight'", "'extra'", "'0.weight'"):
        assert key in message
    assert "(4, 5)" in message and "(4, 3)" in message
    assert "'0.bias'" not in message
    assert not message.startswith("'"), "the message must not be quoted like a plain KeyError"
    for k, v in model.state_dict().items():
        assert np.array_equal(v, before[k]), f"{k} changed during a failed load"
    with pytest.raises(KeyError):
        model.load_state_dict({})
    with pytest.raises(ValueError, match=r"\(7,\)"):
        model.load_state_dict({"0.bias": np.zeros(7)}, strict=False)
    result = model.load_state_dict({"0.bias": np.ones(4), "extra": np.ones(1)}, strict=False)
    assert result.missing_keys == ["0.weight", "1.weight", "1.bias"]
    assert result.unexpected_keys == ["extra"]
    assert np.array_equal(model[0].bias.data, np.ones(4))


def test_load_torch_state_dict_and_match_outputs():
    torch = torch_or_skip()
    ReLU = relu_or_skip()
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    ours = Sequential(Linear(6, 16), ReLU(), Linear(16, 3))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    with torch.no_grad():
        want = theirs(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours(Tensor(x)).data, want, rtol=1e-5, atol=1e-6)
    assert repr(ours) == repr(theirs)


# ---- Linear -----------------------------------------------------------------------------


def test_linear_matches_torch_functional_linear():
    torch = torch_or_skip()
    F = torch.nn.functional
    manual_seed(1)
    layer = Linear(7, 5)
    rng = np.random.default_rng(0)
    for shape in [(7,), (3, 7), (2, 4, 7)]:
        x = rng.standard_normal(shape).astype(np.float32)
        want = F.linear(torch.from_numpy(x), torch.from_numpy(layer.weight.data),
                        torch.from_numpy(layer.bias.data)).numpy()
        got = layer(Tensor(x))
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got.data, want, rtol=1e-5, atol=1e-6)
    no_bias = Linear(7, 5, bias=False)
    x = rng.standard_normal((3, 7)).astype(np.float32)
    want = F.linear(torch.from_numpy(x), torch.from_numpy(no_bias.weight.data)).numpy()
    np.testing.assert_allclose(no_bias(Tensor(x)).data, want, rtol=1e-5, atol=1e-6)
    assert [n for n, _ in no_bias.named_parameters()] == ["weight"]
    assert repr(no_bias) == repr(torch.nn.Linear(7, 5, bias=False))
    assert layer.weight.shape == tuple(torch.nn.Linear(7, 5).weight.shape)


@settings(max_examples=25, deadline=None)
@given(
    batch=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    n_in=st.integers(1, 9),
    n_out=st.integers(1, 9),
)
def test_linear_shapes_any_leading_axes(batch, n_in, n_out):
    layer = Linear(n_in, n_out)
    x = np.random.default_rng(0).standard_normal((*batch, n_in)).astype(np.float32)
    y = layer(Tensor(x))
    assert y.shape == (*batch, n_out)
    np.testing.assert_allclose(y.data, x @ layer.weight.data.T + layer.bias.data, rtol=1e-5,
                               atol=1e-5)


def test_linear_records_graph_for_autograd():
    y = Linear(3, 2)(Tensor(np.ones((1, 3), dtype=np.float32)))
    assert y.requires_grad and y._ctx is not None


def test_linear_init_bounds_and_seed():
    manual_seed(123)
    layer = Linear(256, 512)
    k = 1 / math.sqrt(256)
    w, b = layer.weight.data, layer.bias.data
    assert w.dtype == np.float32 and b.dtype == np.float32
    assert np.abs(w).max() <= k and np.abs(b).max() <= k
    assert np.abs(w).max() > 0.99 * k
    assert abs(float(w.var()) - k**2 / 3) < 0.05 * k**2 / 3
    assert abs(float(b.var()) - k**2 / 3) < 0.3 * k**2 / 3
    manual_seed(123)
    again = Linear(256, 512)
    assert np.array_equal(again.weight.data, w) and np.array_equal(again.bias.data, b)


def test_linear_shape_error_names_input_and_in_features():
    layer = Linear(5, 3)
    with pytest.raises(ShapeError) as info:
        layer(Tensor(np.ones((2, 4), dtype=np.float32)))
    assert "(2, 4)" in str(info.value) and "in_features=5" in str(info.value)
    with pytest.raises(ShapeError):
        layer(Tensor(1.0))
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError):
            Linear(bad, 3)


def test_linear_gradients_match_torch():
    torch = torch_or_skip()
    pytest.importorskip("tinytorch.core.autograd")
    manual_seed(0)
    layer = Linear(4, 3)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    layer(Tensor(x)).sum().backward()
    tw = torch.tensor(layer.weight.data, requires_grad=True)
    tb = torch.tensor(layer.bias.data, requires_grad=True)
    torch.nn.functional.linear(torch.from_numpy(x), tw, tb).sum().backward()
    np.testing.assert_allclose(layer.weight.grad.data, tw.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.bias.grad.data, tb.grad.numpy(), rtol=1e-5, atol=1e-6)


# ---- Dropout ----------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_statistics(p):
    manual_seed(0)
    x = Tensor(np.ones((400, 500), dtype=np.float32))
    y = Dropout(p)(x).data
    assert y.dtype == np.float32
    dropped = float((y == 0).mean())
    assert abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / y.size)
    np.testing.assert_allclose(y[y != 0], np.float32(1 / (1 - p)), rtol=1e-6)
    assert abs(float(y.mean()) - 1.0) < 0.02


def test_dropout_eval_identity_and_p_zero():
    x = Tensor(np.arange(6, dtype=np.float32))
    drop = Dropout(0.5).eval()
    assert drop(x) is x
    assert Dropout(0.0)(x) is x
    assert drop.train()(x) is not x


def test_dropout_uses_default_generator_each_call():
    drop = Dropout(0.5)
    x = Tensor(np.ones(1000, dtype=np.float32))
    manual_seed(3)
    a = drop(x).data
    manual_seed(3)
    assert np.array_equal(drop(x).data, a)
    assert not np.array_equal(drop(x).data, a)
    state = default_generator().bit_generator.state
    b = drop(x).data
    default_generator().bit_generator.state = state
    assert np.array_equal(drop(x).data, b)


def test_dropout_keeps_dtype_and_records_graph():
    x64 = Tensor(np.ones(8), dtype=np.float64)
    assert Dropout(0.5)(x64).dtype == np.float64
    x = Tensor(np.ones(8, dtype=np.float32), requires_grad=True)
    y = Dropout(0.5)(x)
    assert y.requires_grad and y._ctx is not None


@pytest.mark.parametrize("bad", [1, 1.0, -0.01, 2, "0.5", None, True])
def test_dropout_rejects_bad_p(bad):
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        Dropout(bad)


def test_dropout_matches_torch_repr_prefix():
    torch = torch_or_skip()
    assert repr(torch.nn.Dropout(0.25)).startswith(repr(Dropout(0.25))[:-1])


# ---- Sequential -------------------------------------------------------------------------


def test_sequential_with_plain_callables():
    class Double:
        def __call__(self, x):
            return x * 2

    fn = Double()
    first, last = Linear(3, 4), Linear(4, 2)
    model = Sequential(first, fn, last)
    assert len(model) == 3 and model[1] is fn and list(model) == [first, fn, last]
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [n for n, _ in model.named_children()] == ["0", "2"]
    x = Tensor(np.ones((2, 3), dtype=np.float32))
    np.testing.assert_allclose(model(x).data, last(first(x) * 2).data)
    assert "(1): " in repr(model) and "Double" in repr(model)
    tail = model[1:]
    assert isinstance(tail, Sequential) and list(tail) == [fn, last]
    assert model[-1] is last
    assert Sequential()(x) is x


def test_sequential_with_activations_matches_torch_names_and_repr():
    torch = torch_or_skip()
    ReLU = relu_or_skip()
    ours = Sequential(Linear(2, 3), ReLU(), Linear(3, 1))
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert repr(ours) == repr(theirs)
    assert len(ours) == len(theirs)


def test_nested_repr_like_torch():
    torch = torch_or_skip()
    ours = Sequential(Linear(2, 3), Sequential(Linear(3, 3), Linear(3, 1)))
    theirs = torch.nn.Sequential(
        torch.nn.Linear(2, 3), torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    )
    assert repr(ours) == repr(theirs)


def test_sequential_rejects_non_callables():
    with pytest.raises(TypeError, match="layer 1"):
        Sequential(Linear(2, 2), [Linear(2, 2)])
