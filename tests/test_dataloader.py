"""Module 05 (dataloader) as exported into the package: datasets, collate, DataLoader."""

import math

import numpy as np
import pytest

from tinytorch.core.tensor import Tensor, default_generator, manual_seed
from tinytorch.data import DataLoader, Dataset, TensorDataset, default_collate


def make_dataset(n=23, features=3):
    x = np.arange(n * features, dtype=np.float32).reshape(n, features)
    y = np.arange(n, dtype=np.int64)
    return TensorDataset(x, y)


def labels_of(loader):
    return [batch[1].data.tolist() for batch in loader]


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.array([i, i + 0.5]), i * i


# ---- datasets and collate ---------------------------------------------------------------


def test_tensor_dataset_dtypes():
    x64 = np.ones((4, 2))  # float64
    ds = TensorDataset(x64, np.arange(4, dtype=np.int32), np.ones(4, dtype=bool))
    assert [a.dtype for a in ds.arrays] == [np.float32, np.int32, np.bool_]
    xi, yi, mi = ds[1]
    assert (xi.dtype, yi.dtype, mi.dtype) == (np.float32, np.int32, np.bool_)
    kept = TensorDataset(Tensor(x64, dtype=np.float64), np.arange(4))
    assert kept[0][0].dtype == np.float64
    x32 = np.ones((4, 2), dtype=np.float32)
    assert TensorDataset(x32).arrays[0] is x32, "no copy of an array that is already float32"
    assert [t.dtype for t in ds.tensors] == [np.float32, np.int32, np.bool_]


def test_tensor_dataset_length_error_names_every_length():
    with pytest.raises(ValueError) as info:
        TensorDataset(np.zeros((10, 2)), np.zeros(10), np.zeros((9, 3)))
    message = str(info.value)
    assert "[10, 10, 9]" in message and "(9, 3)" in message
    with pytest.raises(ValueError):
        TensorDataset()
    with pytest.raises(ValueError):
        TensorDataset(np.float32(3.0))


def test_dataset_base_messages():
    class Empty(Dataset):
        pass

    with pytest.raises(NotImplementedError, match="__getitem__"):
        Empty()[0]
    with pytest.raises(NotImplementedError, match="__len__"):
        len(Empty())


def test_default_collate_rules():
    xs, ys = default_collate([Squares(3)[i] for i in range(3)])
    assert xs.shape == (3, 2) and xs.dtype == np.float32
    assert ys.dtype == np.int64 and ys.data.tolist() == [0, 1, 4]
    (u8,) = default_collate([(np.uint8(i),) for i in range(3)])
    assert u8.dtype == np.uint8
    (f64,) = default_collate([(Tensor([1.0], dtype=np.float64),)] * 2)
    assert f64.dtype == np.float64 and f64.shape == (2, 1)
    d = default_collate([{"a": 1.5, "b": np.arange(2)}, {"a": 2.5, "b": np.arange(2)}])
    assert d["a"].dtype == np.float32 and d["b"].shape == (2, 2)
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)"):
        default_collate([np.ones(2), np.ones(3)])
    with pytest.raises(ValueError):
        default_collate([(1, 2), (1,)])
    with pytest.raises(ValueError):
        default_collate([])


# ---- lengths and order ------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 23])
@pytest.mark.parametrize("batch_size", [1, 3, 8, 50])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_matches_iteration(n, batch_size, drop_last):
    loader = DataLoader(make_dataset(n) if n else TensorDataset(np.zeros((0, 2))),
                        batch_size=batch_size, drop_last=drop_last)
    want = n // batch_size if drop_last else math.ceil(n / batch_size)
    batches = list(loader)
    assert len(loader) == want == len(batches)
    sizes = [len(b[0]) for b in batches]
    assert all(s == batch_size for s in sizes[:-1])
    if drop_last and sizes:
        assert sizes[-1] == batch_size


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (4, False), (4, True), (10, True)])
def test_len_matches_torch(batch_size, drop_last):
    torch = pytest.importorskip("torch")
    x = np.zeros((23, 2), dtype=np.float32)
    ours = DataLoader(TensorDataset(x), batch_size=batch_size, drop_last=drop_last)
    theirs = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(x)),
                                         batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)


def test_sequential_order_and_pairing():
    ds = make_dataset(10)
    batches = list(DataLoader(ds, batch_size=4))
    assert labels_of(batches) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    for xb, yb in batches:
        assert np.array_equal(xb.data, ds.arrays[0][yb.data])
        assert xb.dtype == np.float32 and yb.dtype == np.int64


def test_generic_path_equals_vectorized_path():
    ds = make_dataset(17)
    fast = DataLoader(ds, batch_size=5, shuffle=True, seed=4)
    slow = DataLoader(ds, batch_size=5, shuffle=True, seed=4, collate_fn=default_collate)
    for (xf, yf), (xs, ys) in zip(fast, slow):
        assert np.array_equal(xf.data, xs.data) and np.array_equal(yf.data, ys.data)
        assert (xf.dtype, yf.dtype) == (xs.dtype, ys.dtype)


def test_vectorized_path_skips_getitem(monkeypatch):
    def boom(self, index):
        raise AssertionError("the TensorDataset fast path must not call __getitem__")

    ds = make_dataset(12)
    monkeypatch.setattr(TensorDataset, "__getitem__", boom)
    assert sum(len(b[0]) for b in DataLoader(ds, batch_size=5, shuffle=True, seed=0)) == 12


def test_subclass_can_opt_out_of_get_batch():
    class Augmented(TensorDataset):
        get_batch = None

        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            return x * 2, y

    ds = Augmented(np.ones((4, 2), dtype=np.float32), np.arange(4))
    (xb, yb), = list(DataLoader(ds, batch_size=4))
    assert np.all(xb.data == 2) and yb.dtype == np.int64


def test_custom_dataset_and_collate_fn():
    loader = DataLoader(Squares(5), batch_size=2)
    assert labels_of(loader) == [[0, 1], [4, 9], [16]]
    assert list(DataLoader(Squares(5), batch_size=2, collate_fn=len)) == [2, 2, 1]


# ---- shuffling, seeds and epochs --------------------------------------------------------


def test_order_is_pure_function_of_seed_and_epoch():
    ds = make_dataset(40)
    loader = DataLoader(ds, batch_size=8, shuffle=True, seed=11)
    for epoch in (0, 1, 7):
        want = np.random.default_rng([11, epoch]).permutation(40)
        assert np.array_equal(loader.order(epoch), want)
    list(loader)
    list(loader)  # iterating does not change order(e)
    assert np.array_equal(loader.order(0), np.random.default_rng([11, 0]).permutation(40))


def test_epochs_advance_and_differ():
    loader = DataLoader(make_dataset(40), batch_size=8, shuffle=True, seed=0)
    epochs = [sum(labels_of(loader), []) for _ in range(3)]
    assert loader.epoch == 3
    assert all(sorted(e) == list(range(40)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]


def test_iter_takes_epoch_eagerly():
    loader = DataLoader(make_dataset(20), batch_size=4, shuffle=True, seed=1)
    first, second = iter(loader), iter(loader)
    assert loader.epoch == 2
    assert labels_of(first) != labels_of(second)


def test_set_epoch_resumes_exactly():
    ds = make_dataset(30)
    original = DataLoader(ds, batch_size=4, shuffle=True, seed=5, drop_last=True)
    seen = [labels_of(original) for _ in range(5)]
    resumed = DataLoader(ds, batch_size=4, shuffle=True, seed=5, drop_last=True)
    resumed.set_epoch(3)
    assert labels_of(resumed) == seen[3]
    assert labels_of(resumed) == seen[4]
    explicit = DataLoader(ds, batch_size=4, shuffle=True, seed=5, drop_last=True)
    replay = []
    for e in range(5):
        explicit.set_epoch(e)
        replay.append(labels_of(explicit))
    assert replay == seen
    with pytest.raises(ValueError):
        explicit.set_epoch(-1)


def test_seed_none_draws_once_from_default_generator():
    ds = make_dataset(20)
    manual_seed(42)
    a = DataLoader(ds, batch_size=4, shuffle=True)
    manual_seed(42)
    b = DataLoader(ds, batch_size=4, shuffle=True)
    assert a.seed == b.seed and labels_of(a) == labels_of(b)
    c = DataLoader(ds, batch_size=4, shuffle=True)
    assert c.seed != a.seed
    manual_seed(42)
    expected = default_generator().random()
    manual_seed(42)
    DataLoader(ds, batch_size=4)  # no shuffle: no draw
    DataLoader(ds, batch_size=4, seed=3, shuffle=True)  # explicit seed: no draw
    assert default_generator().random() == expected


def test_no_shuffle_ignores_epoch():
    loader = DataLoader(make_dataset(9), batch_size=4, seed=3)
    assert labels_of(loader) == labels_of(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]


# ---- argument errors --------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -3, 1.5, "4", None, True])
def test_batch_size_validated(bad):
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(make_dataset(4), batch_size=bad)


@pytest.mark.parametrize("bad", [-1, 1.5, "7"])
def test_seed_validated(bad):
    with pytest.raises(ValueError, match="seed"):
        DataLoader(make_dataset(4), shuffle=True, seed=bad)


def test_dataset_validated():
    with pytest.raises(TypeError, match="TensorDataset"):
        DataLoader(np.zeros((4, 2)).tolist().__iter__())
