"""tinytorch.core.training: schedules, checkpoints, evaluation, the loop, exact resumption."""

import io
import json
import math
import os
import zipfile
from itertools import islice

import numpy as np
import pytest

from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Dropout, Linear, Module, Parameter, Sequential
from tinytorch.core.losses import cross_entropy, mse_loss
from tinytorch.core.optimizers import SGD, Adam, AdamW
from tinytorch.core.tensor import Tensor, default_generator, manual_seed
from tinytorch.core.training import (
    CheckpointError,
    CosineWarmup,
    History,
    StepDecay,
    TrainingError,
    accuracy,
    batches_from,
    evaluate,
    load_checkpoint,
    read_checkpoint_meta,
    save_checkpoint,
    set_lr,
    train,
)
from tinytorch.data.loader import DataLoader, TensorDataset


# ---- data and models --------------------------------------------------------------------
def moons(n=240, seed=0):
    rng = np.random.default_rng(seed)
    angle = rng.uniform(0, np.pi, n)
    label = rng.integers(0, 2, n)
    x = np.where(label == 0, np.cos(angle), 1 - np.cos(angle))
    y = np.where(label == 0, np.sin(angle), 0.5 - np.sin(angle))
    points = np.stack([x, y], axis=1) + rng.normal(0, 0.1, (n, 2))
    return points.astype(np.float32), label.astype(np.int64)


def loaders(batch_size=32, shuffle=True):
    x, y = moons()
    train_set = TensorDataset(Tensor(x[:180]), Tensor(y[:180], dtype=np.int64))
    val_set = TensorDataset(Tensor(x[180:]), Tensor(y[180:], dtype=np.int64))
    return (DataLoader(train_set, batch_size=batch_size, shuffle=shuffle, seed=3),
            DataLoader(val_set, batch_size=25))


def mlp(seed, dropout=0.2):
    manual_seed(seed)
    return Sequential(Linear(2, 32), ReLU(), Dropout(dropout), Linear(32, 32), ReLU(),
                      Linear(32, 2))


def quiet(**kwargs):
    return dict(progress=False, **kwargs)


# ---- schedules --------------------------------------------------------------------------
def nanogpt_get_lr(it, learning_rate, min_lr, warmup_iters, lr_decay_iters):
    """nanoGPT's train.py convention, restated: warm-up (it+1)/(w+1), cosine, then min_lr."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


@pytest.mark.parametrize("max_lr,min_lr,warmup,total", [
    (1e-3, 1e-4, 100, 2000), (6e-4, 6e-5, 2000, 600000), (0.1, 0.0, 0, 50), (1.0, 1.0, 5, 6),
])
def test_cosine_warmup_matches_nanogpt(max_lr, min_lr, warmup, total):
    sched = CosineWarmup(max_lr, min_lr, warmup, total)
    steps = list(range(0, min(total + 50, 3000))) + [total - 1, total, total + 1, 10 * total]
    for s in steps:
        assert sched(s) == pytest.approx(nanogpt_get_lr(s, max_lr, min_lr, warmup, total),
                                         rel=1e-12, abs=1e-15), s


def test_cosine_warmup_by_hand():
    sched = CosineWarmup(max_lr=1e-3, min_lr=1e-4, warmup_steps=100, total_steps=2000)
    assert sched(0) == pytest.approx(1e-3 / 101)  # never exactly 0
    assert sched(99) == pytest.approx(1e-3 * 100 / 101)
    assert sched(100) == pytest.approx(1e-3)  # the peak, where the cosine starts
    assert sched(1050) == pytest.approx((1e-3 + 1e-4) / 2)
    assert sched(2000) == pytest.approx(1e-4)
    assert sched(10**6) == 1e-4
    lrs = [sched(s) for s in range(2001)]
    assert max(lrs) == lrs[100]
    assert all(a < b for a, b in zip(lrs[:100], lrs[1:101]))
    assert all(a >= b for a, b in zip(lrs[100:], lrs[101:]))
    for bad in [dict(max_lr=1e-4, min_lr=1e-3, warmup_steps=1, total_steps=10),
                dict(max_lr=1e-3, min_lr=0, warmup_steps=10, total_steps=10),
                dict(max_lr=1e-3, min_lr=0, warmup_steps=-1, total_steps=10)]:
        with pytest.raises(ValueError):
            CosineWarmup(**bad)
    assert "warmup_steps=100" in repr(sched)


def test_step_decay_matches_torch_steplr():
    torch = pytest.importorskip("torch")
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=7, gamma=0.3)
    ours = StepDecay(lr=0.5, step_size=7, gamma=0.3)
    for step in range(40):
        assert ours(step) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12), step
        opt.step()
        sched.step()
    with pytest.raises(ValueError):
        StepDecay(0.1, 0)


def test_set_lr():
    opt = SGD([Tensor([1.0])], lr=0.1)
    set_lr(opt, np.float32(0.25))
    assert opt.lr == 0.25 and type(opt.lr) is float


# ---- checkpoints ------------------------------------------------------------------------
def trained_pair(seed=0, steps=3):
    model = mlp(seed)
    opt = AdamW(model.parameters(), lr=0.01)
    train_loader, _ = loaders()
    train(model, cross_entropy, opt, train_loader, steps=steps, **quiet())
    return model, opt


def test_checkpoint_round_trip_is_bit_identical(tmp_path):
    model, opt = trained_pair()
    path = tmp_path / "run.npz"
    extra = {"config": {"width": 32, "tags": ["a", "b"]}, "best": 0.25, "ok": True, "none": None}
    generator_state = default_generator().bit_generator.state
    save_checkpoint(path, model, opt, step=3, extra=extra)
    assert os.listdir(tmp_path) == ["run.npz"], "no temporary files may remain"

    default_generator().random(1000)  # move the generator on
    other = mlp(seed=5)
    other_opt = AdamW(other.parameters(), lr=0.5)
    step, got_extra = load_checkpoint(path, other, other_opt)
    assert step == 3 and got_extra == extra
    for (name, a), (name2, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert name == name2 and a.dtype == b.dtype and np.array_equal(a, b), name
    saved, loaded = opt.state_dict(), other_opt.state_dict()
    assert saved.keys() == loaded.keys()
    for key in saved:
        assert np.array_equal(np.asarray(saved[key]), np.asarray(loaded[key])), key
        if isinstance(saved[key], np.ndarray):
            assert saved[key].dtype == loaded[key].dtype, key
    assert default_generator().bit_generator.state == generator_state


def test_checkpoint_holds_no_pickle(tmp_path):
    model, opt = trained_pair()
    path = tmp_path / "run.npz"
    save_checkpoint(path, model, opt, step=3, extra={"x": 1})
    with zipfile.ZipFile(path) as archive:
        assert all(n.endswith(".npy") for n in archive.namelist())
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}  # reading every entry needs no pickle
    assert all(a.dtype.kind in "biufU" for a in arrays.values())
    assert {k for k in arrays if k.startswith("model/")} == {
        "model/" + k for k in model.state_dict()}
    assert {k for k in arrays if k.startswith("optim/")} == {
        "optim/" + k for k in opt.state_dict()}
    meta = json.loads(str(arrays["meta"]))
    assert meta["format"] == "tinytorch.checkpoint" and meta["version"] == 1
    assert meta["step"] == 3 and meta["optimizer"] == "AdamW" and meta["extra"] == {"x": 1}
    assert meta["generator"]["bit_generator"] == type(default_generator().bit_generator).__name__


def test_weights_only_checkpoint(tmp_path):
    model, _ = trained_pair()
    path = tmp_path / "w.npz"
    save_checkpoint(path, model)
    other = mlp(seed=9)
    assert load_checkpoint(path, other) == (0, None)
    assert all(np.array_equal(a, b) for a, b in zip(model.state_dict().values(),
                                                     other.state_dict().values()))
    with pytest.raises(CheckpointError, match="no optimizer state"):
        load_checkpoint(path, other, Adam(other.parameters()))


def test_metadata_reads_without_a_model(tmp_path):
    model, opt = trained_pair()
    path = tmp_path / "run.npz"
    save_checkpoint(path, model, opt, step=7, extra={"note": "hi"})
    meta = read_checkpoint_meta(path)
    assert (meta["step"], meta["optimizer"], meta["extra"]) == (7, "AdamW", {"note": "hi"})
    np.savez(tmp_path / "plain.npz", a=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a TinyTorch checkpoint"):
        read_checkpoint_meta(tmp_path / "plain.npz")


def test_save_is_atomic(tmp_path, monkeypatch):
    model, opt = trained_pair()
    path = tmp_path / "run.npz"
    save_checkpoint(path, model, opt, step=3)
    good = path.read_bytes()

    def crash(handle, **arrays):
        handle.write(b"PK\x03\x04 half a zip file")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, opt, step=4)
    monkeypatch.undo()
    assert path.read_bytes() == good, "a failed save must leave the old checkpoint intact"
    assert os.listdir(tmp_path) == ["run.npz"], "the temporary file must be removed"
    assert load_checkpoint(path, model, opt)[0] == 3


def test_extra_must_be_json(tmp_path):
    model = mlp(0)
    with pytest.raises(TypeError, match="JSON"):
        save_checkpoint(tmp_path / "x.npz", model, extra={"array": np.zeros(2)})
    assert not os.listdir(tmp_path)


def corruptions(good: bytes):
    yield "empty", b""
    for fraction in (0.05, 0.5, 0.9):
        yield f"truncated to {fraction:.0%}", good[: int(len(good) * fraction)]
    yield "last byte missing", good[:-1]
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    yield "a flipped byte", bytes(flipped)
    yield "text", b"this is not a checkpoint\n"


@pytest.mark.parametrize("case", ["empty", "truncated to 5%", "truncated to 50%",
                                  "truncated to 90%", "last byte missing", "a flipped byte",
                                  "text"])
def test_corrupt_files_raise_checkpoint_error(tmp_path, case):
    model, opt = trained_pair(steps=1)
    path = tmp_path / "run.npz"
    save_checkpoint(path, model, opt, step=1)
    data = dict(corruptions(path.read_bytes()))[case]
    bad = tmp_path / "bad.npz"
    bad.write_bytes(data)
    before = model.state_dict()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(bad, model, opt)
    assert "bad.npz" in str(info.value)
    assert all(np.array_equal(before[k], v) for k, v in model.state_dict().items())


def test_other_files_raise_checkpoint_error(tmp_path):
    model = mlp(0)
    with pytest.raises(CheckpointError, match="no checkpoint file"):
        load_checkpoint(tmp_path / "missing.npz", model)
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(CheckpointError, match="one NumPy array"):
        load_checkpoint(tmp_path / "one.npy", model)
    np.savez(tmp_path / "plain.npz", a=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a TinyTorch checkpoint"):
        load_checkpoint(tmp_path / "plain.npz", model)
    np.savez(tmp_path / "pickled.npz", a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(tmp_path / "pickled.npz", model)
    meta = {"format": "tinytorch.checkpoint", "version": 99}
    np.savez(tmp_path / "future.npz", meta=np.array(json.dumps(meta)))
    with pytest.raises(CheckpointError, match="version 99"):
        load_checkpoint(tmp_path / "future.npz", model)


def test_mismatched_model_lists_keys_and_changes_nothing(tmp_path):
    model, opt = trained_pair()
    path = tmp_path / "run.npz"
    save_checkpoint(path, model, opt, step=3)
    manual_seed(1)
    other = Sequential(Linear(2, 32), ReLU(), Linear(32, 32), ReLU(), Linear(32, 2))  # no dropout
    before = other.state_dict()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, other)
    message = str(info.value)
    assert "run.npz" in message
    assert "missing keys" in message and "'2.weight'" in message  # listing from load_state_dict
    assert "unexpected keys" in message and "'5.weight'" in message
    assert all(np.array_equal(before[k], v) for k, v in other.state_dict().items())


def test_mismatched_optimizer_restores_the_model(tmp_path):
    model, opt = trained_pair()
    path = tmp_path / "run.npz"
    save_checkpoint(path, model, opt, step=3)
    other = mlp(seed=4)
    before = other.state_dict()
    sgd = SGD(other.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(CheckpointError, match="AdamW") as info:
        load_checkpoint(path, other, sgd)
    assert "exp_avg" in str(info.value)
    assert all(np.array_equal(before[k], v) for k, v in other.state_dict().items()), (
        "all or nothing: the weights must be put back when the optimizer state does not fit"
    )
    assert sgd.steps == 0


# ---- evaluation -------------------------------------------------------------------------
def test_accuracy():
    logits = np.array([[1.0, 2.0], [3.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    labels = Tensor(np.array([1, 0, 0]), dtype=np.int64)
    assert accuracy(Tensor(logits), labels) == pytest.approx(2 / 3)
    assert accuracy(logits, np.eye(2)[[1, 0, 1]]) == 1.0
    with pytest.raises(ValueError, match="shape"):
        accuracy(logits, np.array([0, 1]))


def test_evaluate_restores_mode_even_on_error():
    model = mlp(0)
    _, val_loader = loaders()

    def broken(outputs, targets):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        evaluate(model, broken, val_loader)
    assert model.training
    results = evaluate(model, cross_entropy, val_loader, metric=accuracy)
    assert set(results) == {"loss", "accuracy"} and model.training
    # evaluation is deterministic (dropout off) and records no graph
    again = evaluate(model, cross_entropy, val_loader, metric=accuracy)
    assert again == results
    seen = []
    evaluate(model, lambda o, t: seen.append(o.requires_grad) or cross_entropy(o, t), val_loader)
    assert seen and not any(seen)


def test_evaluate_weights_by_samples():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    loader = DataLoader(TensorDataset(Tensor(x), Tensor(x)), batch_size=4)  # 4, 4, 2
    model = Sequential(Linear(1, 1))
    model[0].weight.data[...] = 0
    model[0].bias.data[...] = 0
    results = evaluate(model, mse_loss, loader)
    assert results["loss"] == pytest.approx(float(np.mean(x ** 2)), rel=1e-6)


# ---- the loop ---------------------------------------------------------------------------
def test_batches_from_real_loader_positions():
    train_loader, _ = loaders(batch_size=50)  # 180 samples: 4 batches, the last of 30
    assert len(train_loader) == 4
    straight = [b[0].data.copy() for _, b in islice(batches_from(train_loader, 0), 11)]
    later = [b[0].data.copy() for _, b in islice(batches_from(train_loader, 6), 5)]
    for a, b in zip(straight[6:], later):
        assert np.array_equal(a, b)
    assert not np.array_equal(straight[0], straight[4][:30]), "epochs are shuffled differently"
    steps = [s for s, _ in islice(batches_from(train_loader, 9), 3)]
    assert steps == [9, 10, 11]
    empty = DataLoader(TensorDataset(np.zeros((3, 1))), batch_size=4, drop_last=True)
    with pytest.raises(ValueError, match="no batches"):
        next(batches_from(empty, 0))


def test_small_model_learns():
    train_loader, val_loader = loaders()
    model = mlp(0, dropout=0.0)
    optimizer = AdamW(model.parameters(), lr=0.01, weight_decay=0.0)
    history = train(model, cross_entropy, optimizer, train_loader, steps=200,
                    schedule=CosineWarmup(0.02, 0.002, 20, 200), clip_norm=5.0,
                    eval_loader=val_loader, eval_every=100, metric=accuracy, **quiet())
    assert isinstance(history, History) and history.step == list(range(200))
    assert np.mean(history.loss[-20:]) < 0.15 * np.mean(history.loss[:5])
    assert [e["step"] for e in history.eval] == [100, 200]
    assert history.eval[-1]["accuracy"] >= 0.95
    assert history.eval[-1]["loss"] < 0.2
    assert all(n is not None and n >= 0 for n in history.grad_norm)
    assert "loss" in repr(history) and "samples/s" in repr(history)


def test_linear_regression_learns_with_sgd_and_epochs():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (64, 1)).astype(np.float32)
    y = (3 * x - 1 + 0.01 * rng.standard_normal((64, 1))).astype(np.float32)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, seed=0)
    manual_seed(0)
    model = Sequential(Linear(1, 1))
    history = train(model, mse_loss, SGD(model.parameters(), lr=0.3, momentum=0.5), loader,
                    epochs=25, **quiet())
    assert len(history.loss) == 25 * 4
    assert history.loss[-1] < 1e-3 < history.loss[0]
    assert model[0].weight.data[0, 0] == pytest.approx(3, abs=0.05)
    assert model[0].bias.data[0] == pytest.approx(-1, abs=0.05)


def test_steps_xor_epochs():
    train_loader, _ = loaders()
    model = mlp(0)
    opt = SGD(model.parameters(), lr=0.1)
    for kwargs in ({}, {"steps": 3, "epochs": 1}):
        with pytest.raises(ValueError, match="exactly one"):
            train(model, cross_entropy, opt, train_loader, **kwargs, **quiet())


def nan_loader(bad_index=43, batch_size=8):
    x, y = moons(n=96)
    x[bad_index, 0] = np.nan
    return DataLoader(TensorDataset(x, Tensor(y, dtype=np.int64)), batch_size=batch_size)


def test_nan_raises_training_error_naming_the_step(tmp_path):
    model = mlp(0)
    opt = Adam(model.parameters(), lr=0.01)
    path = tmp_path / "run.npz"
    with pytest.raises(TrainingError, match=r"step 5\b") as info:  # sample 43 is in batch 5
        train(model, cross_entropy, opt, nan_loader(), steps=20, checkpoint=path,
              checkpoint_every=2, **quiet())
    assert "nan" in str(info.value) and "lr=" in str(info.value)
    assert all(np.isfinite(p.data).all() for p in model.parameters()), (
        "the weights must be those of the last good step"
    )
    assert load_checkpoint(path, mlp(1), Adam(mlp(1).parameters()))[0] == 4, (
        "the last checkpoint is the one saved before the failure"
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_inf_loss_and_nan_gradients_raise():
    train_loader, _ = loaders()
    model = mlp(0)

    def infinite(outputs, targets):
        return cross_entropy(outputs, targets) * float("inf")

    with pytest.raises(TrainingError, match="step 0: the loss is inf"):
        train(model, infinite, SGD(model.parameters(), lr=0.1), train_loader, steps=3, **quiet())

    def kinked(outputs, targets):  # finite value, but d sqrt(u)/du at u = 0 is inf -> nan
        return cross_entropy(outputs, targets) + (outputs * 0.0).sum() ** 0.5

    with pytest.raises(TrainingError, match="step 0: the gradient norm is nan"):
        train(model, kinked, SGD(model.parameters(), lr=0.1), train_loader, steps=3, **quiet())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_huge_learning_rate_diverges_with_training_error():
    train_loader, _ = loaders()
    model = mlp(0, dropout=0.0)
    with pytest.raises(TrainingError, match=r"step \d+"):
        train(model, cross_entropy, SGD(model.parameters(), lr=1e8), train_loader, steps=100,
              **quiet())


# ---- resuming ---------------------------------------------------------------------------
def run_for(steps, seed=0, **kwargs):
    model = mlp(seed)
    opt = AdamW(model.parameters(), lr=0.01)
    train_loader, val_loader = loaders(batch_size=40)  # 5 batches per epoch, the last of 20
    return train(model, cross_entropy, opt, train_loader, steps=steps,
                 schedule=CosineWarmup(0.02, 0.002, 8, 50), clip_norm=1.0,
                 eval_loader=val_loader, eval_every=10, metric=accuracy, **quiet(**kwargs))


def test_resume_gives_identical_losses(tmp_path):
    straight = run_for(50)
    path = tmp_path / "run.npz"
    first = run_for(23, checkpoint=path)  # stops mid-epoch (23 = 4 epochs + 3 batches)
    second = run_for(50, seed=77, resume_from=path)  # other initial weights
    assert second.step == list(range(23, 50))
    assert first.loss + second.loss == straight.loss, "resumed losses must be bit-identical"
    assert first.lr + second.lr == straight.lr
    assert first.grad_norm + second.grad_norm == straight.grad_norm
    assert second.eval[-1] == straight.eval[-1]


def test_resume_after_a_crash_from_a_periodic_checkpoint(tmp_path):
    straight = run_for(50)
    path = tmp_path / "run.npz"

    def crash_at_33(record):
        if record.get("step") == 33 and "loss" in record:
            raise KeyboardInterrupt("the machine went away")

    with pytest.raises(KeyboardInterrupt):
        run_for(50, checkpoint=path, checkpoint_every=15, log=crash_at_33)
    resumed = run_for(50, seed=5, resume_from=path)  # the checkpoint of step 30
    assert resumed.step[0] == 30
    assert resumed.loss == straight.loss[30:]


def test_resume_of_a_finished_run_does_nothing(tmp_path):
    path = tmp_path / "run.npz"
    run_for(12, checkpoint=path)
    again = run_for(12, seed=3, resume_from=path)
    assert again.loss == [] and repr(again) == "History(no steps)"


# ---- progress and logging ---------------------------------------------------------------
def test_progress_bar_renders_on_a_terminal_console():
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    train_loader, _ = loaders()
    model = mlp(0)
    train(model, cross_entropy, SGD(model.parameters(), lr=0.05), train_loader, steps=12,
          progress=console)
    text = out.getvalue()
    assert "12/12" in text and "samples/s" in text and "loss" in text


def test_progress_on_a_non_terminal_prints_plain_lines():
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=120)
    train_loader, val_loader = loaders()
    model = mlp(0)
    train(model, cross_entropy, SGD(model.parameters(), lr=0.05), train_loader, steps=40,
          eval_loader=val_loader, progress=console)
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue(), "no escape codes when the output is not a terminal"
    assert sum(line.startswith("step ") for line in lines) == 10
    assert lines[-2].startswith("step 40/40") and lines[-1].startswith("eval after step 40")


def test_default_progress_when_stdout_is_not_a_terminal(capsys):
    train_loader, _ = loaders()
    model = mlp(0)
    train(model, cross_entropy, SGD(model.parameters(), lr=0.05), train_loader, steps=5)
    assert "step 5/5" in capsys.readouterr().out
    train(model, cross_entropy, SGD(model.parameters(), lr=0.05), train_loader, steps=5,
          progress=False)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_log_receives_every_step_and_evaluation():
    records = []
    train_loader, val_loader = loaders()
    model = mlp(0)
    train(model, cross_entropy, SGD(model.parameters(), lr=0.05), train_loader, steps=6,
          eval_loader=val_loader, eval_every=3, metric=accuracy, log=records.append,
          **quiet())
    steps = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_loss" in r]
    assert [r["step"] for r in steps] == list(range(6))
    assert set(steps[0]) == {"step", "loss", "lr", "grad_norm", "samples_per_s"}
    assert len(evals) == 2 and "eval_accuracy" in evals[0]


def test_custom_module_and_loss_work():
    class Affine(Module):
        def __init__(self):
            super().__init__()
            self.a = Parameter(np.zeros(1, dtype=np.float32))

        def forward(self, x):
            return x * self.a

    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(32, 1)
    loader = DataLoader(TensorDataset(x, 2 * x), batch_size=8)
    model = Affine()
    history = train(model, mse_loss, Adam(model.parameters(), lr=0.1), loader, steps=100,
                    **quiet())
    assert model.a.data[0] == pytest.approx(2.0, abs=0.05)
    assert history.loss[-1] < 0.01
