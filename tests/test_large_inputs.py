"""The oracle on big tensors: memory that stays a few bytes per element, and slices that agree.

A backend calls `testing.compare` and `testing.compare_mx` on real activations (2**24 elements
and more). The peak of the memory NumPy allocates is measured with tracemalloc (NumPy reports its
allocations to it) in bytes per input element. They once took 106 to 171 bytes per element on
the float64 paths: 9 GiB for an 8192x8192 tensor, for `compare_mx` even when every code matched.
"""
import tracemalloc

import numpy as np
import pytest

from minifp8 import codec, formats, mx, testing

SIZE = 1 << 20
SMALL_SLICE = 1 << 14  # the float64 work done this many elements at a time: its temporaries stay small


@pytest.fixture
def small_slices(monkeypatch):
    monkeypatch.setattr(testing, "_SLICE_ELEMENTS", SMALL_SLICE)
    monkeypatch.setattr(codec, "_EXACT_SLICE_ELEMENTS", SMALL_SLICE)


def peak_bytes_per_element(call, elements: int) -> float:
    """The peak of traced allocations while ``call()`` runs, per element, over what was live before."""
    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc is already tracing (python -X tracemalloc): the peak would not be this call's")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return (peak - before) / elements


@pytest.fixture(scope="module")
def activations():
    """float32 (256, 4096): values of both signs over a few binades, E4M3's tables built."""
    x = np.random.default_rng(5).standard_normal((SIZE // 4096, 4096), dtype=np.float32) * 3
    codec.encode(x[:1], "E4M3")  # (the 2**16-entry lookup tables are built once, and cached)
    return x


# ---- memory ------------------------------------------------------------------------------------
def test_compare_with_every_code_wrong_stays_within_40_bytes_an_element(activations, small_slices):
    expected = codec.encode(activations, "E4M3")
    wrong = expected ^ np.uint8(1)  # the last mantissa bit flipped: every element differs
    reports = []
    peak = peak_bytes_per_element(lambda: reports.append(testing.compare(wrong, activations, "E4M3")), SIZE)
    report = reports[0]
    assert report.count == SIZE and sum(report.by_class.values()) == SIZE
    assert len(report.mismatches) == 20 and str(report).endswith(f"... and {SIZE - 20} more")
    assert peak < 40, peak


@pytest.mark.parametrize("case", ["float64", "stochastic"])
def test_compare_on_the_exact_float64_path_stays_within_40_bytes_an_element(activations, small_slices, case):
    options = {}
    x = activations
    if case == "float64":
        x = activations.astype(np.float64) * (1 + 2.0**-30)  # not float32 values: the exact path, not a table
    else:
        options = {"rounding": "stochastic", "random_bits": np.random.default_rng(6).integers(
            0, 256, x.shape, dtype=np.uint8)}
    codes = codec.encode(x, "E4M3", **options)
    reports = []
    peak = peak_bytes_per_element(lambda: reports.append(testing.compare(codes, x, "E4M3", **options)), SIZE)
    assert reports[0].ok and reports[0].total == SIZE
    assert peak < 40, peak


@pytest.mark.parametrize("case, bound", [("float64", 6), ("stochastic", 14)])
def test_codec_encode_on_the_exact_float64_path_takes_a_slice_at_a_time(activations, small_slices, case, bound):
    # the codes (1 byte an element) and, for stochastic rounding, the float64 copy of x (8); the
    # exact path's ~100 bytes an element only for a slice at a time. (The random bits were copied
    # whole as int64, 8 bytes an element more: found in a review.)
    if case == "float64":
        x = activations.astype(np.float64) * (1 + 2.0**-30)  # (made outside the measured call)
        call = lambda: codec.encode(x, "E4M3")  # noqa: E731
    else:
        bits = np.random.default_rng(7).integers(0, 256, activations.shape, dtype=np.uint8)
        call = lambda: codec.encode(activations, "E4M3", rounding="stochastic", random_bits=bits)  # noqa: E731
    assert peak_bytes_per_element(call, SIZE) < bound


@pytest.mark.parametrize("elem", ["MXFP8_E4M3", "NVFP4"])
def test_compare_mx_of_matching_codes_stays_within_24_bytes_an_element(activations, small_slices, elem):
    expected = mx.quantize_nvfp4(activations) if elem == "NVFP4" else mx.quantize(activations, elem)
    reports = []
    peak = peak_bytes_per_element(
        lambda: reports.append(testing.compare_mx(expected.scales, expected.codes, activations, elem)), SIZE)
    assert reports[0].ok and reports[0].elements.total == SIZE
    assert peak < 24, peak


def test_compare_mx_with_every_code_wrong_stays_within_96_bytes_an_element(activations, small_slices):
    expected = mx.quantize(activations, "MXFP8_E4M3")
    reports = []
    peak = peak_bytes_per_element(lambda: reports.append(testing.compare_mx(
        expected.scales, expected.codes ^ np.uint8(1), activations, "MXFP8_E4M3")), SIZE)
    assert reports[0].scale_count == 0 and reports[0].elements.count == SIZE
    assert peak < 96, peak


def test_an_exhaustive_sweep_batch_takes_4_bytes_an_element_and_holds_the_right_bits():
    batches = testing.sweep(kind="exhaustive", batch_size=SIZE)
    peak = peak_bytes_per_element(lambda: next(batches), SIZE)
    assert peak < 6, peak  # the batch itself: 4 bytes (a uint64 arange first took 12)
    second = next(batches)
    assert second.dtype == np.float32
    assert np.array_equal(second.view(np.uint32), SIZE + np.arange(SIZE, dtype=np.uint64))


# ---- the slices agree with the scalar definition -------------------------------------------------
def scalar_codes(x, fmt, **options):
    """The codes of `codec.encode_scalar`, the definition in exact rational arithmetic."""
    bits = options.pop("random_bits", None)
    return np.array([codec.encode_scalar(float(v), fmt, random_bits=None if bits is None else int(b),
                                         **options) for v, b in zip(x, bits if bits is not None else x)], np.uint8)


@pytest.mark.parametrize("rounding", codec.ROUNDING_MODES)
def test_encode_in_slices_of_16_equals_the_scalar_definition_at_every_size_around_a_slice(rounding, monkeypatch):
    """A mutation audit's gap: the exact path's slices were tested at 600 elements (a last slice of 8)
    and 2**20 (no partial slice), so a loop that dropped a last slice of one element (its codes left
    as np.empty's) passed. Float64 values that float32 cannot hold, and midpoints of E4M3 plus and
    minus 2**-40, at sizes from 1 to 49 in slices of 16, against `codec.encode_scalar`."""
    monkeypatch.setattr(codec, "_EXACT_SLICE_ELEMENTS", 16)
    rng = np.random.default_rng(9)
    values = codec.decode(np.arange(0x7E, dtype=np.uint8), "E4M3").astype(np.float64)
    midpoints = (values[1:] + values[:-1]) / 2
    for size in (1, 15, 16, 17, 31, 32, 33, 48, 49):
        x = rng.standard_normal(size) * 2.0 ** rng.integers(-12, 9, size) + 2.0**-40  # (not float32 values)
        x[::3] = rng.choice(midpoints, x[::3].size) + rng.choice([-2.0**-40, 2.0**-40], x[::3].size)
        options = {"rounding": rounding, "saturate": True}
        if rounding == "stochastic":
            options.update(random_bits=rng.integers(0, 2**16, size, dtype=np.uint32), random_bit_count=16)
        np.testing.assert_array_equal(codec.encode(x, "E4M3", **options), scalar_codes(x, formats.E4M3, **options),
                                      err_msg=f"size {size}")


@pytest.mark.parametrize("mismatches", [1, 4, 5, 9, 17])
def test_compare_in_slices_classes_every_mismatch_at_every_count_around_a_slice(mismatches, monkeypatch):
    """A mutation audit's gap: the slices were tested with 60 mismatches in slices of 16 (a last slice of
    12), so a loop that left a last slice of one mismatch unclassified (a sign bug shown as another
    class) passed. Every code's sign flipped: every mismatch is "sign", in slices of 4."""
    monkeypatch.setattr(testing, "_SLICE_ELEMENTS", 4)
    x = np.linspace(1.0, 2.0, mismatches, dtype=np.float32) * np.float32(1.0625)
    flipped = codec.encode(x, "E4M3") ^ np.uint8(0x80)
    report = testing.compare(flipped, x, "E4M3", max_rows=100)
    assert report.by_class == {**{kind: 0 for kind in testing.MISMATCH_CLASSES}, "sign": mismatches}
    assert [row.kind for row in report.mismatches] == ["sign"] * mismatches


def test_compare_in_slices_finds_exactly_the_wrong_codes_with_each_elements_own_random_bits(monkeypatch):
    monkeypatch.setattr(testing, "_SLICE_ELEMENTS", 16)
    monkeypatch.setattr(codec, "_EXACT_SLICE_ELEMENTS", 16)
    rng = np.random.default_rng(8)
    x = rng.standard_normal(600) * 2.0 ** rng.integers(-12, 9, 600)  # float64, subnormals to overflow
    bits = rng.integers(0, 256, 600, dtype=np.uint8)
    options = {"rounding": "stochastic", "saturate": True, "random_bits": bits, "random_bit_count": 8}
    truth = scalar_codes(x, formats.E4M3, rounding="stochastic", saturate=True, random_bits=bits, random_bit_count=8)
    wrong_at = np.sort(rng.choice(600, 60, replace=False))
    actual = truth.copy()  # wrong in several ways: a neighbour, the sign, NaN, zero (not where truth is 0)
    actual[wrong_at] = np.choose(rng.integers(0, 4, 60), [truth[wrong_at] ^ 1, truth[wrong_at] ^ 0x80,
                                                          np.full(60, 0x7F), np.where(truth[wrong_at] & 0x7F, 0, 1)])
    report = testing.compare(actual, x, "E4M3", max_rows=100, **options)
    assert report.count == 60
    assert [row.index[0] for row in report.mismatches] == wrong_at.tolist()
    assert [row.expected_code for row in report.mismatches] == truth[wrong_at].tolist()
    kinds = []
    for row, i in zip(report.mismatches, wrong_at):  # each class as the element's own one-element report
        alone = testing.compare(actual[i:i + 1], x[i:i + 1], "E4M3", **{**options, "random_bits": bits[i:i + 1]})
        kinds.append(alone.mismatches[0].kind)
    assert [row.kind for row in report.mismatches] == kinds
    assert report.by_class == {kind: kinds.count(kind) for kind in testing.MISMATCH_CLASSES}
    assert len(set(kinds)) >= 4  # (the classes differ from one element to the next)


def test_compare_mx_counts_every_compared_element_and_finds_exactly_the_wrong_codes():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((12, 80)) * 2.0 ** rng.integers(-20, 20, (12, 1))).astype(np.float32)
    x[4, 40] = np.nan  # the block of columns 32..63 in row 4 gets the NaN scale: its codes are not compared
    expected = mx.quantize(x, "MXFP8_E4M3")
    wrong = np.zeros(x.shape, bool)
    wrong[rng.integers(0, 12, 30), rng.integers(0, 80, 30)] = True
    actual = np.where(wrong, expected.codes ^ np.uint8(1), expected.codes).astype(np.uint8)
    report = testing.compare_mx(expected.scales, actual, x, "MXFP8_E4M3", max_rows=100)
    compared = np.ones(x.shape, bool)
    compared[4, 32:64] = False
    assert report.scale_count == 0
    assert report.elements.total == compared.sum() == x.size - 32
    assert report.elements.count == (wrong & compared).sum()
    rows = [row.index for row in report.elements.mismatches]
    assert rows == [tuple(map(int, i)) for i in np.argwhere(wrong & compared)]


# ---- other layouts -----------------------------------------------------------------------------
def test_compare_of_a_transposed_tensor_gathers_only_the_mismatches(activations):
    """`codec.encode` lays out the codes of a transposed x as x is; `compare` once flattened x, the
    expected codes and the actual codes in C order, copying each whole (5 bytes an element more than
    for a C-order x). It now gathers only the differing elements, and reports what it reports for
    C copies."""
    x = activations.T  # (4096, 256), Fortran order
    actual = np.ascontiguousarray(codec.encode(x, "E4M3"))
    actual.reshape(-1)[::997] ^= np.uint8(1)
    peak = peak_bytes_per_element(lambda: testing.compare(actual, x, "E4M3"), SIZE)
    x_copy = np.ascontiguousarray(x)
    c_order_peak = peak_bytes_per_element(lambda: testing.compare(actual, x_copy, "E4M3"), SIZE)
    assert peak < c_order_peak + 2, (peak, c_order_peak)  # (+1: the mask's C-order copy, for flatnonzero)
    for actual_view in (actual, np.asfortranarray(actual)):
        report, copies = testing.compare(actual_view, x, "E4M3"), testing.compare(actual, x_copy, "E4M3")
        assert report.count == copies.count == len(range(0, SIZE, 997)) and report.by_class == copies.by_class
        assert report.mismatches == copies.mismatches  # the same rows: C-order indices, inputs, codes and classes


def test_shared_exponents_and_gemm_dequantize_give_a_transposed_view_what_they_give_its_copy():
    rng = np.random.default_rng(46)
    amax = np.abs(rng.standard_normal((64, 48))).astype(np.float32) * np.float32(2.0) ** rng.integers(-20, 20, (64, 48))
    amax[0, :3] = [0, np.inf, np.nan]
    for mode in mx.SCALE_MODES:
        for got, want in zip(mx.shared_exponents(amax.T, "E4M3", mode),
                             mx.shared_exponents(np.ascontiguousarray(amax.T), "E4M3", mode)):
            np.testing.assert_array_equal(got, want)
    from minifp8 import gemm
    codes = rng.integers(0, 256, (128, 64), dtype=np.uint8)
    scales = rng.standard_normal((2, 4)).astype(np.float32)
    for view, view_scales in ((codes.T, scales.T), (np.asfortranarray(codes), scales)):
        np.testing.assert_array_equal(gemm.dequantize(view, view_scales, "E4M3"),
                                      gemm.dequantize(np.ascontiguousarray(view), view_scales, "E4M3"))


@pytest.mark.parametrize("shape, block_shape, axis", [((SIZE, 1), (1, 128), -1), ((SIZE // 4, 4), (128, 128), 0)])
def test_quantize_blockwise_of_an_axis_shorter_than_a_tile_pads_nothing(shape, block_shape, axis):
    """Found in a review: a (2**20, 1) array in 1x128 tiles was padded to 128 times its size (about
    1 GB at the peak, 260 bytes an element); a tile longer than its axis is now one of the axis'
    length, with the same scales. The rest of the cast takes about 25 bytes an element."""
    from minifp8 import scaling

    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    assert peak_bytes_per_element(lambda: scaling.quantize_blockwise(x, block_shape=block_shape, axis=axis),
                                  x.size) <= 40
    # (a later review's find: dequantize still repeated each scale over a whole tile, then cut it: 520 bytes
    # an element for (2**20, 1); about 12 now: the float32 result, its factors and the decoded codes)
    quantized = scaling.quantize_blockwise(x, block_shape=block_shape, axis=axis)
    assert peak_bytes_per_element(quantized.dequantize, x.size) <= 24
    small = x[:1000]  # the amax of the zero-padded tiling, computed here by hand
    scaled = scaling.quantize_blockwise(small, block_shape=block_shape, axis=axis)
    moved, (rows, columns) = np.moveaxis(small, axis, -1), block_shape
    padded = np.abs(np.pad(moved, [(0, -moved.shape[0] % rows), (0, -moved.shape[1] % columns)]))
    expected = padded.reshape(padded.shape[0] // rows, rows, -1, columns).max(axis=(1, 3))
    np.testing.assert_array_equal(np.moveaxis(scaled.amax, axis, -1), expected)
