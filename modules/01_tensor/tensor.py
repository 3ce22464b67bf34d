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
# # Module 01: Tensor
#
# ## Overview
#
# Every deep-learning framework is built on one data structure: the **tensor**, an
# N-dimensional array of numbers with a shape and a dtype, and a set of operations on it.
# In this module you build TinyTorch's `Tensor` on top of NumPy. Everything you write in the
# next nineteen modules (layers, losses, autograd, attention, a whole GPT) is made of the
# operations you write here, so they must be correct, fast and precise about dtypes.
#
# Your `Tensor` also does one thing NumPy does not: when asked to, it **records** which
# operation produced it and from which inputs. You will not use that record in this module.
# In module 06 you will walk it backwards to compute gradients, without changing a line you
# wrote here.
#
# **In numbers.** A GPT-2-sized model (module 13) has 163M parameters: 652 MB in float32, and
# 1.3 GB if one stray float64 creeps in, because every result inherits its inputs' dtype. A
# broadcast such as $(B, T, 1) + (1, 1, C)$ reads two small arrays and writes
# $B \cdot T \cdot C$ numbers.
#
# ## Learning objectives
#
# - Store data as float32 NumPy arrays and know why float64 creeps in (and how to stop it).
# - Implement element-wise arithmetic with NumPy broadcasting, and explain the rules.
# - Implement matrix multiplication without a Python loop, and measure why that matters.
# - Implement reshaping, transposing, permuting, indexing and reductions with `axis` and
#   `keepdims`.
# - Separate an operation's maths (`forward`) from the bookkeeping that records it.
#
# ## What you build
#
# - `Tensor`: creation from lists, arrays and scalars; `shape`, `dtype`, `size`, `ndim`,
#   `numpy()`, `item()`, a readable `repr`.
# - The operations, each a small `Function` subclass with a `forward` on NumPy arrays:
#   `Add`, `Sub`, `Mul`, `Div`, `Neg`, `Pow`, `Exp`, `Log`, `MatMul`, `Reshape`, `Transpose`,
#   `Permute`, `GetItem`, `Sum`, `Mean`, `Max`.
# - The `Tensor` methods and operators that call them: `+ - * / ** @`, `exp()`, `log()`,
#   `reshape()`, `transpose()`, `permute()`, `t[...]`, `sum()`, `mean()`, `max()`.
#
# ## What you are not building yet
#
# - **Gradients.** `Tensor` carries `requires_grad` and `grad`, and records its parents, but
#   `backward()` arrives in module 06 (autograd).
# - **Neural-network pieces.** Activations are module 02, layers module 03.
# - **GPUs or other devices.** TinyTorch runs on NumPy, on the CPU.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp core.tensor
#| export
import numpy as np

# %% [markdown]
# ## Part 1: storage
#
# A `Tensor` wraps one NumPy array, `self.data`. Three rules decide what that array is:
#
# 1. **float32 by default.** Deep learning runs in 32-bit floats: half the memory of float64
#    and twice the arithmetic throughput. NumPy, though, makes float64 whenever it can:
#    `np.array([1.0])`, `np.random.randn(3)` and `np.float32(1) / np.sqrt(64)` are all
#    float64. So the constructor converts to float32 unless the caller passes `dtype=`
#    (tests of gradients pass `dtype=np.float64` on purpose).
# 2. **No needless copies.** `np.asarray` returns the same array when no conversion is
#    needed; `np.array` always copies. A framework that copies on every construction
#    doubles its memory traffic.
# 3. **Gradients are only for floats.** `requires_grad=True` on an integer tensor is an error.
#
# Every result of an operation is made with `Tensor._make(array)`, which wraps the array as
# it is. That is how a float64 computation stays float64 (for gradient checks) and how a
# float32 one stays float32 without converting on every step.
#
# The arithmetic methods at the bottom of the class are one line each: they call the
# operations you write in Parts 3 to 6. Read them now; they show every method `Tensor` has.

# %% nbgrader={"grade": false, "grade_id": "tensor-class", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class Tensor:
    """An N-dimensional float32 array that can record the operations that made it.

    >>> t = Tensor([[1, 2, 3], [4, 5, 6]])
    >>> t.shape, t.dtype
    ((2, 3), dtype('float32'))
    >>> t * 2 - 1
    Tensor([[ 1.,  3.,  5.],
            [ 7.,  9., 11.]])
    >>> t @ Tensor([1.0, 0.5, 0.0])
    Tensor([2. , 6.5])
    >>> t.sum(axis=0), t.max().item(), t.T.shape
    (Tensor([5., 7., 9.]), 6.0, (3, 2))
    """

    # Make NumPy defer to Tensor in mixed expressions: `np_array + tensor` calls
    # Tensor.__radd__ instead of NumPy looping over the tensor's elements.
    __array_priority__ = 1000

    def __init__(self, data, dtype=None, requires_grad=False):
        """Wrap `data` (list, scalar, ndarray or Tensor) as an array, float32 unless `dtype`.

        >>> Tensor(np.arange(3)).dtype, Tensor([1, 2], dtype=np.float64).dtype
        (dtype('float32'), dtype('float64'))
        >>> Tensor(2.5, requires_grad=True)
        Tensor(2.5, requires_grad=True)
        """
        ### BEGIN SOLUTION
        if isinstance(data, Tensor):
            data = data.data
        if dtype is not None:
            array = np.asarray(data, dtype=dtype)
        else:
            array = np.asarray(data)
            if array.dtype != np.float32:
                array = array.astype(np.float32)
        self.data = array
        ### END SOLUTION
        if requires_grad and not np.issubdtype(self.data.dtype, np.floating):
            raise TypeError(
                f"requires_grad=True needs a floating-point tensor, got dtype {self.data.dtype}. "
                "Gradients are only defined for floats: pass float data or dtype=np.float32."
            )
        self.requires_grad = bool(requires_grad)
        self.grad = None  # a Tensor of the same shape, filled by backward() (module 06)
        self._ctx = None  # the record of the op that made this tensor (see Part 2)

    @classmethod
    def _make(cls, array, requires_grad=False):
        """Wrap an operation's result array as it is: no dtype conversion, no copy."""
        t = cls.__new__(cls)
        t.data = array
        t.requires_grad = requires_grad
        t.grad = None
        t._ctx = None
        return t

    # ---- what a tensor is -------------------------------------------------------------
    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def size(self):
        """Number of elements."""
        return self.data.size

    @property
    def ndim(self):
        return self.data.ndim

    def __len__(self):
        if self.data.ndim == 0:
            raise TypeError("len() of a 0-d tensor: it has no first dimension; use .item()")
        return len(self.data)

    def numpy(self):
        """The underlying NumPy array (shared, not copied)."""
        return self.data

    def item(self):
        """The single value of a one-element tensor, as a Python number.

        >>> Tensor([[2.5]]).item()
        2.5
        """
        ### BEGIN SOLUTION
        if self.data.size != 1:
            raise ValueError(
                f"item() needs a tensor with exactly one element, got shape {self.shape} "
                f"({self.size} elements). Reduce it first, e.g. t.sum().item(), or index it."
            )
        return self.data.item()
        ### END SOLUTION

    def __repr__(self):
        """NumPy's layout at 4 decimals; the dtype and requires_grad only when not the default.

        >>> Tensor([0.1234567, 2.0])
        Tensor([0.1235, 2.    ])
        >>> Tensor([1, 2], dtype=np.int64)
        Tensor([1, 2], dtype=int64)
        """
        ### BEGIN SOLUTION
        body = np.array2string(self.data, precision=4, separator=", ", prefix="Tensor(")
        extra = ""
        if self.data.dtype != np.float32:
            extra += f", dtype={self.data.dtype}"
        if self.requires_grad:
            extra += ", requires_grad=True"
        return f"Tensor({body}{extra})"
        ### END SOLUTION

    # ---- gradients (the engine is module 06) ----------------------------------------
    def backward(self, grad=None, retain_graph=False):
        """Compute d(self)/d(leaf) for every leaf that requires grad; see module 06."""
        try:
            from tinytorch.core.autograd import backward
        except ImportError as error:
            raise RuntimeError(
                "backward() is written in module 06 (autograd). Complete it with "
                f"`tito module complete 06`. ({error})"
            ) from error
        backward(self, grad, retain_graph=retain_graph)

    def detach(self):
        """The same data, cut from the graph: a leaf that does not require grad."""
        return Tensor._make(self.data)

    # ---- arithmetic (Part 3) ------------------------------------------------------------
    def __add__(self, other):
        return Add.apply(self, other)

    def __radd__(self, other):
        return Add.apply(other, self)

    def __sub__(self, other):
        return Sub.apply(self, other)

    def __rsub__(self, other):
        return Sub.apply(other, self)

    def __mul__(self, other):
        return Mul.apply(self, other)

    def __rmul__(self, other):
        return Mul.apply(other, self)

    def __truediv__(self, other):
        return Div.apply(self, other)

    def __rtruediv__(self, other):
        return Div.apply(other, self)

    def __neg__(self):
        return Neg.apply(self)

    def __pow__(self, exponent):
        if isinstance(exponent, Tensor):
            raise TypeError(
                "Tensor ** Tensor is not supported: the exponent must be a Python number, "
                "e.g. t ** 2 or t ** 0.5."
            )
        return Pow.apply(self, exponent=float(exponent))

    def exp(self):
        return Exp.apply(self)

    def log(self):
        return Log.apply(self)

    # ---- matrix multiplication (Part 4) -------------------------------------------------
    def __matmul__(self, other):
        return MatMul.apply(self, other)

    def __rmatmul__(self, other):
        return MatMul.apply(other, self)

    def matmul(self, other):
        return MatMul.apply(self, other)

    # ---- shapes and indexing (Part 5) ---------------------------------------------------
    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return Reshape.apply(self, shape=shape)

    def transpose(self, dim0=-2, dim1=-1):
        return Transpose.apply(self, dim0=dim0, dim1=dim1)

    @property
    def T(self):
        """Reverse all axes (the matrix transpose for 2-D tensors)."""
        return Permute.apply(self, dims=tuple(range(self.ndim - 1, -1, -1)))

    def permute(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        return Permute.apply(self, dims=dims)

    def __getitem__(self, index):
        return GetItem.apply(self, index=_plain_index(index))

    # ---- reductions (Part 6) ------------------------------------------------------------
    # `dim=`/`keepdim=` are PyTorch's names for `axis=`/`keepdims=`; either spelling works.
    def sum(self, axis=None, keepdims=None, *, dim=None, keepdim=None):
        axis, keepdims = reduction_args("sum", axis, keepdims, dim, keepdim)
        return Sum.apply(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=None, *, dim=None, keepdim=None):
        axis, keepdims = reduction_args("mean", axis, keepdims, dim, keepdim)
        return Mean.apply(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=None, *, dim=None, keepdim=None):
        """Maximum values only (PyTorch's `max(dim=)` also returns the indices)."""
        axis, keepdims = reduction_args("max", axis, keepdims, dim, keepdim)
        return Max.apply(self, axis=axis, keepdims=keepdims)


def _plain_index(index):
    """Turn Tensors inside an index into NumPy arrays, so NumPy can index with them."""
    if isinstance(index, Tensor):
        return index.data
    if isinstance(index, tuple):
        return tuple(i.data if isinstance(i, Tensor) else i for i in index)
    return index


# %% nbgrader={"grade": false, "grade_id": "hidden-cases", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| exporti
# The instructor's grade (nbgrader) runs more cases than the tests show you: other shapes, other
# values, edge cases, written after each test's visible ones and removed from your notebook. They
# run through this helper, so a failure names only the kind of case and its inputs stay hidden.
# `tito module complete` runs the visible cases alone: code that passes them is checked again
# by the instructor on inputs you have not seen.
def hidden_cases(check, cases):
    """Run check(*args) for each `label: args` of `cases` (args not a tuple: check(args)); a
    failure is reported by its label, the kind of case, never by its inputs."""
    if not cases:
        raise ValueError("hidden_cases() needs at least one case, or it tests nothing")
    for label, args in cases.items():
        failed = None
        try:
            check(*args) if isinstance(args, tuple) else check(args)
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - any failure of a hidden case is reported
            failed = type(error).__name__  # only its kind: its message may show the inputs
        if failed:
            raise AssertionError(
                f"hidden case '{label}' failed with {failed}: your code passes the cases you "
                "can see but not this one, which the instructor's grade adds and keeps hidden. "
                "Try inputs of your own against the rule this test states (other shapes, "
                "values, edge cases) and look for code that fits only the visible examples"
            )


# %% [markdown]
# ### Test: creating tensors
#
# The test below is graded. When it fails, its message names the likely mistake.

# %% nbgrader={"grade": true, "grade_id": "test_unit_tensor_creation", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_tensor_creation():
    """Lists, scalars and arrays become float32 tensors with the right shape."""

    def check_made(data, shape):
        t = Tensor(data)
        assert t.shape == shape, f"Tensor({data!r}).shape is {t.shape}, expected {shape}"
        assert t.dtype == np.float32, (
            f"Tensor({data!r}) has dtype {t.dtype}: store float32 by default, "
            "converting with .astype(np.float32) when no dtype is given"
        )
        size, ndim = int(np.prod(shape)), len(shape)
        assert t.size == size and t.ndim == ndim, (
            f"size/ndim are {t.size}/{t.ndim}, expected {size}/{ndim}"
        )

    def check_no_copy(a):
        assert Tensor(a).data is a or np.shares_memory(Tensor(a).data, a), (
            f"Tensor(a {a.dtype} array) copied its input: use np.asarray so no copy is made "
            "when the dtype already matches"
        )

    def check_item(data, want):
        try:
            one = Tensor(data).item()
        except Exception as error:
            raise AssertionError(
                f"Tensor({data!r}).item() raised {type(error).__name__} ({error}): a one-element "
                "tensor of any shape has an item; return self.data.item() (float() converts "
                "only 0-d arrays)"
            ) from error
        assert one == want, f"Tensor({data!r}).item() gave {one!r}, expected {want}"

    def check_item_error(data, shape):
        try:
            Tensor(data).item()
        except ValueError as error:
            assert str(shape) in str(error), (
                f"item()'s error should name the shape {shape}: {error}"
            )
        except Exception as error:  # e.g. float(self.data): NumPy's TypeError does not teach
            raise AssertionError(
                f"Tensor({data!r}).item() raised {type(error).__name__} ({error}), expected a "
                f"ValueError naming the shape {shape}: check self.data.size in item() and raise "
                "ValueError yourself before converting, then return self.data.item()"
            ) from None
        else:
            raise AssertionError(
                f"item() on a tensor of shape {shape} must raise ValueError naming its shape"
            )

    check_made([[1, 2, 3], [4, 5, 6]], (2, 3))
    s = Tensor(3.5)
    assert s.shape == () and s.item() == 3.5, (
        f"Tensor(3.5) should be a 0-d tensor holding 3.5, got shape {s.shape}"
    )
    f64 = np.linspace(0, 1, 5)  # NumPy makes float64
    assert Tensor(f64).dtype == np.float32, (
        "Tensor(np.linspace(0, 1, 5)) kept NumPy's float64: convert to float32 unless "
        "dtype= was given"
    )
    assert Tensor(f64, dtype=np.float64).dtype == np.float64, (
        "Tensor(x, dtype=np.float64) must keep float64: gradient checks rely on it"
    )
    check_no_copy(np.ones(4, dtype=np.float32))
    assert Tensor(Tensor([1.0, 2.0])).shape == (2,), "Tensor(another_tensor) should reuse its data"
    check_item([7.0], 7.0)
    check_item_error([1.0, 2.0], (2,))
    text = repr(Tensor([1.0, 2.5]))
    assert text.startswith("Tensor(") and "2.5" in text, (
        f"repr(Tensor([1.0, 2.5])) is {text!r}: it should read like Tensor([1. , 2.5])"
    )
    assert "requires_grad=True" in repr(Tensor([1.0], requires_grad=True)), (
        "repr should show requires_grad=True when it is set"
    )
    ### BEGIN HIDDEN TESTS
    hidden_cases(check_made, {
        "a deeper nested list": ([[[1], [2]], [[3], [4]], [[5], [6]]], (3, 2, 1)),
        "an integer array": (np.arange(10).reshape(5, 2), (5, 2)),
        "a list of booleans": ([True, False, True], (3,)),
        "a NumPy float64 scalar": (np.float64(-2.25), ()),
    })
    hidden_cases(check_no_copy, {"a float32 matrix": np.zeros((3, 2), dtype=np.float32)})
    hidden_cases(check_item, {
        "a nested one-element list": ([[[-0.5]]], -0.5),
        "an integer scalar": (12, 12.0),
    })
    hidden_cases(check_item_error, {
        "a matrix": (np.zeros((2, 2)), (2, 2)),
        "an empty tensor": ([], (0,)),
    })
    ### END HIDDEN TESTS


test_unit_tensor_creation()


# %% [markdown]
# ## Part 2: operations and their records
#
# Every operation is a subclass of `Function` with one method, `forward`, that takes NumPy
# arrays and returns a NumPy array. It contains only maths. `Function.apply` does all the
# bookkeeping, in one place, for every operation:
#
# 1. turn each input into a `Tensor` (so `t + 1` and `1 + t` both work), keeping the
#    tensor's dtype for Python numbers so that `float32 + 0.5` stays float32;
# 2. run `forward` on the raw arrays;
# 3. wrap the result with `Tensor._make`;
# 4. if gradients are enabled and any input requires them, give the result a record,
#    `_ctx`: which `Function` made it, from which parent tensors, with which parameters
#    (and, for fused operations that ask for it, what their forward saved for backward).
#
# Module 06 adds each operation's derivative in a table keyed by the `Function` class, and
# walks these records backwards. Nothing here changes then.
#
# One more line in `apply` is for much later: `KERNELS`, an empty dictionary from a plain
# `Function` class to a faster class that computes the same values. `apply` looks the class
# up there first (`cls = KERNELS.get(cls, cls)`: one dictionary lookup per operation, and
# while the table is empty every operation runs exactly the `forward` you wrote). Module 06
# explains the table beside its derivative table, and module 17 (acceleration) fills it.
#
# When `forward` raises NumPy's `ValueError` because two inputs do not fit together (a
# `(2, 3)` plus a `(4,)`), `apply` turns it into a `ShapeError` that names both shapes.
# Only then: `_inputs_clash` asks NumPy again on the input shapes alone, so a mistake further
# inside `forward` (a wrong `reshape`, say) is reported as itself, at its own line, and
# never as "cannot combine shapes" for shapes that are fine.
#
# The cell also holds the course's one random generator: `manual_seed(0)` makes initial
# weights and dropout masks repeatable, like `torch.manual_seed`.
#
# The cell below is given to you: read it, it is short.

# %% nbgrader={"grade": false, "grade_id": "function", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
class ShapeError(ValueError):
    """Two tensors whose shapes do not fit the operation; the message names both shapes.

    >>> try:
    ...     Tensor(np.ones((2, 3))) + Tensor(np.ones(4))
    ... except ShapeError as error:
    ...     print(str(error).split(".")[0])
    Add: cannot combine shapes (2, 3) and (4,)
    """


def reduction_args(name, axis=None, keepdims=None, dim=None, keepdim=None):
    """Accept NumPy's `axis`/`keepdims` or PyTorch's `dim`/`keepdim`; returns (axis, keepdims).

    One spelling per call: giving both `axis` and `dim` (or `keepdims` and `keepdim`) is a
    TypeError, since the two could disagree.

    >>> reduction_args("sum", dim=1, keepdim=True)
    (1, True)
    >>> reduction_args("mean", axis=[0, 1])
    ((0, 1), False)
    """
    if axis is not None and dim is not None:
        raise TypeError(
            f"{name}() got both axis={axis!r} and dim={dim!r}: they are the same argument "
            "(NumPy's and PyTorch's name), pass only one"
        )
    if keepdims is not None and keepdim is not None:
        raise TypeError(
            f"{name}() got both keepdims={keepdims!r} and keepdim={keepdim!r}: they are the "
            "same argument (NumPy's and PyTorch's name), pass only one"
        )
    axis = dim if axis is None else axis
    keepdims = keepdim if keepdims is None else keepdims
    if isinstance(axis, list):
        axis = tuple(axis)
    return axis, bool(keepdims)


_grad_enabled = True
_op_observers = []  # observe(fn, arrays, params, result) after every op; module 14's profiler


def is_grad_enabled():
    """True when operations record their inputs for backward (see `no_grad`, module 06).

    >>> is_grad_enabled()
    True
    """
    return _grad_enabled


def set_grad_enabled(enabled):
    """Turn recording on or off; returns the previous setting.

    >>> x = Tensor([1.0, 2.0], requires_grad=True)
    >>> previous = set_grad_enabled(False)
    >>> (x * 2).requires_grad, is_grad_enabled()
    (False, False)
    >>> set_grad_enabled(previous)  # back on; returns the setting it replaces
    False
    >>> (x * 2).requires_grad
    True
    """
    global _grad_enabled
    previous, _grad_enabled = _grad_enabled, bool(enabled)
    return previous


_generator = np.random.default_rng()


def manual_seed(seed):
    """Seed the generator that layers (initial weights) and dropout draw from.

    >>> manual_seed(0)
    >>> first = default_generator().standard_normal(3)
    >>> manual_seed(0)
    >>> bool((default_generator().standard_normal(3) == first).all())
    True
    """
    global _generator
    _generator = np.random.default_rng(seed)


def default_generator():
    """The shared NumPy Generator; its `.bit_generator.state` can be saved in checkpoints.

    >>> manual_seed(0)
    >>> default_generator().integers(0, 10, size=4).tolist()
    [8, 6, 5, 2]
    """
    return _generator


class Context:
    """What one operation remembers for backward: its inputs, output and parameters.

    >>> a = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> ctx = a.sum(axis=1)._ctx
    >>> ctx.fn.__name__, ctx.parents[0] is a, ctx.params, ctx.output.tolist()
    ('Sum', True, {'axis': 1, 'keepdims': False}, [3.0, 7.0])
    >>> Tensor([1.0]).sum()._ctx is None  # nothing requires grad: nothing recorded
    True
    """

    __slots__ = ("fn", "parents", "inputs", "output", "params", "saved")

    def __init__(self, fn, parents, inputs, output, params):
        self.fn = fn
        self.parents = parents  # the input Tensors
        self.inputs = inputs  # their arrays, as forward saw them
        self.output = output  # the result array
        self.params = params  # keyword parameters, e.g. axis=
        self.saved = None  # anything else forward chose to keep (fused ops)


KERNELS = {}  # plain Function class -> a faster Function class computing the same values


def kernel(function_class):
    """The Function that runs for `function_class`: its registered fast kernel, or itself.

    `Function.apply` does this lookup for every operation, so a kernel registered with
    `KERNELS[Plain] = Fast` runs wherever a lesson applies `Plain`; `KERNELS.pop(Plain)`
    switches it off. A kernel is a Function subclass of its own, with its own forward and
    its own derivative rule, computing the same values. Module 06 explains the table and
    module 17 fills it; while it is empty, every lesson's own code runs.

    >>> class Halve(Function):
    ...     @staticmethod
    ...     def forward(a):
    ...         return a / a.dtype.type(2)
    >>> class LoudHalve(Halve):  # a "faster" twin that says when it runs
    ...     @staticmethod
    ...     def forward(a):
    ...         print("LoudHalve ran")
    ...         return a * a.dtype.type(0.5)
    >>> KERNELS[Halve] = LoudHalve
    >>> kernel(Halve).__name__, Halve.apply(Tensor([3.0]))
    LoudHalve ran
    ('LoudHalve', Tensor([1.5]))
    >>> del KERNELS[Halve]
    >>> kernel(Halve).__name__
    'Halve'
    """
    return KERNELS.get(function_class, function_class)


def _inputs_clash(arrays, error):
    """Is NumPy's `error`, raised in a forward, about the inputs themselves (their shapes do
    not fit together), rather than a mistake further inside forward? NumPy is asked again on
    the input shapes alone, as a broadcast or as a matrix product, whichever it complained of."""
    text = str(error)
    try:
        if "core dimension" in text or "remapped shapes" in text:  # np.matmul's two messages
            if len(arrays) != 2 or min(x.ndim for x in arrays) == 0:
                return False
            a, b = arrays
            # the same shapes with n and m set to 0: NumPy checks k and the batch, computes nothing
            a_shape = a.shape[:-2] + (0, a.shape[-1]) if a.ndim > 1 else a.shape
            b_shape = b.shape[:-1] + (0,) if b.ndim > 1 else b.shape
            np.matmul(np.empty(a_shape, a.dtype), np.empty(b_shape, b.dtype))
        elif "broadcast" in text:
            # NumPy writes shapes as (2,3) and (4,): are the arrays it names the inputs?
            named = ["(" + ",".join(map(str, x.shape)) + ("," if x.ndim == 1 else "") + ")"
                     for x in arrays]
            if not all(shape in text for shape in named):
                return False  # arrays made inside forward
            np.broadcast_shapes(*(x.shape for x in arrays))
        else:
            return False  # "cannot reshape ...", say: forward's own mistake
    except ValueError:
        return True
    return False


class Function:
    """An operation. Subclasses define `forward(*arrays, **params) -> array`.

    A fused operation whose derivative needs intermediate results (attention's
    probabilities, layer norm's inverse standard deviation) sets `saves_for_backward = True`
    and returns `(output, saved)`; the record keeps `saved` in `ctx.saved` for module 06.

    >>> class Square(Function):
    ...     @staticmethod
    ...     def forward(a):
    ...         return a * a
    >>> Square.apply(Tensor([1.0, -3.0]))
    Tensor([1., 9.])
    >>> Square.apply([2.0])  # anything Tensor() accepts is wrapped first
    Tensor([4.])
    >>> Square.apply(Tensor([2.0], requires_grad=True))._ctx.fn is Square
    True
    """

    saves_for_backward = False

    @staticmethod
    def forward(*arrays, **params):
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs, **params):
        cls = KERNELS.get(cls, cls)  # a faster registered twin (module 17), else cls itself
        tensors = []
        dtype = None
        for x in inputs:
            if isinstance(x, Tensor):
                dtype = x.data.dtype
                break
        for x in inputs:
            if isinstance(x, Tensor):
                tensors.append(x)
            elif isinstance(x, (int, float)) and dtype is not None:
                tensors.append(Tensor._make(np.asarray(x, dtype=dtype)))
            else:
                tensors.append(Tensor(x))
        arrays = [t.data for t in tensors]
        try:
            out = cls.forward(*arrays, **params)
        except ValueError as error:
            if isinstance(error, ShapeError) or len(arrays) < 2 or not _inputs_clash(arrays, error):
                raise  # a mistake inside forward: its traceback points at its own line
            shapes = " and ".join(str(a.shape) for a in arrays)
            raise ShapeError(
                f"{cls.__name__}: cannot combine shapes {shapes}. Broadcasting compares "
                "shapes from the last axis backwards; each pair of sizes must be equal or "
                "one of them 1. Reshape one operand (for example with .reshape) so they "
                f"line up. NumPy said: {error}"
            ) from None
        saved = None
        if cls.saves_for_backward:
            out, saved = out
        result = Tensor._make(out)
        if _grad_enabled and any(t.requires_grad for t in tensors):
            result.requires_grad = True
            result._ctx = Context(cls, tuple(tensors), arrays, out, params)
            result._ctx.saved = saved
        if _op_observers:  # empty unless a profiler is listening (module 14): one test per op
            for observe in _op_observers:
                observe(cls, arrays, params, result)
        return result


# %% [markdown]
# ### Test: records
#
# A result records its parents only when an input requires gradients.

# %% nbgrader={"grade": true, "grade_id": "test_unit_records", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_records():
    """Results of ops on requires_grad tensors remember their op and parents."""

    class Twice(Function):
        @staticmethod
        def forward(a, scale=2.0):
            return a * a.dtype.type(scale)

    class Blend(Function):
        @staticmethod
        def forward(a, b, w=0.5):
            return a * a.dtype.type(w) + b * b.dtype.type(1 - w)

    def check_record(fn, inputs, params, want):
        out = fn.apply(*inputs, **params)
        assert isinstance(out, Tensor) and np.allclose(out.data, want), (
            "Function.apply should run forward on the arrays and wrap the result in a Tensor"
        )
        if not any(t.requires_grad for t in inputs):
            assert out._ctx is None and not out.requires_grad, (
                "ops on tensors that do not require grad must not record anything"
            )
            return
        assert out.requires_grad, "the result of an op on a requires_grad tensor requires grad"
        assert out._ctx is not None and out._ctx.fn is fn, (
            "the result should record the op that made it"
        )
        assert out._ctx.parents == tuple(inputs) and out._ctx.params == params, (
            "the record keeps the parent tensors and the op's parameters"
        )

    a = Tensor([1.0, 2.0], requires_grad=True)
    check_record(Twice, (a,), {"scale": 3.0}, [3.0, 6.0])
    check_record(Twice, (Tensor([3.0, 4.0]),), {}, [6.0, 8.0])
    previous = set_grad_enabled(False)
    try:
        assert Twice.apply(a)._ctx is None, "with grad disabled, nothing is recorded"
    finally:
        set_grad_enabled(previous)
    assert a.detach()._ctx is None and not a.detach().requires_grad, "detach() makes a leaf"
    assert a.grad is None, "a new tensor's grad is None until backward fills it"
    ### BEGIN HIDDEN TESTS
    made = Twice.apply(Tensor([[0.5], [-1.0]], requires_grad=True))
    hidden_cases(check_record, {
        "two parents, only the second requiring grad": (
            Blend, (Tensor([1.0, 2.0]), Tensor([5.0, -3.0], requires_grad=True)), {"w": 0.25},
            [4.0, -1.75]),
        "two parents, neither requiring grad": (
            Blend, (Tensor([[2.0]]), Tensor([[4.0]])), {}, [[3.0]]),
        "the result of an earlier op as the parent": (Twice, (made,), {}, [[2.0], [-4.0]]),
        "a float64 scalar tensor": (
            Twice, (Tensor(1.5, dtype=np.float64, requires_grad=True),), {"scale": -2.0}, -3.0),
    })
    ### END HIDDEN TESTS


test_unit_records()


# %% [markdown]
# ## Part 3: element-wise arithmetic and broadcasting
#
# `a + b` works element by element when `a` and `b` have the same shape. When they do not,
# NumPy **broadcasts**: it lines the shapes up from the last axis, and a size of 1 (or a
# missing axis) is stretched to match the other. Shapes `(32, 10)` and `(10,)` add a bias to
# every row; `(32, 1)` and `(1, 10)` make a `(32, 10)` table. No data is copied: the
# stretched axis gets a stride of 0.
#
# ```
#   (32, 10)      (4, 1, 5)      (2, 3)
#   (    10)      (   3, 1)      (   4)
#   --------      ---------      ------
#   (32, 10)      (4, 3, 5)      error: 3 vs 4
# ```
#
# Write each `forward` with NumPy. `Pow` takes its exponent as a parameter (a Python number).
# Keep float32 results float32: NumPy does this for you as long as you do not mix in float64.

# %% nbgrader={"grade": false, "grade_id": "elementwise", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class Add(Function):
    """a + b"""

    @staticmethod
    def forward(a, b):
        ### BEGIN SOLUTION
        return a + b
        ### END SOLUTION


class Sub(Function):
    """a - b"""

    @staticmethod
    def forward(a, b):
        ### BEGIN SOLUTION
        return a - b
        ### END SOLUTION


class Mul(Function):
    """a * b"""

    @staticmethod
    def forward(a, b):
        ### BEGIN SOLUTION
        return a * b
        ### END SOLUTION


class Div(Function):
    """a / b"""

    @staticmethod
    def forward(a, b):
        ### BEGIN SOLUTION
        return a / b
        ### END SOLUTION


class Neg(Function):
    """-a"""

    @staticmethod
    def forward(a):
        ### BEGIN SOLUTION
        return -a
        ### END SOLUTION


class Pow(Function):
    """a ** exponent, for a number exponent"""

    @staticmethod
    def forward(a, exponent):
        ### BEGIN SOLUTION
        return a ** a.dtype.type(exponent)
        ### END SOLUTION


class Exp(Function):
    """e ** a"""

    @staticmethod
    def forward(a):
        ### BEGIN SOLUTION
        return np.exp(a)
        ### END SOLUTION


class Log(Function):
    """natural logarithm of a"""

    @staticmethod
    def forward(a):
        ### BEGIN SOLUTION
        return np.log(a)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_arithmetic", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_arithmetic():
    """Element-wise ops match NumPy, broadcast, accept numbers, and stay float32."""
    made = Tensor(np.ones(2, dtype=np.float32)).dtype
    assert made == np.float32, (
        f"Tensor(a float32 array) has dtype {made}: your Tensor constructor changes the dtype "
        "(see test_unit_tensor_creation). Fix the constructor first; this test's ops are not "
        "at fault"
    )

    def check_ops(x, y):
        """Every op on a = Tensor(x), b = Tensor(y) against NumPy (x > 0, y != 0)."""
        a, b = Tensor(x), Tensor(y)
        cases = {
            "a + b": (lambda: a + b, x + y), "a - b": (lambda: a - b, x - y),
            "a * b": (lambda: a * b, x * y), "a / b": (lambda: a / b, x / y),
            "-a": (lambda: -a, -x),
            "a ** 2": (lambda: a ** 2, x ** 2), "a ** 0.5": (lambda: a ** 0.5, x ** 0.5),
            "a.exp()": (lambda: a.exp(), np.exp(x)), "a.log()": (lambda: a.log(), np.log(x)),
            "1 + a": (lambda: 1 + a, 1 + x), "2 - a": (lambda: 2 - a, 2 - x),
            "a * 3": (lambda: a * 3, x * 3), "1 / a": (lambda: 1 / a, 1 / x),
            "a / 4": (lambda: a / 4, x / 4),
        }
        for name, (op, want) in cases.items():
            try:
                got = op()
            except Exception as error:
                raise AssertionError(
                    f"{name} with a of shape {x.shape} and b of shape {y.shape} raised "
                    f"{type(error).__name__}: {error} -- expected NumPy's {name}, shape "
                    f"{want.shape}. "
                    "Apply the NumPy operation to the arrays exactly as forward receives them: "
                    "NumPy broadcasts them, no reshaping is needed"
                ) from error
            assert isinstance(got, Tensor), (
                f"{name} should return a Tensor, got {type(got).__name__}"
            )
            assert got.shape == want.shape, f"{name} has shape {got.shape}, expected {want.shape}"
            assert np.allclose(got.data, want, rtol=1e-6), (
                f"{name} gave {got.data}, expected {want}"
            )
            assert got.dtype == np.float32, (
                f"{name} has dtype {got.dtype}: a float32 op must stay float32 (did a float64 "
                "constant sneak in? use a.dtype.type(value))"
            )

    check_ops(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32),
              np.array([0.5, -1.0, 2.0], dtype=np.float32))
    col = Tensor(np.arange(3, dtype=np.float32).reshape(3, 1))
    row = Tensor(np.arange(4, dtype=np.float32).reshape(1, 4))
    assert (col + row).shape == (3, 4), (
        f"(3, 1) + (1, 4) should broadcast to (3, 4), got {(col + row).shape}"
    )
    f64 = Tensor([1.0, 2.0], dtype=np.float64)
    assert (f64 * 0.5).dtype == np.float64, "float64 tensors stay float64 (gradient checks)"
    ### BEGIN HIDDEN TESTS
    rng = np.random.default_rng(101)

    def positive(*shape):
        return rng.uniform(0.25, 3.0, shape).astype(np.float32)

    def nonzero(*shape):
        return (positive(*shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)

    hidden_cases(check_ops, {
        "a column against a row": (positive(4, 1), nonzero(1, 5)),
        "a batch of matrices against a matrix": (positive(2, 3, 4), nonzero(3, 4)),
        "the second operand the larger": (positive(3), nonzero(2, 3)),
        "two scalar tensors": (positive(), nonzero()),
        "equal shapes": (positive(5, 2), nonzero(5, 2)),
    })
    ### END HIDDEN TESTS


test_unit_arithmetic()


# %% nbgrader={"grade": true, "grade_id": "test_unit_shape_errors", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_shape_errors():
    """Incompatible shapes raise a ShapeError that names both shapes."""

    def check_refused(name, op, x_shape, y_shape):
        try:
            op(Tensor(np.ones(x_shape)), Tensor(np.ones(y_shape)))
        except ShapeError as error:
            assert str(x_shape) in str(error) and str(y_shape) in str(error), (
                f"the error should name both shapes {x_shape} and {y_shape}: {error}"
            )
        else:
            raise AssertionError(
                f"{x_shape} {name} {y_shape} must raise ShapeError: those shapes cannot broadcast"
            )

    check_refused("+", lambda a, b: a + b, (2, 3), (4,))
    ### BEGIN HIDDEN TESTS
    hidden_cases(check_refused, {
        "a product of a batch and a matrix": ("*", lambda a, b: a * b, (3, 2, 1), (4, 2)),
        "a difference of two vectors": ("-", lambda a, b: a - b, (5,), (6,)),
        "a quotient of a column and a matrix": ("/", lambda a, b: a / b, (3, 1), (2, 4)),
    })
    ### END HIDDEN TESTS


test_unit_shape_errors()


# %% [markdown]
# ## Part 4: matrix multiplication
#
# `a @ b` multiplies `(..., n, k)` by `(..., k, m)` into `(..., n, m)`; leading axes
# broadcast, so a batch of matrices times one weight matrix is one call. A neural network
# spends most of its time here. The work is `2 * n * k * m` floating-point operations, and
# a good implementation runs them in an optimized BLAS library (NumPy's `np.matmul`) instead
# of three nested Python loops, which are about a thousand times slower (measured in the
# systems analysis below).
#
# Check the inner sizes yourself and raise `ShapeError` with both shapes: NumPy's own
# message ("mismatch in its core dimension 0") does not teach.
#
# **One BLAS call, not one per batch.** The most common product in this course is
# `(..., n, k) @ (k, m)`: a `Linear` layer applied to `(B, T, C)` activations. `np.matmul`
# runs it as one small BLAS call per leading index (`B` calls of `(T, k) @ (k, m)`). The
# same numbers come out of one big call: fold the leading axes into the rows,
# `a.reshape(-1, k) @ b` on `(B*T, k)` rows, then reshape the result back to
# `(..., n, m)`. BLAS is fastest on one large product (it can split and tile it as it
# likes), so do that whenever `a` has more than two axes and `b` has exactly two; keep
# `np.matmul(a, b)` for everything else. Measured for `(12, 64, 128) @ (128, 384)` on one
# thread: 0.99 ms in 12 calls, 0.43 ms in one.

# %% nbgrader={"grade": false, "grade_id": "matmul", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class MatMul(Function):
    """a @ b, batched over leading axes"""

    @staticmethod
    def forward(a, b):
        ### BEGIN SOLUTION
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError(
                f"MatMul needs tensors with at least one axis, got shapes {a.shape} and "
                f"{b.shape}; use * to multiply by a scalar"
            )
        inner_a = a.shape[-1]
        inner_b = b.shape[-2] if b.ndim > 1 else b.shape[0]
        if inner_a != inner_b:
            raise ShapeError(
                f"MatMul: shapes {a.shape} and {b.shape} do not fit: the last axis of the "
                f"first ({inner_a}) must equal the second-to-last of the second ({inner_b}). "
                "Did you mean to transpose one of them?"
            )
        if a.ndim > 2 and b.ndim == 2:
            # (..., n, k) @ (k, m), every Linear layer on (B, T, C) activations: one BLAS
            # call on (B*T, k) rows is faster than np.matmul's one call per leading index.
            return np.matmul(a.reshape(-1, inner_a), b).reshape(*a.shape[:-1], b.shape[1])
        return np.matmul(a, b)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_matmul", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_matmul():
    """Matmul matches NumPy for 2-D, batched and vector cases, and explains bad shapes."""
    made = Tensor(np.ones(2, dtype=np.float32)).dtype
    assert made == np.float32, (
        f"Tensor(a float32 array) has dtype {made}: your Tensor constructor changes the dtype "
        "(see test_unit_tensor_creation). Fix the constructor first; this test's ops are not "
        "at fault"
    )

    def check_product(a, b):
        got, want = Tensor(a) @ Tensor(b), a @ b
        assert got.shape == want.shape, (
            f"{a.shape} @ {b.shape} should be {want.shape}, got {got.shape}"
        )
        first_row = np.reshape(got.data, (-1, want.shape[-1]))[0]
        assert np.allclose(got.data, want, atol=1e-5), (
            f"{a.shape} @ {b.shape}: first row {np.round(first_row, 4)}, expected "
            f"{np.round(np.reshape(want, (-1, want.shape[-1]))[0], 4)} (NumPy's a @ b): use "
            "np.matmul(a, b), not the element-wise a * b"
        )
        assert got.dtype == np.float32, f"matmul of float32 tensors gave {got.dtype}"

    def check_refused(a_shape, b_shape):
        try:
            Tensor(np.ones(a_shape)) @ Tensor(np.ones(b_shape))
        except ShapeError as error:
            assert str(a_shape) in str(error), f"the matmul error should name both shapes: {error}"
        else:
            raise AssertionError(
                f"{a_shape} @ {b_shape} must raise ShapeError: the inner sizes differ"
            )

    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    check_product(a, b)
    batch = rng.standard_normal((2, 4, 3)).astype(np.float32)
    got = Tensor(batch) @ Tensor(b)
    assert got.shape == (2, 4, 5), (
        f"(2, 4, 3) @ (3, 5) should broadcast the batch axis to (2, 4, 5), got {got.shape}"
    )
    assert np.allclose(got.data, batch @ b, atol=1e-5), (
        f"(2, 4, 3) @ (3, 5): batch 1, row 0 is {np.round(got.data[1, 0], 4)}, expected "
        f"{np.round((batch @ b)[1, 0], 4)}: np.matmul multiplies every matrix of the batch"
    )
    v = rng.standard_normal(3).astype(np.float32)
    assert (Tensor(a) @ Tensor(v)).shape == (4,), "(4, 3) @ (3,) is a vector of shape (4,)"
    assert Tensor(a).matmul(Tensor(b)).shape == (4, 5), "matmul() is the same as @"
    check_refused((4, 3), (4, 3))
    ### BEGIN HIDDEN TESTS
    rng = np.random.default_rng(202)

    def normal(*shape):
        return (rng.standard_normal(shape) * 3).astype(np.float32)

    hidden_cases(check_product, {
        "one by one times a row": (normal(1, 1), normal(1, 7)),
        "a product with one column": (normal(5, 2), normal(2, 1)),
        "two batches of matrices": (normal(3, 2, 4), normal(3, 4, 2)),
        "batch axes that broadcast": (normal(2, 1, 3, 4), normal(5, 4, 2)),
        "a vector times a matrix": (normal(3), normal(3, 4)),
    })
    hidden_cases(check_refused, {
        "two batches whose inner sizes differ": ((2, 3, 4), (2, 3, 4)),
        "a matrix times a vector of the wrong length": ((2, 5), (4,)),
    })
    ### END HIDDEN TESTS


test_unit_matmul()


# %% [markdown]
# ## Part 5: shapes and indexing
#
# Reshaping, transposing and slicing usually move no data at all: NumPy returns a **view**
# with new strides over the same memory. `reshape` keeps the element order; `transpose`
# swaps two axes (`dim0`, `dim1`, by default the last two, as attention needs for keys);
# `permute` reorders all axes. Indexing takes anything NumPy takes: integers, slices, lists
# and arrays of indices, boolean masks.

# %% nbgrader={"grade": false, "grade_id": "shapes", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class Reshape(Function):
    """a viewed with a new shape (same element order)"""

    @staticmethod
    def forward(a, shape):
        ### BEGIN SOLUTION
        try:
            return a.reshape(shape)
        except ValueError:
            raise ShapeError(
                f"cannot reshape {a.shape} ({a.size} elements) into {tuple(shape)}: the "
                "number of elements must stay the same (use -1 for one inferred size)"
            ) from None
        ### END SOLUTION


class Transpose(Function):
    """a with axes dim0 and dim1 swapped"""

    @staticmethod
    def forward(a, dim0, dim1):
        ### BEGIN SOLUTION
        return np.swapaxes(a, dim0, dim1)
        ### END SOLUTION


class Permute(Function):
    """a with its axes reordered as dims"""

    @staticmethod
    def forward(a, dims):
        ### BEGIN SOLUTION
        return np.transpose(a, dims)
        ### END SOLUTION


class GetItem(Function):
    """a[index]"""

    @staticmethod
    def forward(a, index):
        ### BEGIN SOLUTION
        return a[index]
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_shapes", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_shapes():
    """reshape, transpose, permute and indexing match NumPy."""

    def check_like_numpy(x, name, on_tensor, on_array, fix):
        """on_tensor(Tensor(x)) must hold what on_array(x) gives in NumPy, shape and order."""
        got, want = on_tensor(Tensor(x)), on_array(x)
        assert got.shape == want.shape and np.array_equal(got.data, want), (
            f"{name} of shape {x.shape} gave shape {got.shape}, expected {want.shape}: {fix}"
        )

    def check_reshape_refused(x, shape):
        try:
            Tensor(x).reshape(*shape)
        except ShapeError as error:
            assert str(x.shape) in str(error), f"the reshape error should name the shape: {error}"
        else:
            raise AssertionError(
                f"reshape of {x.size} elements into {shape} must raise ShapeError"
            )

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = Tensor(x)
    assert t.reshape(6, 4).shape == (6, 4), f"reshape(6, 4) gave {t.reshape(6, 4).shape}"
    assert t.reshape((4, -1)).shape == (4, 6), "reshape((4, -1)) should infer 6"
    check_reshape_refused(x, (5, 5))
    assert t.transpose().shape == (2, 4, 3), (
        f"transpose() swaps the last two axes: expected (2, 4, 3), got {t.transpose().shape}"
    )
    idx = np.array([2, 0, 2])
    table = [  # (name, on a Tensor, on its array, what it should do)
        ("reshape(-1)", lambda t: t.reshape(-1), lambda a: a.reshape(-1),
         "reshape must keep element order"),
        ("transpose(0, 2)", lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2),
         "transpose(0, 2) swaps axes 0, 2"),
        ("permute(2, 0, 1)", lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1),
         "permute(2, 0, 1) is wrong"),
        ("t[0].T", lambda t: t[0].T, lambda a: a[0].T, "T reverses the axes of a matrix"),
        ("t[1]", lambda t: t[1], lambda a: a[1], "t[1] should select the second block"),
        ("t[:, 1:, ::2]", lambda t: t[:, 1:, ::2], lambda a: a[:, 1:, ::2],
         "slicing should match NumPy"),
        ("t[0][[2, 0, 2]]", lambda t: t[0][idx], lambda a: a[0][idx],
         "indexing with an array picks rows (repeats ok)"),
        ("t[0][Tensor([2, 0, 2])]", lambda t: t[0][Tensor(idx, dtype=np.int64)],
         lambda a: a[0][idx],
         "indexing with an integer Tensor should work like indexing with its array"),
    ]
    for row in table:
        check_like_numpy(x, *row)
    ### BEGIN HIDDEN TESTS
    y = np.random.default_rng(303).standard_normal((3, 1, 5, 2)).astype(np.float32)
    rows = np.array([4, 4, 1, 0])
    hidden_cases(check_like_numpy, {
        "a reshape of a four-axis array": (
            y, "reshape", lambda t: t.reshape(5, -1, 3), lambda a: a.reshape(5, -1, 3), ""),
        "a transpose of the last two axes": (
            y, "transpose", lambda t: t.transpose(), lambda a: a.swapaxes(-1, -2), ""),
        "a transpose of negative axes": (
            y, "transpose", lambda t: t.transpose(-3, 0), lambda a: a.swapaxes(-3, 0), ""),
        "a permutation of four axes": (
            y, "permute", lambda t: t.permute(3, 1, 0, 2), lambda a: a.transpose(3, 1, 0, 2), ""),
        "integer and slice indexing together": (
            y, "index", lambda t: t[-1, :, 1:4:2], lambda a: a[-1, :, 1:4:2], ""),
        "an index array on the second axis": (
            y, "index", lambda t: t[0, 0][rows], lambda a: a[0, 0][rows], ""),
    })
    hidden_cases(check_reshape_refused, {"a reshape that loses elements": (y, (7, 4))})
    ### END HIDDEN TESTS


test_unit_shapes()


# %% [markdown]
# ## Part 6: reductions
#
# `sum`, `mean` and `max` reduce over `axis` (an int, a tuple, or `None` for all axes).
# With `keepdims=True` the reduced axes stay as size 1, so the result still broadcasts
# against the input: `x - x.max(axis=-1, keepdims=True)` is how a stable softmax starts
# (module 02). `mean` of float32 data must stay float32.

# %% nbgrader={"grade": false, "grade_id": "reductions", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class Sum(Function):
    """sum of a over axis"""

    @staticmethod
    def forward(a, axis=None, keepdims=False):
        ### BEGIN SOLUTION
        return np.sum(a, axis=axis, keepdims=keepdims)
        ### END SOLUTION


class Mean(Function):
    """mean of a over axis"""

    @staticmethod
    def forward(a, axis=None, keepdims=False):
        ### BEGIN SOLUTION
        return np.mean(a, axis=axis, keepdims=keepdims)
        ### END SOLUTION


class Max(Function):
    """maximum of a over axis"""

    @staticmethod
    def forward(a, axis=None, keepdims=False):
        ### BEGIN SOLUTION
        return np.max(a, axis=axis, keepdims=keepdims)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_reductions", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_reductions():
    """sum/mean/max over axes, with keepdims, match NumPy and keep float32."""
    made = Tensor(np.ones(2, dtype=np.float32)).dtype
    assert made == np.float32, (
        f"Tensor(a float32 array) has dtype {made}: your Tensor constructor changes the dtype "
        "(see test_unit_tensor_creation). Fix the constructor first; this test's ops are not "
        "at fault"
    )

    def check_reductions(x, axes):
        """sum, mean and max of Tensor(x) over each of `axes`, with and without keepdims."""
        t = Tensor(x)
        calls = [(n, a, k) for n in ("sum", "mean", "max") for a in axes for k in (False, True)]
        for name, axis, keepdims in calls:
            got = getattr(t, name)(axis=axis, keepdims=keepdims)
            want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
            call = f"{name}(axis={axis}, keepdims={keepdims}) of shape {x.shape}"
            if got.shape != np.shape(want):
                flipped = np.shape(getattr(np, name)(x, axis=axis, keepdims=not keepdims))
                hint = ("keepdims was not passed through to NumPy" if got.shape == flipped else
                        f"the result is not reduced over axis={axis}: pass axis through to NumPy")
                raise AssertionError(
                    f"{call} has shape {got.shape}, expected {np.shape(want)}: {hint}")
            if not np.allclose(got.data, want):
                shown = np.round(np.ravel(got.data)[:4], 3), np.round(np.ravel(want)[:4], 3)
                hint = ""
                flat = np.ravel(got.data)
                ratio = np.ravel(want) / np.where(flat == 0, np.nan, flat)
                ratio = ratio[np.isfinite(ratio) & (np.ravel(want) != 0)]
                if name == "mean" and ratio.size and np.allclose(ratio, ratio[0]):
                    count = x.size // np.size(want)
                    hint = (f": your mean divides by {count * ratio[0]:g} instead of {count}, the "
                            f"number of elements along axis={axis}")
                raise AssertionError(
                    f"{call} starts {shown[0]}, expected {shown[1]} (NumPy){hint}")
            assert got.dtype == np.float32, f"{name} of float32 data gave {got.dtype}"

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5
    check_reductions(x, (None, 0, -1, (0, 2)))
    t = Tensor(x)
    assert t.sum().shape == (), "sum() with no axis reduces to a 0-d tensor"
    assert abs(t.mean().item() - float(x.mean())) < 1e-5, "mean() of everything is wrong"
    ### BEGIN HIDDEN TESTS
    rng = np.random.default_rng(404)
    hidden_cases(check_reductions, {
        "a vector": (rng.standard_normal(7).astype(np.float32), (None, 0, -1)),
        "four axes with a size-one axis": (
            rng.standard_normal((3, 1, 2, 5)).astype(np.float32), (1, (1, 3), (-1, -2), None)),
        "all values negative": (-rng.uniform(1, 9, (4, 6)).astype(np.float32), (0, 1, None)),
        "one row": (rng.standard_normal((1, 9)).astype(np.float32), (0, -1)),
    })
    ### END HIDDEN TESTS


test_unit_reductions()


# %% [markdown]
# ## Systems analysis: memory and vectorization, measured on your machine
#
# **Memory.** A tensor's memory is `size * itemsize`. The cell below measures it for a
# layer's weight matrix in float32 and float64: float64 doubles the memory and the bytes every
# operation has to move.

# %% nbgrader={"grade": false, "grade_id": "analysis-memory", "locked": false, "schema_version": 3, "solution": false, "task": false}
def memory_report(shape=(768, 3072)):
    w32 = Tensor(np.zeros(shape, dtype=np.float32))
    w64 = Tensor(np.zeros(shape), dtype=np.float64)
    print(f"weight {shape}: float32 {w32.data.nbytes / 2**20:.1f} MiB, "
          f"float64 {w64.data.nbytes / 2**20:.1f} MiB")
    view = w32.reshape(-1)
    print("reshape copies data:", not np.shares_memory(view.data, w32.data))


memory_report()

# %% [markdown]
# **Vectorization.** A matrix product written as three Python loops does the same
# arithmetic as `np.matmul`, but each multiply-add pays for the Python interpreter. Measure
# both on a small problem and compute the throughput in GFLOP/s (`2 * n**3` operations).

# %% [markdown]
# The course's **timing helper** is given below and exported with your `Tensor`, so every
# later lesson's systems analysis times code the same way (`from tinytorch.core.tensor import
# best_time`). It calls the function once untimed (the first call pays for allocating memory
# and warming caches), then times `repeat` runs and keeps the **fastest**: on a shared machine
# other programs can only make a run slower, never faster. A run repeats a very fast function
# until it lasts `min_time` seconds, because the clock cannot resolve a few microseconds.
# Module 14 (profiling) takes it apart: when the minimum is the right summary, and when the
# median is.

# %% nbgrader={"grade": false, "grade_id": "timing", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| exporti
import time


def time_runs(fn, repeat=5, warmup=1, min_time=0.0):
    """Seconds per call of fn(), one figure per timed run (after `warmup` untimed calls)."""
    for _ in range(warmup):
        fn()
    number = 1  # calls per run: enough for a run to last min_time seconds
    if min_time > 0:
        start = time.perf_counter()
        fn()
        number = max(1, int(min_time / max(time.perf_counter() - start, 1e-9)))
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number)
    return runs


def best_time(fn, repeat=5, warmup=1, min_time=0.0):
    """Seconds per call of fn(): the fastest of `repeat` timed runs (see time_runs)."""
    return min(time_runs(fn, repeat, warmup, min_time))


# %% [markdown]
# The course's **test helpers** are given as well, exported beside `best_time` (`from
# tinytorch.core.tensor import expect_close, expect_error, ...`). From module 02 on, a graded
# test is a table: each row is a case, what it should give, and the likely mistake when it
# does not. These helpers turn a row into an assertion whose message says what was expected,
# what came out and what to fix, so the tests stay short and the messages stay good:
#
# - `expect_close(what, got, want, fix)`: values (and shape) within a tolerance;
# - `expect_error(what, fn, kind, words, fix)`: `fn()` raises `kind` naming every word;
# - `no_fp_errors(what, fn, fix)`: `fn()` overflows nowhere and divides no 0 by 0;
# - `explain(what, check, fix)`: a generic check (module 06's `gradcheck`) with the fix added;
# - `float64_inputs(rng, *shapes)`: the float64 inputs a gradient check needs;
# - `short_repr(a)`: an array, short, for a message.

# %% nbgrader={"grade": false, "grade_id": "test-helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| exporti
def short_repr(a):
    """A short text for an array in a message: its values when small, else shape and dtype."""
    a = np.asarray(a)
    if a.size > 12:
        return f"an array of shape {a.shape} ({a.dtype})"
    if np.issubdtype(a.dtype, np.floating):
        return str(np.round(a.astype(np.float64), 6).tolist())
    return str(a.tolist())


def expect_close(what, got, want, fix, rtol=1e-6, atol=1e-7):
    """Assert that `got` equals `want` within rtol/atol (NaN where NaN is expected), shape
    included; the message names `what`, both values, the worst element and the `fix`."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what} has shape {got.shape}, expected {want.shape}: {fix}"
    if np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        return
    err = np.asarray(np.abs(got.astype(np.float64) - want.astype(np.float64)))  # 0-d too
    err[np.isnan(err) & ~(np.isnan(got) & np.isnan(want))] = np.inf
    err[np.isnan(err)] = 0.0
    worst = ""
    if got.size > 1:
        at = np.unravel_index(np.argmax(err), err.shape)
        worst = (f" (worst at index {tuple(map(int, at))}: {float(got[at]):.7g} instead of "
                 f"{float(want[at]):.7g})")
    raise AssertionError(
        f"{what} gave {short_repr(got)}, expected {short_repr(want)}{worst}: {fix}"
    )


def expect_error(what, fn, kind, words=(), fix=""):
    """fn() must raise `kind` with every string of `words` in its message; the error. Another
    exception (say a KeyError escaping where a ValueError should explain) fails with both
    named; NotImplementedError, an unwritten solution, passes through as it is."""
    try:
        fn()
    except kind as error:
        missing = [w for w in words if w not in str(error)]
        assert not missing, (
            f"{what} raised {kind.__name__}, but its message should mention {missing}: {error}"
        )
        return error
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - any other error is the mistake to report
        raise AssertionError(
            f"{what} raised {type(error).__name__} ({error}) instead of {kind.__name__}: {fix}"
        ) from None
    raise AssertionError(f"{what} must raise {kind.__name__}: {fix}")


def explain(what, check, fix):
    """Run check() (a gradcheck, say); an AssertionError from it is raised again with `what`
    in front and the likely `fix` after, so a generic check still teaches."""
    try:
        return check()
    except AssertionError as error:
        raise AssertionError(f"{what}: {str(error).rstrip('.')}. {fix}") from None


def float64_inputs(rng, *shapes):
    """Float64 Tensors that require grad, drawn N(0, 1) from `rng`, one per shape: the inputs
    a central-difference gradient check needs (float32 would drown the differences)."""
    made = [Tensor(rng.standard_normal(shape), dtype=np.float64, requires_grad=True)
            for shape in shapes]
    return made[0] if len(made) == 1 else made


def no_fp_errors(what, fn, fix):
    """fn() with NumPy's overflow, invalid-value (0/0, inf/inf) and divide-by-zero errors
    raised; one becomes an assertion naming `what` and the `fix`. Underflow to 0 is fine."""
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        try:
            return fn()
        except FloatingPointError as error:
            raise AssertionError(f"{what} raised '{error}': {fix}") from None


# %% nbgrader={"grade": false, "grade_id": "analysis-speed", "locked": false, "schema_version": 3, "solution": false, "task": false}
def loop_matmul(a, b):
    n, k = a.shape
    m = b.shape[1]
    out = np.zeros((n, m), dtype=np.float32)
    for i in range(n):
        for j in range(m):
            acc = 0.0
            for p in range(k):
                acc += a[i, p] * b[p, j]
            out[i, j] = acc
    return out


def vectorization_report(n=48):
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    start = time.perf_counter()
    slow = loop_matmul(a, a)
    loop_s = time.perf_counter() - start
    fast = (Tensor(a) @ Tensor(a)).data
    fast_s = best_time(lambda: Tensor(a) @ Tensor(a), min_time=0.002)
    assert np.allclose(slow, fast, atol=1e-3)
    flops = 2 * n**3
    print(f"{n}x{n} matmul: Python loops {loop_s * 1e3:.1f} ms "
          f"({flops / loop_s / 1e9:.4f} GFLOP/s), "
          f"Tensor @ {fast_s * 1e6:.1f} us ({flops / fast_s / 1e9:.2f} GFLOP/s): "
          f"{loop_s / fast_s:.0f}x faster")


vectorization_report()

# %% [markdown]
# On a two-core laptop-class machine the vectorized product is typically hundreds to
# thousands of times faster, and the gap grows with `n`: the loop is $O(n^3)$ interpreter
# steps, while BLAS keeps the arithmetic units busy with cache-friendly blocks.
#
# ## What comes next
#
# - **Module 02 (activations)** adds the non-linear functions (ReLU, GELU, softmax) as new
#   `Function`s, the same way you wrote `Exp`.
# - **Module 03 (layers)** builds `Linear` from your `@` and `+`.
# - **Module 06 (autograd)** gives every `Function` here a derivative and walks the records
#   of Part 2 backwards: `loss.backward()` will fill `.grad` on your tensors.
