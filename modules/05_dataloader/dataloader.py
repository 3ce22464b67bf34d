# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 05: DataLoader
#
# ## Overview
#
# Training never shows a model the whole data set at once. It shows it **mini-batches**: 32
# or 256 examples stacked into one tensor, in a new random order every epoch. Batches make
# each step cheap enough to take thousands of them, and they keep the matrix multiplies
# large enough to run fast (you measured that in module 03). The random order keeps the
# gradient of each step an unbiased estimate of the gradient over all the data.
#
# In this module you build the three pieces PyTorch uses for this: a `Dataset` (what one
# example is), a `collate` function (how examples become a batch), and a `DataLoader` (which
# examples go in which batch, in what order). You also make the order **reproducible and
# resumable**: a training run stopped at epoch 5 and restarted must see exactly the batches
# it would have seen, or a resumed run is not the same experiment.
#
# **In numbers.** Over $N$ examples with batch size $B$ a loader yields $\lceil N / B \rceil$
# batches per epoch ($\lfloor N / B \rfloor$ with `drop_last`). Its whole state is a seed and
# an epoch number: one permutation of $N$ indices per epoch, 8 bytes per example whatever the
# examples are.
#
# ## Learning objectives
#
# - Separate *what an example is* (`Dataset`) from *how examples are batched*
#   (`DataLoader`), and write a dataset of your own with two methods.
# - Stack examples into batch tensors, keeping float data float32 and integer labels
#   integer.
# - Write a Python iterator that yields batches, with `len()` that agrees with it.
# - Derive each epoch's shuffle from `(seed, epoch)` alone, so any epoch can be replayed.
# - Measure the cost of a per-example Python loop against one vectorized gather.
#
# ## What you build
#
# - `Dataset`, the base class (given), and `TensorDataset(*tensors)`.
# - `default_collate(items)`.
# - `DataLoader(dataset, batch_size=1, shuffle=False, drop_last=False, seed=None,
#   collate_fn=None)` with `len()`, iteration, `order(epoch)` and `set_epoch(epoch)`.
#
# ## What you are not building yet
#
# - **Parallel loading.** PyTorch's loader can prepare batches in worker processes while the
#   model trains. The data sets of this course fit in memory and batch in microseconds, so
#   one process is enough (measured in the systems analysis).
# - **Samplers.** PyTorch lets you plug in the index order (weighted, distributed). Here the
#   order is either sequential or a seeded permutation.
# - **Data augmentation** (random crops, flips): a `Dataset` of your own can do it in
#   `__getitem__`.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp data.loader
#| export
import numpy as np

from tinytorch.core.tensor import Tensor, default_generator

# %% [markdown]
# The lesson itself (tests and measurements, not the package) also uses:

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import time

from tinytorch.core.tensor import expect_error, manual_seed  # expect_error: module 01's helper


def check_fields(what, got, want, fix):
    """Assert that a batch (or example) `got`, a tuple of Tensors, holds the `want` fields: a
    tuple of (values, dtype), compared value for value with the dtype exact."""
    assert isinstance(got, tuple) and len(got) == len(want), (
        f"{what} should be a tuple of {len(want)} Tensors, got {type(got).__name__}: {fix}"
    )
    for k, (field, (values, dtype)) in enumerate(zip(got, want)):
        assert isinstance(field, Tensor), f"{what}: field {k} is a {type(field).__name__}: {fix}"
        assert field.dtype == dtype, f"{what}: field {k} is {field.dtype}, expected {dtype}: {fix}"
        assert np.array_equal(field.data, values), (
            f"{what}: field {k} is {field.data.tolist()}, expected {np.asarray(values).tolist()}: "
            f"{fix}"
        )

# %% [markdown]
# ## Part 1: datasets
#
# A data set, to the loader, is anything with two methods:
#
# - `len(dataset)`: how many examples there are;
# - `dataset[i]`: example number `i`, for `0 <= i < len(dataset)`, usually a tuple such as
#   `(image, label)`.
#
# That is the whole contract (PyTorch calls it a "map-style" dataset). Because it is so
# small, a dataset can do anything inside `__getitem__`: read a file, decode an image,
# crop it at random. The base class `Dataset` below only documents the contract and fails
# with a helpful message when a subclass forgets a method.
#
# The most common dataset is data already in memory: an array of inputs and an array of
# labels, one row per example. `TensorDataset(x, y)` wraps such arrays (or `Tensor`s):
#
# - it checks that every array has the **same first dimension**. A mismatch is the most
#   common data bug there is (labels from one split, images from another, or a transposed
#   array), and if it is not caught here it surfaces much later as a silent mis-pairing of
#   inputs and labels. The error names every length, so the culprit is obvious;
# - it stores plain NumPy arrays. A `Tensor` is unwrapped with its dtype as is (whoever made
#   it chose that dtype). A raw NumPy float array is converted to float32 **once, here**,
#   instead of on every batch; integer arrays (labels) keep their integer dtype, because
#   module 04's cross-entropy uses them as indices;
# - `dataset[i]` returns a tuple with one `Tensor` per array: `(x[i], y[i])`, each keeping its
#   array's dtype (`Tensor(a[i], dtype=a.dtype)`; without `dtype=`, `Tensor` would turn the
#   integer label into a float).
#
# It also offers `get_batch(indices)`: the same tuple for a whole array of indices at once,
# `(x[indices], y[indices])`. The code is the same expression as `__getitem__`, because
# NumPy indexing takes an integer or an array of integers alike. Part 3 shows why the loader
# prefers it. (One consequence: a subclass that changes `__getitem__`, say to augment the
# examples, must change `get_batch` too, or set `get_batch = None` to send the loader down the
# per-example path.)

# %% nbgrader={"grade": false, "grade_id": "dataset-base", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
class Dataset:
    """A map-style data set: len(dataset) examples, dataset[i] returns example i.

    >>> class Squares(Dataset):
    ...     def __len__(self):
    ...         return 4
    ...     def __getitem__(self, i):
    ...         return Tensor([float(i)]), Tensor(float(i * i))
    >>> data = Squares()
    >>> len(data), data[3]
    (4, (Tensor([3.]), Tensor(9.)))
    """

    def __getitem__(self, index):
        raise NotImplementedError(
            f"{type(self).__name__} must define __getitem__(self, index), returning example "
            "number index, e.g. a tuple (x, y)."
        )

    def __len__(self):
        raise NotImplementedError(
            f"{type(self).__name__} must define __len__(self), returning the number of examples."
        )


# %% nbgrader={"grade": false, "grade_id": "tensor-dataset", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class TensorDataset(Dataset):
    """Examples are the rows of the given arrays: dataset[i] = (a[i], b[i], ...).

    >>> data = TensorDataset(np.arange(6.0).reshape(3, 2), np.array([0, 1, 1]))
    >>> len(data), data[1]
    (3, (Tensor([2., 3.]), Tensor(1, dtype=int64)))
    >>> data.get_batch(np.array([2, 0]))
    (Tensor([[4., 5.],
            [0., 1.]]), Tensor([1, 0], dtype=int64))
    """

    def __init__(self, *tensors):
        ### BEGIN SOLUTION
        if not tensors:
            raise ValueError("TensorDataset needs at least one array, e.g. TensorDataset(x, y)")
        arrays = []
        for t in tensors:
            if isinstance(t, Tensor):
                array = t.data
            else:
                array = np.asarray(t)
                if np.issubdtype(array.dtype, np.floating) and array.dtype != np.float32:
                    array = array.astype(np.float32)
            if array.ndim == 0:
                raise ValueError(
                    "TensorDataset got a 0-d array: each array needs a first axis with one row "
                    "per example"
                )
            arrays.append(array)
        lengths = [len(a) for a in arrays]
        if len(set(lengths)) > 1:
            shapes = ", ".join(f"array {i}: shape {a.shape}" for i, a in enumerate(arrays))
            raise ValueError(
                "TensorDataset: every array needs the same first dimension (one row per "
                f"example), got lengths {lengths} ({shapes}). Are inputs and labels from the "
                "same split, and is any array transposed?"
            )
        ### END SOLUTION
        self.arrays = tuple(arrays)

    def __len__(self):
        return len(self.arrays[0])

    def __getitem__(self, index):
        ### BEGIN SOLUTION
        return tuple(Tensor(a[index], dtype=a.dtype) for a in self.arrays)
        ### END SOLUTION

    def get_batch(self, indices):
        """All the examples at `indices` (an integer array), one gather per array."""
        ### BEGIN SOLUTION
        return tuple(Tensor(a[indices], dtype=a.dtype) for a in self.arrays)
        ### END SOLUTION

    @property
    def tensors(self):
        """The stored arrays as Tensors (no copies)."""
        return tuple(Tensor(a, dtype=a.dtype) for a in self.arrays)


# %% nbgrader={"grade": true, "grade_id": "test_unit_tensor_dataset", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_tensor_dataset():
    """TensorDataset pairs rows, keeps label dtypes, and names every length on a mismatch."""
    x = np.arange(20, dtype=np.float64).reshape(10, 2)  # float64 on purpose
    y = np.arange(10, dtype=np.int64) % 3
    ds = TensorDataset(x, y)
    assert len(ds) == 10, f"len(TensorDataset(x, y)) is {len(ds)}, expected 10 (rows of x)"
    f32, i64 = np.float32, np.int64
    label = ("integer labels keep their dtype: wrap with Tensor(a[i], dtype=a.dtype), "
             "otherwise Tensor turns labels into float32")
    cases = [  # (what, got, expected fields, fix)
        ("ds[3]", ds[3], [([6.0, 7.0], f32), (0, i64)], "index every array with the same i; "
         "raw float64 arrays become float32 once, in __init__; " + label),
        ("ds.get_batch([4, 0, 4])", ds.get_batch(np.array([4, 0, 4])),
         [(x[[4, 0, 4]], f32), (y[[4, 0, 4]], i64)], "index every array with the whole index "
         "array, keeping dtypes"),
        ("ds[0] of a float64 Tensor", TensorDataset(Tensor(x, dtype=np.float64), y)[0],
         [(x[0], np.float64), (y[0], i64)], "a Tensor's dtype was chosen by its maker: keep it "
         "(unwrap with .data, no conversion)"),
        ("ds[2] with uint8 labels",
         TensorDataset(np.zeros((3, 2)), np.array([1, 2, 3], dtype=np.uint8))[2],
         [([0.0, 0.0], f32), (3, np.uint8)], label),
    ]
    for what, got, want, fix in cases:
        check_fields(what, got, want, fix)
    expect_error("TensorDataset of 5, 5 and 4 rows",
                 lambda: TensorDataset(np.zeros((5, 2)), np.zeros(5), np.zeros(4)), ValueError,
                 ["[5, 5, 4]"], "list every array's length")
    expect_error("TensorDataset()", TensorDataset, ValueError, fix="it needs one array at least")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    images = np.arange(60, dtype=np.float64).reshape(5, 3, 4)
    codes = np.array([7, -2, 0, 3, 9], dtype=np.int32)
    weights = np.linspace(0, 1, 5).astype(np.float16)
    three = (images, codes, weights)
    hidden_cases(lambda make, want: check_fields("a hidden case", make(), want, ""), {
        "three arrays, one example": (lambda: TensorDataset(*three)[4], [
            (images[4], np.float32), (9, np.int32), (weights[4], np.float32)]),
        "three arrays, a batch with repeats": (
            lambda: TensorDataset(*three).get_batch(np.array([3, 3, 0, 1])),
            [(images[[3, 3, 0, 1]], np.float32), (codes[[3, 3, 0, 1]], np.int32),
             (weights[[3, 3, 0, 1]], np.float32)]),
        "a single array": (lambda: TensorDataset(images)[-1], [(images[-1], np.float32)]),
    })
    hidden_cases(expect_error, {
        "two arrays of three and four rows": (
            "TensorDataset", lambda: TensorDataset(np.zeros(3), np.zeros((4, 2))), ValueError,
            ["[3, 4]"], ""),
    })
    ### END HIDDEN TESTS


test_unit_tensor_dataset()


# %% [markdown]
# ## Part 2: collating examples into a batch
#
# A generic dataset hands the loader a list of examples, say eight `(x, y)` tuples. The
# model wants two tensors: all the `x`s stacked into shape `(8, ...)` and all the `y`s into
# `(8,)`. That transposition, from a list of tuples to a tuple of stacked arrays, is
# `default_collate`:
#
# ```
# [(x0, y0), (x1, y1), (x2, y2)]   ->   (stack([x0, x1, x2]), stack([y0, y1, y2]))
# ```
#
# Rules:
#
# - tuples and lists of fields become a tuple of batches, one per field; a dict becomes a
#   dict with the same keys; a single value (a dataset of bare inputs) becomes one batch;
# - a field of `Tensor`s is stacked keeping their dtype;
# - a field of raw numbers or NumPy arrays is stacked, then float data becomes float32
#   (Python's `3.5` and NumPy's defaults are float64), while integers and booleans keep
#   their dtype;
# - fields whose shapes differ cannot be stacked: raise a `ValueError` that names the field
#   and two of the shapes, not NumPy's "all input arrays must have the same shape".
#
# Stacking copies every example into a new array, one Python step per example. Part 3
# avoids that when it can.

# %% nbgrader={"grade": false, "grade_id": "collate", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _stack_field(values, field):
    """Stack one field of a batch (Tensors, arrays or numbers) into a Tensor."""
    ### BEGIN SOLUTION
    arrays = [v.data if isinstance(v, Tensor) else np.asarray(v) for v in values]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        first, other = arrays[0].shape, next(a.shape for a in arrays if a.shape != arrays[0].shape)
        raise ValueError(
            f"cannot stack field {field} into a batch: its examples have different shapes, "
            f"e.g. {first} and {other}. Pad them to one shape in the dataset, or pass a "
            "collate_fn that does."
        )
    batch = np.stack(arrays)
    all_tensors = all(isinstance(v, Tensor) for v in values)
    if not all_tensors and np.issubdtype(batch.dtype, np.floating) and batch.dtype != np.float32:
        batch = batch.astype(np.float32)
    return Tensor(batch, dtype=batch.dtype)
    ### END SOLUTION


def default_collate(items):
    """A list of examples -> a batch: a tuple (or dict) of stacked Tensors, one per field.

    >>> x, y = default_collate([(Tensor([1.0, 2.0]), 0), (Tensor([3.0, 4.0]), 1)])
    >>> x
    Tensor([[1., 2.],
            [3., 4.]])
    >>> y
    Tensor([0, 1], dtype=int64)
    >>> default_collate([{"t": 0.5}, {"t": 1.5}])
    {'t': Tensor([0.5, 1.5])}
    """
    if len(items) == 0:
        raise ValueError("default_collate got an empty list: a batch needs at least one example")
    ### BEGIN SOLUTION
    first = items[0]
    if isinstance(first, (tuple, list)):
        width = len(first)
        for item in items:
            if len(item) != width:
                raise ValueError(
                    f"examples of one batch have different numbers of fields: {width} and "
                    f"{len(item)}. A dataset must return the same structure for every index."
                )
        return tuple(_stack_field([item[k] for item in items], k) for k in range(width))
    if isinstance(first, dict):
        return {key: _stack_field([item[key] for item in items], repr(key)) for key in first}
    return _stack_field(items, 0)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_default_collate", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_default_collate():
    """Tuples of fields become tuples of stacked Tensors; dtypes follow the rules."""
    items = [(np.array([i, i + 0.5]), i) for i in range(4)]  # float64 rows, int labels
    f64 = [(Tensor([1.0], dtype=np.float64),), (Tensor([2.0], dtype=np.float64),)]
    stack = ("stack field k of every example, [item[k] for item in items], in order; raw "
             "float data becomes float32, integers stay integers: Tensor(batch, "
             "dtype=batch.dtype) for them, not Tensor(batch)")
    cases = [  # (what, examples, expected fields, fix)
        ("4 (float64 row, int label) examples", items,
         [([[i, i + 0.5] for i in range(4)], np.float32), ([0, 1, 2, 3], np.int64)], stack),
        ("2 examples of one float64 Tensor field", f64, [([[1.0], [2.0]], np.float64)],
         "a field of Tensors keeps their dtype"),
    ]
    for what, examples, want, fix in cases:
        check_fields(f"default_collate of {what}", default_collate(examples), want, fix)
    single = default_collate([Tensor([1.0, 2.0]), Tensor([3.0, 4.0])])
    assert isinstance(single, Tensor) and single.shape == (2, 2), (
        "examples that are single Tensors should collate to one stacked Tensor"
    )
    as_dict = default_collate([{"x": np.ones(3), "y": 1}, {"x": np.zeros(3), "y": 0}])
    assert set(as_dict) == {"x", "y"} and as_dict["x"].shape == (2, 3), (
        "dict examples should collate to a dict of stacked Tensors"
    )
    expect_error("collating examples of shapes (3,) and (4,)",
                 lambda: default_collate([(np.ones(3), 0), (np.ones(4), 1)]), ValueError,
                 ["(3,)", "(4,)"], "name two of the different shapes")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rows = [(np.full((2, 2), i, dtype=np.int32), float(i) / 2, np.array([i, -i])) for i in range(3)]
    hidden_cases(lambda examples, want: check_fields("a hidden case", default_collate(examples),
                                                     want, ""), {
        "three fields of other dtypes": (rows, [
            ([np.full((2, 2), i) for i in range(3)], np.int32), ([0.0, 0.5, 1.0], np.float32),
            ([[i, -i] for i in range(3)], np.int64)]),
        "a single example": ([(np.array([1.5, 2.5]), 7)], [([[1.5, 2.5]], np.float32),
                                                            ([7], np.int64)]),
        "float32 Tensor fields": ([(Tensor([[1.0, 2.0]]),), (Tensor([[3.0, 4.0]]),)],
                                  [([[[1.0, 2.0]], [[3.0, 4.0]]], np.float32)]),
    })
    hidden_cases(expect_error, {
        "matrices of two shapes": (
            "default_collate", lambda: default_collate([(np.ones((2, 3)),), (np.ones((3, 2)),)]),
            ValueError, ["(2, 3)", "(3, 2)"], ""),
    })
    ### END HIDDEN TESTS


test_unit_default_collate()


# %% [markdown]
# ## Part 3: the DataLoader
#
# The loader turns a dataset into a sequence of batches:
#
# ```
# n = 10, batch_size = 4:    [0 1 2 3] [4 5 6 7] [8 9]            len(loader) = 3
# drop_last=True:            [0 1 2 3] [4 5 6 7]                  len(loader) = 2
# ```
#
# `len(loader)` is the number of batches: `ceil(n / batch_size)`, or `floor(n / batch_size)`
# with `drop_last=True`. Dropping the short last batch keeps every step the same size,
# which some models need (a batch of one breaks statistics over the batch) and which makes
# timing steady.
#
# ### Iteration
#
# `for batch in loader` calls `iter(loader)`, then `next()` on what it returns until
# `StopIteration`. A generator function does both for you. `__iter__` does the eager work
# (choose this epoch's order, advance the epoch counter: Part 4) and returns a generator,
# `self._batches(order)`, that slices the order into chunks of `batch_size` indices and
# turns each chunk into a batch, one at a time: only one batch is ever in memory.
#
# ### Two ways to build a batch
#
# - **Generic**: `collate([dataset[i] for i in chunk])`. One Python call per example, each
#   creating small tensors, then a stack that copies them all. It works with any dataset.
# - **Vectorized**: if the dataset has a `get_batch(indices)` method and no custom
#   `collate_fn` was given, call it once with the whole index array. For a
#   `TensorDataset` that is one NumPy gather per array, `x[chunk]`, with no Python loop over
#   the examples. The systems analysis measures the difference.
#
# The loader checks its arguments when it is built: `batch_size` must be an integer of at
# least 1 (a batch size of 0 would loop forever or divide by zero far from the mistake).

# %% nbgrader={"grade": false, "grade_id": "dataloader", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class DataLoader:
    """Batches of a dataset, in order or in a per-epoch shuffle fixed by (seed, epoch).

    >>> data = TensorDataset(np.arange(10.0), np.arange(10))
    >>> [x.data.tolist() for x, y in DataLoader(data, batch_size=4)]
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0]]
    >>> loader = DataLoader(data, batch_size=4, shuffle=True, seed=0)
    >>> len(loader), [len(x) for x, y in loader], loader.epoch
    (3, [4, 4, 2], 1)
    >>> loader.order(1).tolist() == loader.order(1).tolist()  # fixed by (seed, epoch)
    True
    >>> sorted(loader.order(1).tolist()) == list(range(10))  # each example once
    True
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=None,
                 collate_fn=None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                                 or seed < 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(
                f"DataLoader needs a dataset with __len__ and __getitem__, got "
                f"{type(dataset).__name__}; wrap arrays with TensorDataset(x, y)"
            )
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.collate_fn = collate_fn
        ### BEGIN SOLUTION
        if seed is None and self.shuffle:
            seed = int(default_generator().integers(2**63 - 1))
        ### END SOLUTION
        self.seed = None if seed is None else int(seed)
        self.epoch = 0  # the epoch the next iter() will use

    def __len__(self):
        ### BEGIN SOLUTION
        n = len(self.dataset)
        if self.drop_last:
            return n // self.batch_size
        return (n + self.batch_size - 1) // self.batch_size
        ### END SOLUTION

    def order(self, epoch):
        """The example indices of `epoch`, a pure function of (seed, epoch)."""
        ### BEGIN SOLUTION
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, int(epoch)]).permutation(n)
        ### END SOLUTION

    def set_epoch(self, epoch):
        """Make the next iteration use `epoch`'s order (to resume a run exactly)."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        self.epoch = int(epoch)

    def __iter__(self):
        ### BEGIN SOLUTION
        order = self.order(self.epoch)
        self.epoch += 1
        return self._batches(order)
        ### END SOLUTION

    def _batches(self, order):
        ### BEGIN SOLUTION
        stop = len(order)
        if self.drop_last:
            stop -= stop % self.batch_size
        fetch = getattr(self.dataset, "get_batch", None) if self.collate_fn is None else None
        collate = self.collate_fn if self.collate_fn is not None else default_collate
        for start in range(0, stop, self.batch_size):
            chunk = order[start:start + self.batch_size]
            if fetch is not None:
                yield fetch(chunk)
            else:
                yield collate([self.dataset[int(i)] for i in chunk])
        ### END SOLUTION

    def __repr__(self):
        return (f"DataLoader({type(self.dataset).__name__} of {len(self.dataset)}, "
                f"batch_size={self.batch_size}, shuffle={self.shuffle}, "
                f"drop_last={self.drop_last}, seed={self.seed}, epoch={self.epoch})")


# %% nbgrader={"grade": true, "grade_id": "test_unit_dataloader_batches", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_dataloader_batches():
    """Batches in order, the right sizes, len() that agrees, drop_last, any dataset."""

    def check_sizes(n, batch_size, drop_last, want, fix):
        """Batch sizes and len() of a loader over n examples."""
        ds = TensorDataset(np.zeros((n, 1), dtype=np.float32), np.arange(n))
        loader = DataLoader(ds, batch_size=batch_size, drop_last=drop_last)
        sizes = [len(b[1]) for b in loader]
        what = f"{n} examples, batch_size={batch_size}, drop_last={drop_last}"
        assert sizes == want, f"{what}: batch sizes {sizes}, expected {want}: {fix}"
        assert len(loader) == len(want), (
            f"{what}: len(loader) is {len(loader)}, expected {len(want)}: {fix}"
        )

    slicing = "slice the order in steps of batch_size"
    cases = [  # (batch_size, drop_last, expected batch sizes, fix)
        (4, False, [4, 4, 2], f"{slicing} and keep the short last batch: len is ceil(10 / 4)"),
        (4, True, [4, 4], "with drop_last=True stop before the short last batch: floor(10 / 4)"),
        (3, True, [3, 3, 3], "10 examples, batch 3, drop_last: 3 batches"),
        (20, False, [10], "a batch_size larger than the data set gives one batch"),
    ]
    for batch_size, drop_last, want, fix in cases:
        check_sizes(10, batch_size, drop_last, want, fix)
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    y = np.arange(10, dtype=np.int64)
    ds = TensorDataset(x, y)
    batches = list(DataLoader(ds, batch_size=4))
    check_fields("the first batch of 4", batches[0], [(x[:4], np.float32), (y[:4], np.int64)],
                 "without shuffle the order is np.arange(n); keep the arrays' dtypes")
    got_order = np.concatenate([b[1].data for b in batches]).tolist()
    assert got_order == y.tolist(), (
        f"without shuffle, the batches visited {got_order}, expected 0, 1, ..., 9 in order: "
        "order(epoch) is np.arange(n) when shuffle=False"
    )

    class Squares(Dataset):  # a dataset of your own: only __len__ and __getitem__
        def __init__(self, n=5):
            self.n = n

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            return float(i), i * i

    def check_custom(n, batch_size):
        got = [(b[0].data.tolist(), b[1].data.tolist())
               for b in DataLoader(Squares(n), batch_size=batch_size)]
        starts = range(0, n, batch_size)
        want = [([float(i) for i in range(s, min(s + batch_size, n))],
                 [i * i for i in range(s, min(s + batch_size, n))]) for s in starts]
        assert got == want, (
            f"a custom dataset gave batches {got}: without get_batch, build each batch with "
            "default_collate([dataset[i] for i in chunk])"
        )

    check_custom(5, 2)
    custom = DataLoader(Squares(), batch_size=2, collate_fn=lambda items: len(items))
    assert list(custom) == [2, 2, 1], (
        "a collate_fn, when given, receives the list of examples and its result is the batch"
    )
    for bad in (0, -1, 2.5):
        expect_error(f"DataLoader(..., batch_size={bad})",
                     lambda: DataLoader(Squares(), batch_size=bad), ValueError, ["batch_size"],
                     "batch_size must be a positive integer")
    expect_error("Dataset()[0]", lambda: Dataset()[0], NotImplementedError, ["__getitem__"],
                 "the base class leaves __getitem__ to subclasses")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_sizes, {
        "a single example": (1, 1, False, [1], ""),
        "one full batch, drop_last": (7, 7, True, [7], ""),
        "a short last batch kept": (13, 5, False, [5, 5, 3], ""),
        "a short last batch dropped": (12, 5, True, [5, 5], ""),
        "fewer examples than a batch, drop_last": (3, 4, True, [], ""),
        "batches of one": (4, 1, False, [1, 1, 1, 1], ""),
    })
    hidden_cases(check_custom, {
        "a custom dataset in batches of three": (7, 3),
        "a custom dataset in one batch": (4, 10),
    })
    ### END HIDDEN TESTS


test_unit_dataloader_batches()


# %% nbgrader={"grade": true, "grade_id": "test_unit_vectorized_batches", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_vectorized_batches():
    """With a TensorDataset, batches come from one gather per array, not per-item calls."""

    def check_gathered(n, batch_size, seed):
        """One shuffled epoch over n examples: no dataset[i] calls, pairs kept, all seen once."""
        x = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
        y = np.arange(n, dtype=np.int64)
        ds = TensorDataset(x, y)
        calls = []
        original = TensorDataset.__getitem__

        def spy(self, index):
            calls.append(index)
            return original(self, index)

        TensorDataset.__getitem__ = spy  # count per-example calls for the length of this check
        try:
            batches = list(DataLoader(ds, batch_size=batch_size, shuffle=True, seed=seed))
        finally:
            TensorDataset.__getitem__ = original
        assert calls == [], (
            f"the loader called dataset[i] {len(calls)} times: when the dataset has get_batch "
            "and no collate_fn was given, fetch each batch with dataset.get_batch(chunk)"
        )
        xs = np.concatenate([b[0].data for b in batches])
        ys = np.concatenate([b[1].data for b in batches])
        assert np.array_equal(xs, x[ys]), (
            f"inputs and labels must stay paired after shuffling: label {ys[0]} came with input "
            f"{xs[0].tolist()}, expected {x[ys[0]].tolist()}; gather every array with the same "
            "chunk"
        )
        assert sorted(ys.tolist()) == list(range(n)), (
            f"one epoch visited {sorted(ys.tolist())}, expected every example 0..{n - 1} "
            "exactly once"
        )

    check_gathered(20, 8, 0)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_gathered, {
        "an odd number of examples": (23, 5, 3),
        "one batch holding everything": (16, 16, 1),
        "batches of one": (6, 1, 2),
    })
    ### END HIDDEN TESTS


test_unit_vectorized_batches()


# %% [markdown]
# ## Part 4: shuffling that can be replayed
#
# With `shuffle=True`, each epoch visits the examples in a new random order. The naive way
# is one random generator owned by the loader, advanced by every shuffle. Then the order of
# epoch 5 depends on everything that happened before it: to replay epoch 5 after a crash you
# must replay epochs 0 to 4, and any other use of that generator in between changes it.
#
# Instead, make the order of an epoch a **pure function of `(seed, epoch)`**:
#
# ```python
# np.random.default_rng([seed, epoch]).permutation(n)
# ```
#
# NumPy turns the pair into an independent, well-mixed random stream, so epochs 5 and 6 are
# unrelated, and epoch 5 is the same today, tomorrow and after a restart. The loader keeps
# an `epoch` counter:
#
# - `iter(loader)` uses `loader.epoch`, then adds one, so a plain `for` loop over epochs
#   gets epochs 0, 1, 2, ... without any extra call;
# - `loader.set_epoch(e)` sets the counter; a training run resumed from a checkpoint taken
#   after epoch 4 calls `set_epoch(5)` and gets exactly the batches the original run saw;
# - the loop `for e in range(E): loader.set_epoch(e); for batch in loader: ...` (PyTorch's
#   habit with distributed samplers) gives the same batches as not calling it at all.
#
# Where does `seed` come from? If given, from the caller. If not, and the loader shuffles,
# it is drawn **once**, when the loader is built, from `default_generator()`: after
# `manual_seed(0)`, the whole program, model initialization and data order alike, is
# reproducible from that one number. A loader that does not shuffle draws nothing, so adding
# an evaluation loader does not change the training run's random numbers.
#
# Save `loader.seed` and `loader.epoch` in a checkpoint (module 08) and the data order can be
# restored exactly.

# %% nbgrader={"grade": true, "grade_id": "test_unit_shuffle_reproducible", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_shuffle_reproducible():
    """Shuffled epochs are permutations, differ from each other, and repeat for a seed."""

    def epoch_labels(loader):
        return np.concatenate([b[1].data for b in loader])

    def check_shuffled(n, batch_size, seed):
        """Two epochs of a shuffled loader over n examples (n large enough to reorder)."""
        ds = TensorDataset(np.zeros((n, 1), dtype=np.float32), np.arange(n))
        loader = DataLoader(ds, batch_size=batch_size, shuffle=True, seed=seed)
        e0, e1 = epoch_labels(loader), epoch_labels(loader)
        assert sorted(e0.tolist()) == list(range(n)), (
            "a shuffled epoch must contain every example exactly once: use a permutation of "
            "range(n), not random draws with replacement"
        )
        assert not np.array_equal(e0, np.arange(n)), "shuffle=True must change the order"
        assert not np.array_equal(e0, e1), (
            "two epochs in a row had the same order: iter(loader) must advance loader.epoch and "
            "the order must depend on the epoch"
        )
        assert loader.epoch == 2, f"after two epochs loader.epoch is {loader.epoch}, expected 2"
        again = DataLoader(ds, batch_size=batch_size, shuffle=True, seed=seed)
        first, second = epoch_labels(again), epoch_labels(again)
        assert np.array_equal(first, e0) and np.array_equal(second, e1), (
            "a new loader with the same seed must give the same epochs in the same order: derive "
            "each epoch's order from (seed, epoch) only, e.g. np.random.default_rng([seed, epoch])"
        )
        other = DataLoader(ds, batch_size=batch_size, shuffle=True, seed=seed + 1)
        assert not np.array_equal(epoch_labels(other), e0), (
            "a different seed must give another order"
        )

    check_shuffled(50, 7, 123)
    ds = TensorDataset(np.zeros((50, 1), dtype=np.float32), np.arange(50))
    manual_seed(5)
    a = DataLoader(ds, batch_size=7, shuffle=True)
    manual_seed(5)
    b = DataLoader(ds, batch_size=7, shuffle=True)
    assert a.seed is not None and a.seed == b.seed, (
        "with seed=None and shuffle=True, draw the seed once from default_generator() in "
        f"__init__ (so manual_seed makes it repeatable); got seeds {a.seed} and {b.seed}"
    )
    manual_seed(5)
    before = default_generator().random()
    manual_seed(5)
    DataLoader(ds, batch_size=7)
    assert default_generator().random() == before, (
        "a loader that does not shuffle must not draw from default_generator()"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_shuffled, {
        "a larger set in one batch": (101, 101, 7),
        "seed zero": (64, 10, 0),
        "batches of one": (30, 1, 2024),
    })
    ### END HIDDEN TESTS


test_unit_shuffle_reproducible()


# %% nbgrader={"grade": true, "grade_id": "test_unit_set_epoch_resume", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_set_epoch_resume():
    """set_epoch(e) replays epoch e exactly; order(e) depends on nothing else."""

    def epoch_labels(loader):
        return [b[1].data.tolist() for b in loader]

    def check_resume(n, batch_size, seed, epochs, resume_at):
        """A run of `epochs` epochs, replayed from `resume_at` by a fresh loader."""
        ds = TensorDataset(np.arange(n, dtype=np.float32).reshape(n, 1), np.arange(n))
        original = DataLoader(ds, batch_size=batch_size, shuffle=True, seed=seed)
        seen = [epoch_labels(original) for _ in range(epochs)]
        resumed = DataLoader(ds, batch_size=batch_size, shuffle=True, seed=seed)
        resumed.set_epoch(resume_at)
        assert epoch_labels(resumed) == seen[resume_at], (
            f"after set_epoch({resume_at}), a fresh loader with the same seed must yield exactly "
            f"the batches of epoch {resume_at} of the original run"
        )
        assert epoch_labels(resumed) == seen[resume_at + 1], (
            f"after replaying epoch {resume_at}, the next iteration must be epoch {resume_at + 1}"
        )
        explicit = DataLoader(ds, batch_size=batch_size, shuffle=True, seed=seed)
        replay = []
        for e in range(epochs):
            explicit.set_epoch(e)
            replay.append(epoch_labels(explicit))
        assert replay == seen, (
            "calling set_epoch(e) before every epoch must give the same batches as not calling it"
        )
        assert np.array_equal(original.order(1), original.order(1)), "order(e) must be repeatable"
        iterated = np.concatenate([np.asarray(b) for b in seen[1]])
        assert np.array_equal(iterated, original.order(1)), (
            f"the second epoch iterated {iterated[:6].tolist()}..., but order(1) is "
            f"{original.order(1)[:6].tolist()}...: iter() must use order(self.epoch) and only "
            "then add one (the first iteration is epoch 0)"
        )
        plain = DataLoader(ds, batch_size=batch_size)
        assert np.array_equal(plain.order(3), np.arange(n)), (
            "without shuffle, every epoch is 0..n-1"
        )

    check_resume(30, 4, 9, 4, 2)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_resume, {
        "a later epoch": (17, 3, 31, 8, 6),
        "resuming at the first epoch": (25, 25, 5, 3, 0),
        "seed zero": (40, 6, 0, 5, 3),
    })
    ### END HIDDEN TESTS


test_unit_set_epoch_resume()


# %% [markdown]
# ## Systems analysis: the cost of a batch, measured on your machine
#
# One epoch over 8,192 examples of 64 float32 features with integer labels, batch 256, both
# ways: the generic path (one `dataset[i]` per example, then `default_collate`) and the
# vectorized path (`get_batch`, one gather per array). Also the size of one batch, and how
# long a `Linear(64, 64)` takes on it, to see whether loading or computing dominates.

# %% nbgrader={"grade": false, "grade_id": "analysis-batching", "locked": false, "schema_version": 3, "solution": false, "task": false}
def batching_report(n=8192, features=64, batch_size=256):
    rng = np.random.default_rng(0)
    ds = TensorDataset(rng.standard_normal((n, features)).astype(np.float32),
                       rng.integers(0, 10, n))
    fast = DataLoader(ds, batch_size=batch_size, shuffle=True, seed=0)
    slow = DataLoader(ds, batch_size=batch_size, shuffle=True, seed=0,
                      collate_fn=default_collate)  # a collate_fn forces the per-example path

    def epoch_seconds(loader):
        start = time.perf_counter()
        for _ in loader:
            pass
        return time.perf_counter() - start

    epoch_seconds(fast)  # warm-up
    fast_s = min(epoch_seconds(fast) for _ in range(5))  # best of 5: see module 03
    slow_s = min(epoch_seconds(slow) for _ in range(3))
    batches = len(fast)
    xb, yb = next(iter(fast))
    print(f"{n:,} examples x {features} features, batch {batch_size}: {batches} batches/epoch")
    for label, seconds in (("per-example path", slow_s), ("vectorized path", fast_s)):
        print(f"  {label:17} {seconds * 1e3:7.1f} ms/epoch, "
              f"{seconds / batches * 1e6:8.1f} us/batch, {seconds / n * 1e6:6.3f} us/example")
    print(f"  vectorized is {slow_s / fast_s:.0f}x faster")
    print(f"  one batch holds {xb.data.nbytes / 1024:.0f} KiB of inputs ({xb.dtype}) and "
          f"{yb.data.nbytes / 1024:.0f} KiB of labels ({yb.dtype})")
    w = np.ones((features, features), dtype=np.float32)
    start = time.perf_counter()
    for _ in range(50):
        xb @ Tensor(w).T
    step = (time.perf_counter() - start) / 50
    print(f"  for scale: one {batch_size}x{features} @ {features}x{features} matmul takes "
          f"{step * 1e6:.1f} us")


batching_report()

# %% [markdown]
# The per-example path spends microseconds of Python on every example (a `__getitem__`
# call, two small `Tensor`s, a stack), which adds up to more than the model's own work on a
# small layer. The vectorized gather does the same copy in one NumPy call per array. For
# data that fits in memory, that is why one process is enough and PyTorch's worker
# processes would only add overhead; for data that must be read and decoded from disk, the
# per-example cost is milliseconds, and overlapping it with training in parallel workers
# is what makes them worth having.
#
# ## What comes next
#
# - **Module 06 (autograd)** computes gradients of a loss on a batch.
# - **Module 08 (training)** loops over your loader for several epochs, and saves
#   `loader.seed` and `loader.epoch` in its checkpoints so that a resumed run replays the
#   same batches.
# - Any dataset that can gather many examples at once can offer its own `get_batch` and get
#   the vectorized path: a data set of text windows for TinyGPT (modules 10 to 13) is one.
