"""The oracle checks real backends with its own helpers (issue 7).

Each backend's disagreements with minifp8 are documented here as that backend's behaviour, with
an example, and asserted so that a change in the backend is noticed:

- ml_dtypes (0.5, 0.6) and PyTorch (2.13) convert float64 to float8 through float32, so inputs
  just off a rounding midpoint are rounded twice and land on the wrong side half of the time.
- ml_dtypes and PyTorch round float32 subnormals in (2**-127, 1.5 * 2**-127) up to E8M0 2**-126;
  2**-127 is nearer.
- PyTorch's E8M0 cast takes |x|, maps 0 to 2**-127 (0x00) and rounds values below 2**-127 to it;
  ml_dtypes and minifp8 map 0 and negative numbers to NaN (0xFF).
- PyTorch >= 2.13 saturates E4M3 casts (Inf and overflow -> +-448) and does not saturate E5M2
  and the FNUZ formats.
"""
import numpy as np
import pytest

from minifp8 import codec, formats, testing

from test_formats import ML_DTYPES_NAMES


def _inputs(name):
    structured = next(testing.sweep(kind="structured"))
    return np.concatenate([structured, next(testing.sweep(name, kind="edge"))])


def _float64_near_midpoints(name):
    fmt = formats.get(name)
    grid = np.unique(np.abs(fmt.values()[np.isfinite(fmt.values())]))
    midpoints = (grid[:-1] + grid[1:]) / 2
    return np.concatenate([midpoints * (1 - 2.0**-40), midpoints * (1 + 2.0**-40)])


E8M0_SUBNORMAL_QUIRK = (2.0**-127, 1.5 * 2.0**-127)


def _outside_e8m0_quirk(x):
    return ~((x > E8M0_SUBNORMAL_QUIRK[0]) & (x < E8M0_SUBNORMAL_QUIRK[1]))


# ---- ml_dtypes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ML_DTYPES_NAMES))
def test_ml_dtypes_matches_the_oracle_on_float32(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fmt = formats.get(name)
    x = _inputs(name)
    if not fmt.has_nan:
        x = x[np.isfinite(x)]  # ml_dtypes maps NaN to -0 and Inf to max in FP6/FP4; we reject NaN
    if name == "E8M0":
        x = x[_outside_e8m0_quirk(x)]
    with np.errstate(invalid="ignore", over="ignore"):
        theirs = x.astype(getattr(ml_dtypes, ML_DTYPES_NAMES[name]))
    testing.assert_codes_equal(theirs, x, name)  # exact NaN codes too


def test_ml_dtypes_e8m0_subnormal_quirk():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([np.nextafter(np.float32(2.0**-127), np.float32(1))], np.float32)  # 0x00400001
    report = testing.compare(x.astype(ml_dtypes.float8_e8m0fnu), x, "E8M0")
    assert report.count == 1 and report.mismatches[0].actual_code == 0x01 and report.mismatches[0].expected_code == 0x00


@pytest.mark.parametrize("name", ["E4M3", "E5M2"])
def test_ml_dtypes_double_rounds_float64(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = _float64_near_midpoints(name)
    report = testing.compare(x.astype(getattr(ml_dtypes, ML_DTYPES_NAMES[name])), x, name)
    assert report.count == len(x) // 2  # one of each pair m(1 - 2**-40), m(1 + 2**-40)
    # Every one is a near-tie, but for the midpoint between 0 and the smallest subnormal, which comes
    # back as zero and is reported as a (flushed) subnormal.
    assert report.by_class["near-tie"] == report.count - 1 and report.by_class["subnormal"] == 1
    float32_exact = x.astype(np.float32).astype(np.float64) == x
    assert not float32_exact.any()


# ---- PyTorch ------------------------------------------------------------------------------------
def _torch():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8 dtypes")
    return torch


TORCH_NAMES = {"E4M3": "float8_e4m3fn", "E5M2": "float8_e5m2", "E4M3FNUZ": "float8_e4m3fnuz",
               "E5M2FNUZ": "float8_e5m2fnuz"}


def _torch_codes(torch, x, name):
    dtype = getattr(torch, TORCH_NAMES.get(name, "float8_e8m0fnu"))
    return torch.from_numpy(np.ascontiguousarray(x)).to(dtype).view(torch.uint8).numpy()


@pytest.mark.parametrize("name", list(TORCH_NAMES))
def test_torch_float8_casts_match_the_oracle(name):
    torch = _torch()
    major_minor = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    saturate = name == "E4M3" and major_minor >= (2, 13)
    x = _inputs(name)
    testing.assert_codes_equal(_torch_codes(torch, x, name), x, name, saturate=saturate, nan="class")


@pytest.mark.parametrize("name", ["E4M3", "E5M2"])
def test_torch_double_rounds_float64(name):
    torch = _torch()
    x = _float64_near_midpoints(name)
    saturate = name == "E4M3"
    report = testing.compare(_torch_codes(torch, x, name), x, name, saturate=saturate, nan="class")
    assert report.count == len(x) // 2


def test_torch_e8m0_takes_magnitudes_and_maps_zero_to_the_smallest_scale():
    torch = _torch()
    if not hasattr(torch, "float8_e8m0fnu"):
        pytest.skip("this torch has no float8_e8m0fnu")
    x = np.array([1.5, 0.75, -1.0, 0.0, 2.0**-140, np.inf], np.float32)
    theirs = _torch_codes(torch, x, "E8M0")
    ours = codec.encode(x, "E8M0")
    assert ours.tolist() == [0x80, 0x7F, 0xFF, 0xFF, 0x00, 0xFF]
    assert theirs.tolist() == [0x80, 0x7F, 0x7F, 0x00, 0x00, 0xFF]
    positive = _inputs("E8M0")
    positive = positive[(positive > 0) & _outside_e8m0_quirk(positive)]
    testing.assert_codes_equal(_torch_codes(torch, positive, "E8M0"), positive, "E8M0", nan="class")
