"""The course's test helpers, given in module 01 (tinytorch.core.tensor) and used by the graded
tests of later lessons: each must fail on the mistake it is there to catch, and say so."""

from __future__ import annotations

import numpy as np
import pytest

from tinytorch.core.autograd import gradcheck
from tinytorch.core.tensor import (
    Tensor,
    expect_close,
    expect_error,
    explain,
    float64_inputs,
    no_fp_errors,
    short_repr,
)


@pytest.mark.parametrize("got, want, words", [
    ([1.0, 2.0], [1.0, 2.5], ["f(x) gave [1.0, 2.0], expected [1.0, 2.5]", "index (1,)", "fix"]),
    (np.float32(0.6), 1.02, ["gave 0.6, expected 1.02: fix"]),
    ([np.nan, 1.0], [0.0, 1.0], ["index (0,): nan instead of 0"]),
    ([1.0, 1.0], [np.nan, 1.0], ["expected [nan, 1.0]"]),
    ([[1.0, 2.0]], [1.0, 2.0], ["has shape (1, 2), expected (2,)"]),
])
def test_expect_close_names_both_values_and_the_fix(got, want, words):
    with pytest.raises(AssertionError) as info:
        expect_close("f(x)", got, want, "fix")
    assert all(w in str(info.value) for w in words), str(info.value)


def test_expect_close_passes_within_tolerance_and_on_matching_nan():
    expect_close("f", [1.0, np.nan], [1.0 + 1e-8, np.nan], "fix")
    expect_close("f", np.zeros((3, 4)), np.zeros((3, 4)), "fix")
    with pytest.raises(AssertionError, match="an array of shape \\(3, 5\\)"):
        expect_close("f", np.ones((3, 5)), np.zeros((3, 5)), "fix")


def test_expect_error_checks_the_kind_the_words_and_that_it_raised():
    def bad_key():
        return {}["x"]

    def value_error():
        raise ValueError("shape (3,) against (4,)")

    assert isinstance(expect_error("g", value_error, ValueError, ["(3,)"], "fix"), ValueError)
    with pytest.raises(AssertionError, match="should mention \\['\\(5,\\)'\\]"):
        expect_error("g", value_error, ValueError, ["(5,)"], "fix")
    with pytest.raises(AssertionError, match="raised KeyError .* instead of ValueError: fix"):
        expect_error("g", bad_key, ValueError, [], "fix")
    with pytest.raises(AssertionError, match="g must raise ValueError: fix"):
        expect_error("g", lambda: None, ValueError, [], "fix")
    with pytest.raises(NotImplementedError):  # an unwritten solution is not hidden
        expect_error("g", lambda: (_ for _ in ()).throw(NotImplementedError()), ValueError)


def test_no_fp_errors_turns_overflow_and_nan_into_a_message_but_allows_underflow():
    with pytest.raises(AssertionError, match="exp\\(1000\\) raised 'overflow.*: fix"):
        no_fp_errors("exp(1000)", lambda: np.exp(np.float32(1000.0)), "fix")
    with pytest.raises(AssertionError, match="invalid"):
        no_fp_errors("0/0", lambda: np.zeros(1) / np.zeros(1), "fix")
    assert no_fp_errors("exp(-1000)", lambda: np.exp(np.float32(-1000.0)), "fix") == 0.0


def test_explain_adds_the_fix_to_a_failed_gradcheck():
    x = float64_inputs(np.random.default_rng(0), (3,))
    assert x.dtype == np.float64 and x.requires_grad
    a, b = float64_inputs(np.random.default_rng(0), (2, 3), (3,))
    assert a.shape == (2, 3) and b.shape == (3,)
    explain("x * x", lambda: gradcheck(lambda t: t * t, [x]), "fix")  # a right rule passes
    wrong = lambda t: t * t.detach() + t.detach() * t.detach()  # noqa: E731  (d/dx is x, not 2x)
    with pytest.raises(AssertionError, match="x \\* x: gradcheck: input 0.*\\. the product rule"):
        explain("x * x", lambda: gradcheck(wrong, [x]), "the product rule")


def test_short_repr_is_short():
    assert short_repr(np.float32(0.1)) == "0.1"
    assert short_repr([[1, 2], [3, 4]]) == "[[1, 2], [3, 4]]"
    assert short_repr(Tensor(np.zeros((4, 4))).data) == "an array of shape (4, 4) (float32)"
