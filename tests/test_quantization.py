"""Module 15 (quantization): real low-bit storage, checked against PyTorch and the error bound."""

from __future__ import annotations

import numpy as np
import pytest

from tinytorch.core.autograd import gradcheck
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.tensor import Tensor, manual_seed
from tinytorch.models.transformer import GPT, GPTConfig
from tinytorch.perf.quantization import (
    QuantizedLinear,
    QuantizedMatMul,
    calibrate,
    dequantize_int4,
    dequantize_int8,
    linear_weight_nbytes,
    model_nbytes,
    pack_int4,
    quantize_int4,
    quantize_int8,
    quantize_model,
    unpack_int4,
)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:torch.quantize_per:UserWarning")


def weights(shape, seed=0):
    rng = np.random.default_rng(seed)
    rows = rng.uniform(0.05, 3.0, (shape[0], 1))  # rows of very different ranges
    return (rng.standard_normal(shape) * rows).astype(np.float32)


@pytest.mark.parametrize("symmetric", [True, False])
def test_int8_per_channel_equals_torch(symmetric):
    w = weights((48, 96))
    w[3] = 0.0  # a zero row: the scale is clamped, not divided by
    w[5] = np.abs(w[5])  # a one-sided row: asymmetric must use its own zero point
    if symmetric:
        observer = torch.ao.quantization.PerChannelMinMaxObserver(
            ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
            quant_min=-127, quant_max=127)
    else:
        observer = torch.ao.quantization.PerChannelMinMaxObserver(
            ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_affine)
    tw = torch.from_numpy(w)
    observer(tw)
    t_scale, t_zero = observer.calculate_qparams()
    t_q = torch.quantize_per_channel(tw, t_scale, t_zero, 0, torch.qint8)

    q, scale, zero = quantize_int8(w, axis=0, symmetric=symmetric)
    assert q.dtype == np.int8 and scale.dtype == np.float32 and zero.dtype == np.int32
    np.testing.assert_array_equal(scale, t_scale.numpy())
    np.testing.assert_array_equal(zero, t_zero.numpy())
    np.testing.assert_array_equal(q, t_q.int_repr().numpy())
    np.testing.assert_array_equal(dequantize_int8(q, scale, zero, axis=0), t_q.dequantize().numpy())


def near_halves(rows=64, cols=256, seed=0):
    """Rows whose values sit within a few float32 steps of a rounding half of w / s.

    Each row's largest magnitude is 1.0 (its own scale s = 1 / 127 symmetric); the other
    values are (k + 1/2) s nudged by -3..3 ulps, where w / s and w * (1 / s) disagree most.
    """
    rng = np.random.default_rng(seed)
    s = np.float32(1) / np.float32(127)
    k = rng.integers(-126, 126, (rows, cols)).astype(np.float32)
    w = ((k + np.float32(0.5)) * s).astype(np.float32)
    for _ in range(3):  # nudge each value by up to 3 ulps either way
        step = rng.integers(-1, 2, w.shape)
        w = np.where(step > 0, np.nextafter(w, np.float32(np.inf)),
                     np.where(step < 0, np.nextafter(w, np.float32(-np.inf)), w))
    w[:, 0] = 1.0
    return w.astype(np.float32)


@pytest.mark.parametrize("symmetric", [True, False])
def test_int8_near_rounding_halves_equals_torch(symmetric):
    """Issue 25: quantize_int8 rounds w * (1 / s), as PyTorch does, so values near a half land
    on PyTorch's side of it; w / s lands on the other side for some of them."""
    w = near_halves()
    if symmetric:
        observer = torch.ao.quantization.PerChannelMinMaxObserver(
            ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
            quant_min=-127, quant_max=127)
    else:
        observer = torch.ao.quantization.PerChannelMinMaxObserver(
            ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_affine)
    tw = torch.from_numpy(w)
    observer(tw)
    t_scale, t_zero = observer.calculate_qparams()
    want = torch.quantize_per_channel(tw, t_scale, t_zero, 0, torch.qint8).int_repr().numpy()
    q, scale, zero = quantize_int8(w, axis=0, symmetric=symmetric)
    np.testing.assert_array_equal(scale, t_scale.numpy())
    np.testing.assert_array_equal(q, want)
    if symmetric:  # the test can fail: dividing gives other integers on these values
        divided = np.clip(np.rint(w / scale[:, None]), -127, 127)
        assert (divided != want).sum() > 0
    # per tensor, affine
    flat = w.reshape(-1)
    observer = torch.ao.quantization.MinMaxObserver(dtype=torch.qint8,
                                                    qscheme=torch.per_tensor_affine)
    observer(torch.from_numpy(flat))
    t_scale, t_zero = observer.calculate_qparams()
    want = torch.quantize_per_tensor(torch.from_numpy(flat), float(t_scale), int(t_zero),
                                     torch.qint8).int_repr().numpy()
    q, scale, zero = quantize_int8(flat, symmetric=False)
    assert float(scale) == float(t_scale) and int(zero) == int(t_zero)
    np.testing.assert_array_equal(q, want)


def test_the_issue_25_reproducer():
    """[[1.0, -0.94094485]] per channel: -119 as PyTorch, where dividing gives -120."""
    q, scale, _ = quantize_int8(np.array([[1.0, -0.94094485]], dtype=np.float32), axis=0)
    assert q.tolist() == [[127, -119]]
    assert np.rint(np.float32(-0.94094485) / scale[0]) == -120


def test_quantized_matmul_gradient_to_the_input():
    """QuantizedMatMul's rule sends grad @ deq(W) to x: float64 gradcheck, both formats."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 8)).astype(np.float32)
    for bits, (qw, sc), gs in ((8, quantize_int8(w, axis=0)[:2], None),
                               (4, quantize_int4(w, 4), 4)):
        x = Tensor(rng.standard_normal((3, 8)), dtype=np.float64, requires_grad=True)
        gradcheck(lambda t: QuantizedMatMul.apply(t, qweight=qw, scale=sc, bits=bits,
                                                  group_size=gs), [x])


def test_int8_per_tensor_equals_torch():
    w = weights((16, 32), seed=1)
    q, scale, zero = quantize_int8(w, symmetric=False)
    observer = torch.ao.quantization.MinMaxObserver(dtype=torch.qint8,
                                                    qscheme=torch.per_tensor_affine)
    observer(torch.from_numpy(w))
    t_scale, t_zero = observer.calculate_qparams()
    t_q = torch.quantize_per_tensor(torch.from_numpy(w), float(t_scale), int(t_zero), torch.qint8)
    assert float(scale) == float(t_scale) and int(zero) == int(t_zero)
    np.testing.assert_array_equal(q, t_q.int_repr().numpy())


@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_int4_round_trip_within_half_a_scale_per_group(group_size):
    w = weights((24, 256), seed=group_size)
    w[0, :group_size] *= 50  # an outlier group: it must not spoil its neighbours
    packed, scales = quantize_int4(w, group_size)
    assert packed.dtype == np.uint8 and packed.shape == (24, 128)
    assert scales.dtype == np.float32 and scales.shape == (24, 256 // group_size)
    err = np.abs(w - dequantize_int4(packed, scales, group_size))
    worst = err.reshape(24, -1, group_size).max(axis=-1)  # (rows, groups)
    assert np.all(worst <= scales / 2 * (1 + 1e-6))
    assert np.all(worst > 0.0)  # rounding happened: the check is not vacuous
    assert worst[0, 1] < worst[0, 0] / 10  # the group after the outlier has its own scale


def test_int4_packing_is_lossless_and_two_per_byte():
    q = np.random.default_rng(0).integers(-8, 8, (5, 64))
    packed = pack_int4(q)
    assert packed.nbytes == q.size // 2
    np.testing.assert_array_equal(unpack_int4(packed), q)
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        pack_int4(np.array([0, 8]))


@pytest.mark.parametrize("bits,group_size", [(8, None), (4, 32), (4, 128)])
def test_quantized_linear_holds_no_float32_weight(bits, group_size):
    manual_seed(0)
    linear = Linear(256, 96)
    q = QuantizedLinear.from_linear(linear, bits=bits, group_size=group_size or 32)
    arrays = [v for v in vars(q).values() if isinstance(v, np.ndarray)]
    arrays += [p.data for p in q.parameters()]
    held = sum(a.nbytes for a in arrays)
    float_weight = 256 * 96 * 4
    expected = {8: 256 * 96 + 96 * 4, 4: 256 * 96 // 2 + 96 * (256 // (group_size or 32)) * 4}[bits]
    assert held == expected + 96 * 4  # + the float32 bias
    assert held < float_weight * (0.27 if bits == 8 else 0.17)
    assert not any(a.dtype == np.float32 and a.size >= 256 * 96 for a in arrays)
    x = Tensor(np.random.default_rng(1).standard_normal((4, 7, 256)).astype(np.float32))
    want = x.data @ q.dequantized_weight().T + linear.bias.data
    np.testing.assert_allclose(q(x).data, want, rtol=1e-5, atol=1e-5)


def test_int8_activations_accumulate_in_int32_exactly():
    manual_seed(0)
    q = QuantizedLinear.from_linear(Linear(512, 64, bias=False), bits=8)
    rng = np.random.default_rng(2)
    x = Tensor(rng.standard_normal((32, 512)).astype(np.float32))
    calibrate(Sequential(q), [x])
    xq = np.clip(np.rint(x.data / q.input_scale), -127, 127)
    exact = (xq.astype(np.int64) @ q.qweight.astype(np.int64).T)  # integers, no overflow
    want = exact * (np.float64(q.input_scale) * q.scale.astype(np.float64))
    np.testing.assert_allclose(q(x).data, want, rtol=1e-6)
    # the integer path approximates the float one
    ref = x.data @ q.dequantized_weight().T
    assert np.abs(q(x).data - ref).max() < 0.02 * np.abs(ref).max()


def test_calibration_percentile_clips_outliers():
    manual_seed(0)
    q = QuantizedLinear.from_linear(Linear(64, 8), bits=8)
    x = np.random.default_rng(3).standard_normal((200, 64)).astype(np.float32)
    x[0, 0] = 100.0  # one outlier
    calibrate(Sequential(q), [Tensor(x)], method="minmax")
    assert q.input_scale == pytest.approx(100.0 / 127)
    calibrate(Sequential(q), [Tensor(x)], method="percentile", percentile=99.9)
    assert q.input_scale < 5.0 / 127
    with pytest.raises(ValueError, match="minmax"):
        calibrate(Sequential(q), [Tensor(x)], method="mean")


def small_gpt():
    manual_seed(0)
    return GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=4, n_embd=64))


@pytest.mark.parametrize("bits,tolerance", [(8, 0.005), (4, 0.05)])
def test_quantize_model_on_gpt(bits, tolerance):
    model = small_gpt()
    idx = np.random.default_rng(0).integers(0, 40, (3, 16))
    _, loss_before = model(idx, idx)
    total_before = model_nbytes(model)
    names = quantize_model(model, bits=bits, group_size=32)
    assert sorted(names) == sorted(f"blocks.{i}.{n}" for i in range(2)
                                   for n in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"))
    assert model.lm_head.weight is model.wte.weight  # the tied head is left alone
    _, loss_after = model(idx, idx)
    assert abs(loss_after.item() - loss_before.item()) < tolerance
    assert model_nbytes(model) < total_before * (0.3 if bits == 8 else 0.2)
    # nothing float32 of a block weight's size remains anywhere in the model
    weight_sizes = {64 * 192, 64 * 64, 64 * 256}
    for name, module in model.named_modules():
        if name.startswith("blocks"):
            for value in vars(module).values():
                if isinstance(value, np.ndarray) and value.dtype == np.float32:
                    assert value.size not in weight_sizes, name


def test_model_nbytes_counts_tied_arrays_once():
    model = small_gpt()
    assert model_nbytes(model) == sum(p.data.nbytes for p in model.parameters())
    assert linear_weight_nbytes(model) == sum(
        m.weight.data.nbytes for m in model.modules() if isinstance(m, Linear))


def test_bad_input_is_a_clear_error():
    model = small_gpt()
    with pytest.raises(ValueError, match="4 or 8"):
        quantize_model(model, bits=2)
    with pytest.raises(ValueError, match=r"group_size 48 does not divide .*64"):
        quantize_model(model, bits=4, group_size=48)
    assert not any(isinstance(m, QuantizedLinear) for m in model.modules())  # untouched
    quantize_model(model, bits=8)
    with pytest.raises(ValueError, match="already quantized"):
        quantize_model(model, bits=4)
    with pytest.raises(ValueError, match="4 or 8"):
        QuantizedLinear.from_linear(Linear(8, 8), bits=16)
    with pytest.raises(ValueError, match="even"):
        quantize_int4(np.ones((2, 64), dtype=np.float32), 31)


def test_quantize_model_inside_sequential():
    manual_seed(0)
    net = Sequential(Linear(32, 64), Linear(64, 8))
    x = Tensor(np.random.default_rng(0).standard_normal((5, 32)).astype(np.float32))
    ref = net(x).data
    assert quantize_model(net, bits=8, skip=()) == ["0", "1"]
    assert all(isinstance(layer, QuantizedLinear) for layer in net)  # the forward's list too
    assert np.abs(net(x).data - ref).max() < 0.02 * np.abs(ref).max()
