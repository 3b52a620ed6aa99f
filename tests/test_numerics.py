"""The numerics guard, in-process: tolerances per dtype, array and checksum comparison."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.rules.numerics import (
    checksums_agree,
    compare_arrays,
    describe_mismatch,
    tolerance,
)

# --- tolerances per dtype ---------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "within", "beyond"), [
    ("float64", 1e-10, 1e-8),
    ("float32", 1e-5, 1e-3),
    ("float16", 5e-3, 2e-2),
    ("bfloat16", 1.5e-2, 3e-2),
    ("float8_e4m3fn", 1e-1, 2e-1),
    ("float8_e5m2", 2e-1, 3e-1),
    ("float8_e3m4", 5e-3, 2e-2),  # a float the table does not name: 1e-2
])
def test_each_float_dtype_allows_its_own_relative_error(dtype, within, beyond):
    assert within <= tolerance(dtype) < beyond


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "bool"])
def test_integers_and_bools_must_match_exactly(dtype):
    assert tolerance(dtype) == 0.0


def test_lower_precision_is_looser_precision_by_precision():
    order = ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
    assert [tolerance(d) for d in order] == sorted(tolerance(d) for d in order)


# --- comparing output arrays (PAIRED mode) ----------------------------------------------------


def test_float32_outputs_within_1e_4_pass_and_beyond_it_fail():
    base = np.array([1.0, -2.0, 4.0], dtype=np.float32)
    close = base + np.float32(4.0 * 5e-5)  # relative to the largest magnitude, 4.0
    far = base + np.float32(4.0 * 1e-3)
    ok = compare_arrays([close], [base])
    assert ok["ok"] is True and ok["dtype"] == "float32" and ok["tolerance"] == 1e-4
    assert ok["max_rel_error"] == pytest.approx(5e-5, rel=1e-2)
    bad = compare_arrays([far], [base])
    assert bad["ok"] is False and bad["max_rel_error"] == pytest.approx(1e-3, rel=1e-2)
    assert bad["leaf"] == 0


def test_the_error_is_relative_to_the_largest_magnitude_of_the_baseline():
    base = np.array([1000.0, 0.001], dtype=np.float32)
    cand = np.array([1000.0, 0.05], dtype=np.float32)  # 50x off on a tiny element
    result = compare_arrays([cand], [base])
    assert result["ok"] is True
    assert result["max_rel_error"] == pytest.approx(0.049 / 1000, rel=1e-3)


def test_a_negative_baseline_is_scaled_by_its_magnitude():
    base = np.array([-10.0, -20.0], dtype=np.float64)
    result = compare_arrays([base + 0.2], [base])
    assert result["max_rel_error"] == pytest.approx(0.01)  # 0.2 / 20, not 0.2 / -10


def test_an_all_zero_baseline_is_compared_absolutely():
    base = np.zeros(3, dtype=np.float32)
    assert compare_arrays([base + 1e-5], [base])["ok"] is True
    result = compare_arrays([base + 0.5], [base])
    assert result["ok"] is False and result["max_rel_error"] == pytest.approx(0.5)


def test_integer_outputs_must_match_exactly():
    base = np.array([1, 2, 3], dtype=np.int32)
    assert compare_arrays([base.copy()], [base])["ok"] is True
    result = compare_arrays([base + np.array([0, 0, 1], dtype=np.int32)], [base])
    assert result["ok"] is False and result["tolerance"] == 0.0 and result["dtype"] == "int32"


def test_the_worst_leaf_is_the_one_furthest_over_its_own_tolerance():
    exact = np.array([10, 20], dtype=np.int32)
    f16 = np.array([1.0, 2.0], dtype=np.float16)
    # leaf 0 is off by 5e-3 under a 1e-2 tolerance; leaf 1 by 5e-2 of its maximum, exact
    result = compare_arrays([f16 + np.float16(0.01), exact + 1], [f16, exact])
    assert result["ok"] is False and result["leaf"] == 1 and result["dtype"] == "int32"
    assert math.isinf(describe_excess(result))
    loose = compare_arrays([f16 + np.float16(0.01), exact], [f16, exact])
    assert loose["ok"] is True and loose["leaf"] == 0 and loose["dtype"] == "float16"


def describe_excess(result):
    """How far over its tolerance the reported leaf is (inf for an exact dtype)."""
    tol = result["tolerance"]
    return result["max_rel_error"] / tol if tol else math.inf


def test_one_bad_leaf_fails_the_comparison_even_when_another_is_worse_relative_to_nothing():
    good = np.array([1.0, 1.0], dtype=np.float32)
    bad = np.array([1.0, 2.0], dtype=np.float32)
    result = compare_arrays([good, bad + np.float32(0.5)], [good, bad])
    assert result["ok"] is False and result["leaf"] == 1
    assert result["max_rel_error"] == pytest.approx(0.25)


def test_a_shape_change_is_an_infinite_error():
    base = np.ones((2, 2), dtype=np.float32)
    result = compare_arrays([np.ones(4, dtype=np.float32)], [base])
    assert result["ok"] is False and math.isinf(result["max_rel_error"])
    assert result["tolerance"] == 0.0 and result["leaf"] == 0 and result["dtype"] == "float32"


def test_int8_extremes_are_compared_without_overflow():
    base = np.array([-128, 5], dtype=np.int8)  # |-128| does not fit an int8
    result = compare_arrays([np.array([-128, 6], dtype=np.int8)], [base])
    assert result["ok"] is False and result["max_rel_error"] == pytest.approx(1 / 128)


def test_the_worst_of_several_failing_leaves_is_the_furthest_over_its_tolerance():
    f32 = np.array([1.0], dtype=np.float32)
    f16 = np.array([1.0], dtype=np.float16)
    # float32 off by 1e-3 is 10x its tolerance; float16 off by 5e-2 only 5x
    result = compare_arrays([f32 + np.float32(1e-3), f16 + np.float16(0.05)], [f32, f16])
    assert result["ok"] is False and result["leaf"] == 0 and result["dtype"] == "float32"


def test_empty_leaves_and_no_leaves_agree():
    empty = np.zeros(0, dtype=np.float32)
    result = compare_arrays([empty], [empty])
    assert result["ok"] is True and result["max_rel_error"] == 0.0
    nothing = compare_arrays([], [])
    assert nothing == {"ok": True, "max_rel_error": 0.0, "tolerance": 0.0, "dtype": "",
                       "leaf": None}


def test_a_different_number_of_leaves_is_an_error_of_the_caller():
    one = np.ones(1, dtype=np.float32)
    with pytest.raises(ValueError):
        compare_arrays([one, one], [one])


def test_a_mismatch_is_described_with_its_leaf_dtype_error_and_tolerance():
    base = np.array([1.0, 2.0], dtype=np.float32)
    text = describe_mismatch(compare_arrays([base + np.float32(0.02)], [base]))
    assert text == ("output 0 (float32) differs from the baseline's by 0.01 relative, over the "
                    "0.0001 tolerance for float32: this configuration computes something else")


# --- comparing checksums of separate processes (DIRECT mode) ----------------------------------


def test_checksums_within_the_dtype_tolerance_of_the_absolute_sum_agree():
    # float32: 1e-4 of an absolute sum of 1000 allows a difference of 0.1
    assert checksums_agree(100.05, 100.0, abs_sum=1000.0, dtype="float32")
    assert checksums_agree(100.1, 100.0, abs_sum=1000.0, dtype="float32")
    assert not checksums_agree(100.2, 100.0, abs_sum=1000.0, dtype="float32")
    assert not checksums_agree(99.8, 100.0, abs_sum=1000.0, dtype="float32")


def test_checksums_that_disagree_are_caught_in_every_dtype():
    assert not checksums_agree(2.0, 1.0, abs_sum=1.0, dtype="bfloat16")
    assert not checksums_agree(11.0, 10.0, abs_sum=10.0, dtype="int32")
    assert not checksums_agree(1.0 + 1e-6, 1.0, abs_sum=1.0, dtype="float64")


def test_a_sum_that_cancels_to_zero_is_scaled_by_the_absolute_sum():
    # outputs +x and -x: the checksum is ~0 but the absolute sum is large
    assert checksums_agree(0.05, 0.0, abs_sum=1000.0, dtype="float32")
    assert not checksums_agree(0.5, 0.0, abs_sum=1000.0, dtype="float32")


def test_the_baseline_checksum_scales_when_the_absolute_sum_is_smaller():
    # abs_sum 0 (not recorded): the baseline's own magnitude scales the difference
    assert checksums_agree(1000.05, 1000.0, abs_sum=0.0, dtype="float32")
    assert not checksums_agree(1000.5, 1000.0, abs_sum=0.0, dtype="float32")
    assert checksums_agree(-1000.05, -1000.0, abs_sum=0.0, dtype="float32")


def test_integer_checksums_allow_only_rounding_of_the_sum():
    # exact dtypes keep a 1e-12 relative floor for float64 summation of many elements
    assert checksums_agree(1e6 + 1e-7, 1e6, abs_sum=1e6, dtype="int32")
    assert not checksums_agree(1e6 + 1.0, 1e6, abs_sum=1e6, dtype="int32")


def test_a_difference_exactly_at_the_tolerance_still_agrees():
    assert checksums_agree(2.0, 1.0, abs_sum=100.0, dtype="float16")  # 1e-2 * 100 == 1.0
    assert not checksums_agree(2.0 + 1e-9, 1.0, abs_sum=100.0, dtype="float16")


def test_outputs_that_are_all_zero_allow_float_noise_below_1e_30():
    assert checksums_agree(1e-36, 0.0, abs_sum=0.0, dtype="float32")  # 1e-4 * 1e-30
    assert not checksums_agree(1e-33, 0.0, abs_sum=0.0, dtype="float32")


def test_identical_zero_checksums_agree():
    assert checksums_agree(0.0, 0.0, abs_sum=0.0, dtype="float32")
    assert not checksums_agree(1e-20, 0.0, abs_sum=0.0, dtype="int32")
