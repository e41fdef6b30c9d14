"""segrt.compare gives what `segrt compare --json` prints for the same
arrays, with and without a class axis; NaN Dice as None."""
import json
import math

import numpy as np
import pytest

import segrt
from conftest import run_segrt


def cli_compare(tmp_path, a, b, *flags):
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    p = run_segrt("compare", tmp_path / "a.npy", tmp_path / "b.npy", "--json", *flags)
    return json.loads(p.stdout)


def same(x, y):
    if isinstance(x, str) or isinstance(y, str):  # JSON's "inf", "nan"
        return float(x) == float(y) or (math.isnan(float(x)) and math.isnan(float(y)))
    if x is None or y is None:
        return x is y
    return x == y or (math.isnan(x) and math.isnan(y))


@pytest.mark.parametrize("axis", [None, 1, -3])
def test_compare_is_the_cli(tmp_path, axis):
    rng = np.random.default_rng(5)
    b = rng.standard_normal((2, 4, 9, 7)).astype(np.float32)
    b[:, 3] = -100  # class 3 in neither label map: its Dice is NaN
    a = (b + 0.01 * rng.standard_normal(b.shape)).astype(np.float32)
    flags = [] if axis is None else ["--class-axis", str(axis)]
    want = cli_compare(tmp_path, a, b, *flags)
    got = segrt.compare(a, b, class_axis=axis)
    for k, v in want.items():
        if k in ("a", "b", "thresholds_met"):
            continue
        if k == "shape":
            assert list(got[k]) == v
        elif k == "dice":
            assert len(got[k]) == len(v) and all(same(x, y) for x, y in zip(got[k], v)), (got[k], v)
        else:
            assert same(got[k], v), (k, got[k], v)
    if axis is not None:
        assert got["dice"][3] is None


def test_compare_equal_and_errors(tmp_path):
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    got = segrt.compare(a, a.astype(np.float32))
    assert got["max_abs"] == 0 and got["psnr_db"] == math.inf and got["count"] == 12
    with pytest.raises(segrt.ShapeError, match="3x4"):
        segrt.compare(a, a.T)
    with pytest.raises(segrt.InvalidArgumentError, match="axis"):
        segrt.compare(a, a, class_axis=5)
