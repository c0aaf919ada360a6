"""Hostile inputs to the codec and MX API: block sizes longer than the axis, non-str
modes, and non-native views checked against the exact scalar definitions."""
import numpy as np
import pytest

from minifp8 import codec, formats, mx, testing


def reference_dequantized_rows(x: np.ndarray, elem: str, scale_mode: str) -> np.ndarray:
    """Each row of 2-d ``x`` as one block, by `mx.quantize_block_reference` (exact Fractions) and the
    decode table: element value times ``2**(scale - 127)``."""
    fmt = formats.get(elem)
    rows = []
    for row in x:
        scale, codes = mx.quantize_block_reference(row, elem, scale_mode=scale_mode)
        rows.append(fmt.values()[codes] * 2.0 ** (scale - 127))
    return np.array(rows)


@pytest.mark.parametrize("block_size", [2**16, 2**40])
@pytest.mark.parametrize("elem, scale_mode", [("E2M1", "floor"), ("E4M3", "rceil"), ("E3M2", "even")])
def test_a_block_size_longer_than_the_axis_is_one_block_per_row_without_padding_it_out(block_size, elem,
                                                                                       scale_mode):
    # Rows were zero-padded to the full block: block_size=2**40 asked for 8 TiB (MemoryError), and
    # 2**16 on a (2000, 3) array took 12 s and 1.5 GB, one row per chunk. Zeros change no amax, so
    # a row shorter than the block is the block.
    x = np.random.default_rng(35).standard_normal((6, 3)).astype(np.float32) * np.float32(2.0**-20)
    expected = reference_dequantized_rows(x, elem, scale_mode)
    for axis, data in ((-1, x), (0, x.T)):
        q = mx.quantize(data, elem, block_size=block_size, axis=axis, scale_mode=scale_mode)
        assert q.scales.shape == ((6, 1) if axis == -1 else (1, 6)) and q.codes.shape == data.shape
        values = q.dequantize() if axis == -1 else q.dequantize().T
        np.testing.assert_array_equal(values, expected.astype(np.float32))
    bits = np.random.default_rng(1).integers(0, 256, x.shape, dtype=np.uint8)
    stochastic = mx.quantize(x, elem, block_size=block_size, rounding="stochastic", random_bits=bits)
    for row, row_bits, scale, codes in zip(x, bits, stochastic.scales[:, 0], stochastic.codes):
        assert (int(scale), codes.tolist()) == mx.quantize_block_reference(
            row, elem, rounding="stochastic", random_bits=row_bits.tolist(), random_bit_count=8)


def test_nvfp4_axis_shorter_than_its_block_is_unchanged():
    # The same layout change serves NVFP4's 16-element blocks: a 5-long axis equals the axis padded
    # to 16 by hand (padding zeros change no amax and their codes are dropped).
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    padded = np.concatenate([x, np.zeros((4, 11), np.float32)], axis=1)
    short, full = mx.quantize_nvfp4(x), mx.quantize_nvfp4(padded)
    np.testing.assert_array_equal(short.scales, full.scales)
    np.testing.assert_array_equal(short.codes, full.codes[:, :5])
    np.testing.assert_array_equal(short.dequantize(), full.dequantize()[:, :5])


@pytest.mark.parametrize("scale_mode", [None, 1, np.array(["floor"]), np.array(["floor", "ceil"]), ["floor"]])
@pytest.mark.parametrize("call", [
    lambda mode: mx.quantize(np.ones(4, np.float32), "E4M3", scale_mode=mode),
    lambda mode: mx.shared_exponents(np.ones(4, np.float32), "E4M3", mode),
    lambda mode: mx.quantize_block_reference([1.0], "E4M3", scale_mode=mode),
])
def test_a_scale_mode_that_is_not_a_str_is_a_type_error_naming_it(call, scale_mode):
    # np.array(["floor"]) was taken as "floor" (``in`` compares elementwise), a longer array raised
    # NumPy's "truth value of an array is ambiguous", and None a ValueError.
    with pytest.raises(TypeError, match=r"^scale_mode must be a str, one of floor, ceil, even, rceil; got "):
        call(scale_mode)


@pytest.mark.parametrize("nan_style", [np.array(["ieee"]), np.array(["ieee", "none"]), None])
def test_a_nan_style_that_is_not_a_str_is_a_type_error_naming_it(nan_style):
    with pytest.raises(TypeError, match="^nan_style must be a str"):
        formats.FloatFormat("X", 5, 2, 15, has_infinity=True, nan_style=nan_style)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2", "E2M1", "E8M0", "E4M3FNUZ"])
def test_non_native_byte_order_read_only_and_strided_inputs_encode_as_the_scalar_definition(fmt):
    values = np.array([0.0, -0.0, 1.0, -3.3, 300.0, 464.0, 1e-3, 2.0**-10, 6e4, np.inf, -np.inf, np.nan])
    if not formats.get(fmt).has_nan:
        values = values[~np.isnan(values)]
    for dtype in (">f2", ">f4", ">f8", "<f4"):
        typed = np.repeat(values.astype(dtype), 2)[::2]  # non-contiguous
        typed.flags.writeable = False
        expected = [codec.encode_scalar(float(v), fmt) for v in typed]
        assert codec.encode(typed, fmt).tolist() == expected, dtype
        np.testing.assert_array_equal(codec.quantize(typed, fmt), codec.decode(np.array(expected, ">u2"), fmt))
    integers = np.array([0, 3, -7, 500, 2**20], ">i8")
    assert codec.encode(integers, fmt).tolist() == [codec.encode_scalar(int(v), fmt) for v in integers]


def layouts(array: np.ndarray) -> dict:
    """Views of the same values as a 3-d ``array``, laid out otherwise in memory: each is encoded
    in the order its elements lie (`codec._memory_order`), then transposed back."""
    flipped = array[::-1, :, ::-1]
    return {"C": array, "transposed": array.T, "Fortran": np.asfortranarray(array),
            "axes permuted": array.transpose(1, 2, 0), "negative strides, transposed": flipped.transpose(2, 0, 1),
            "a transposed slice": array[:, 1:, ::2].transpose(0, 2, 1), "2-d transposed": array[0].T}


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2", "E2M1", "E8M0"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_memory_layout_encodes_and_decodes_as_the_scalar_definition_element_by_element(fmt, dtype):
    values = np.array([0.0, -0.0, 1.0, -3.3, 300.0, 464.0, 1e-3, 2.0**-10, 6e4, np.inf, -np.inf, 0.3])
    if formats.get(fmt).has_nan:
        values[-1] = np.nan
    array = np.resize(values, (3, 4, 5)).astype(dtype) * np.arange(1, 61).reshape(3, 4, 5) ** 2
    for name, view in layouts(array).items():
        codes = codec.encode(view, fmt)
        expected = np.array([codec.encode_scalar(float(value), fmt) for value in view.flat]).reshape(view.shape)
        np.testing.assert_array_equal(codes, expected, err_msg=name)  # (and the shape)
    table = formats.get(fmt).values().astype(np.float32)
    for name, view in layouts(codec.encode(array, fmt)).items():
        np.testing.assert_array_equal(codec.decode(view, fmt), table[view], err_msg=name)


def test_stochastic_random_bits_follow_their_elements_whatever_the_layouts_of_both():
    rng = np.random.default_rng(46)
    for x_name, x_view in layouts(rng.standard_normal((4, 6, 8)) * 100).items():
        bits = rng.integers(0, 256, x_view.shape, dtype=np.uint8)
        for bits_name, bits_view in (("C", bits), ("Fortran", np.asfortranarray(bits)),
                                     ("reversed", np.ascontiguousarray(bits[::-1])[::-1])):
            codes = codec.encode(x_view, "E4M3", rounding="stochastic", random_bits=bits_view)
            expected = [codec.encode_scalar(float(value), "E4M3", rounding="stochastic", random_bits=int(bit),
                                            random_bit_count=8) for value, bit in zip(x_view.flat, bits_view.flat)]
            assert codes.reshape(-1).tolist() == expected, (x_name, bits_name)


def test_decode_says_how_to_read_codes_held_as_ml_dtypes_floats_or_int8_bytes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([1.0, -2.0, 448.0], dtype=ml_dtypes.float8_e4m3fn)
    with pytest.raises(TypeError, match=r"codes\.view\(np\.uint8\)"):
        codec.decode(values, "E4M3")
    assert codec.decode(values.view(np.uint8), "E4M3").tolist() == [1.0, -2.0, 448.0]
    signed = values.view(np.int8)  # -2.0 is 0xC0, -64 as a signed byte
    with pytest.raises(ValueError, match=r"^E4M3 codes lie in \[0, 256\), got values in \[-64, 126\] "
                                         r"\(int8 bytes: codes\.view\(np\.uint8\) reads them as codes\)$"):
        codec.decode(signed, "E4M3")
    assert codec.decode(signed.view(np.uint8), "E4M3").tolist() == [1.0, -2.0, 448.0]
    # the hint is for int8 bytes of an 8-bit format only: a wider integer's -64 is not a byte, and
    # a 4-bit format's code never needs a byte's sign bit
    for codes, fmt, expected in (
            (signed.astype(np.int64), "E4M3", r"^E4M3 codes lie in \[0, 256\), got values in \[-64, 126\]$"),
            (signed.astype(np.int16), "E5M2", r"^E5M2 codes lie in \[0, 256\), got values in \[-64, 126\]$"),
            (np.array([-1, 3], np.int8), "E2M1", r"^E2M1 codes lie in \[0, 16\), got values in \[-1, 3\]$")):
        with pytest.raises(ValueError, match=expected):
            codec.decode(codes, fmt)


@pytest.mark.parametrize("make_view", [lambda x: x.T, lambda x: np.asfortranarray(x), lambda x: x.astype(">f4"),
                                       lambda x: x.reshape(2, 3, 8).transpose(2, 0, 1)],
                         ids=["transposed", "Fortran", "big-endian", "3-d, axes permuted"])
def test_a_float32_view_or_big_endian_copy_takes_the_table_without_a_copy(monkeypatch, make_view):
    # A big-endian float32 array is not np.float32 to NumPy's ==, so it took the exact float64 path,
    # 15 times slower; a transposed view was copied to C order first, twice as slow (bench codec).
    # Here the table must receive each element where it lies (or, big-endian, one swapped copy).
    view = make_view(np.arange(-24, 24, dtype=np.float32).reshape(6, 8) / 8)
    received = []
    table_encode = codec._encode_float32_by_table
    monkeypatch.setattr(codec, "_encode_float32_by_table",
                        lambda x, *rest: received.append(x) or table_encode(x, *rest))
    monkeypatch.setattr(codec, "_encode_exact_in_slices", None)  # (calling it fails)
    codes = codec.encode(view, "E4M3")
    assert len(received) == 1 and received[0].flags.c_contiguous and received[0].dtype == np.float32
    if view.dtype.isnative:
        assert np.shares_memory(received[0], view)
    np.testing.assert_array_equal(codes, codec.encode(np.ascontiguousarray(view, np.float32), "E4M3"))


def test_an_mx_element_format_is_recognised_by_its_fields_not_its_name():
    # A format named "E2M1" with E3M0's fields was taken for E2M1 (found by a code review):
    # 300 became 256 without a word.
    impostor = formats.FloatFormat("E2M1", 3, 0, 1, nan_style="none")
    for call in (lambda: mx.quantize(np.array([1.0, 300.0]), impostor),
                 lambda: mx.MXFormat("MXFP4_E2M1", impostor, 32),
                 lambda: mx.quantize_block_reference([1.0], impostor)):
        with pytest.raises(ValueError, match=r"MX elements must be one of .* got FloatFormat\(E2M1: E3M0, bias 1, no NaN\), "
                                             r"whose fields are not MX's E2M1$"):
            call()
    twin = formats.FloatFormat("E2M1", 2, 1, 1, nan_style="none")  # the same fields: the same format
    np.testing.assert_array_equal(mx.quantize(np.array([1.0, 300.0]), twin).codes,
                                  mx.quantize(np.array([1.0, 300.0]), "E2M1").codes)


@pytest.mark.parametrize("block", [[], [float("nan"), 1.0], [float("inf"), 1.0]], ids=["empty", "NaN", "Inf"])
@pytest.mark.parametrize("options, error, message", [
    ({"rounding": "bogus"}, ValueError, "unknown rounding mode 'bogus'"),
    ({"rounding": "stochastic"}, ValueError, "rounding='stochastic' needs random_bits"),
    ({"random_bits": "BITS"}, ValueError, "random_bits is only used with rounding='stochastic'"),
    ({"rounding": "stochastic", "random_bits": "BITS"}, ValueError, "needs random_bits and random_bit_count"),
    ({"rounding": "stochastic", "random_bits": "BITS", "random_bit_count": 0}, ValueError, "random_bit_count must"),
])
def test_the_block_reference_checks_its_rounding_arguments_whatever_the_block_holds(block, options, error, message):
    # They were checked by encode_scalar, element by element, so a block that encodes no element (an
    # empty one, or one whose NaN, or Inf under floor, makes the whole block NaN) took any of them.
    options = {key: [1] * len(block) if value == "BITS" else value for key, value in options.items()}
    with pytest.raises(error, match=message):
        mx.quantize_block_reference(block, "E4M3", **options)
    if block:  # (an empty block has no bits to be out of range)
        with pytest.raises(ValueError, match=r"random_bits must lie in \[0, 2\*\*8\), got 256"):
            mx.quantize_block_reference(block, "E4M3", rounding="stochastic", random_bits=[256] * len(block),
                                        random_bit_count=8)


def test_the_block_reference_takes_numpy_scalars_exactly_and_refuses_long_double_as_encode_scalar_does():
    # np.longdouble was rounded to float64 without a word: 1.0625 + 2**-60 became the tie 1.0625
    # and went down to even, where the exact value goes up (code 121, found by a code review).
    if np.finfo(np.longdouble).nmant > 52:
        value = np.longdouble(1.0625) + np.longdouble(2) ** -60
        with pytest.raises(TypeError, match="block values must hold float16, float32, float64 or integer"):
            mx.quantize_block_reference([value], "E4M3")
        with pytest.raises(TypeError, match="x must hold float16, float32, float64 or integer"):
            codec.encode_scalar(value, "E4M3")
    block = [np.float16(1.5), np.float32(-3.0), np.float64(0.1), np.int8(-4), np.uint64(2**40), 7]
    assert mx.quantize_block_reference(block, "E4M3") == mx.quantize_block_reference(
        [1.5, -3.0, 0.1, -4, 2**40, 7], "E4M3")


def test_a_numpy_bool_scalar_is_named_as_a_scalar_and_aliases_must_be_a_tuple_of_str():
    with pytest.raises(TypeError, match="got a NumPy bool scalar$"):
        codec.encode_scalar(np.bool_(True), "E4M3")
    with pytest.raises(TypeError, match="got a bool array$"):
        codec.encode(np.array([True]), "E4M3")
    for aliases in ("abc", ["ok", ""], ("ok", 3), 5):  # "abc" was stored as is, the aliases 'a', 'b' and 'c'
        with pytest.raises(TypeError, match="^aliases must be a tuple of non-empty str, got "):
            formats.FloatFormat("X", 4, 3, 7, aliases=aliases)
    assert formats.FloatFormat("X", 4, 3, 7, aliases=["x8"]).aliases == ("x8",)


@pytest.mark.parametrize("name", list(formats.CATALOGUE))
def test_float64_inputs_holding_float32_values_take_the_table_and_give_the_same_codes(name, monkeypatch):
    """Found in a review: every float64 input took the exact path, 30-40 times slower than the table,
    also where it held float32 values (a float32 tensor widened). Those now take the table; its codes
    are the float32 input's, which the rest of the suite proves against the scalar definition."""
    fmt = formats.get(name)
    x32 = next(testing.sweep(fmt, kind="structured"))
    if not fmt.has_nan:
        x32 = x32[~np.isnan(x32)]
    x32 = np.concatenate([x32, -x32])  # (NaNs of both signs too)
    with np.errstate(invalid="ignore"):  # (the sweep's signalling NaNs are quieted as they widen)
        x64 = x32.astype(np.float64)
    expected = codec.encode(x32, fmt)
    exact = codec._encode_exact_in_slices

    def refused(*args):
        raise AssertionError("the exact path was taken")

    monkeypatch.setattr(codec, "_encode_exact_in_slices", refused)
    np.testing.assert_array_equal(codec.encode(x64, fmt), expected)
    np.testing.assert_array_equal(codec.encode(x64[::-3], fmt), expected[::-3])  # (a view)
    monkeypatch.setattr(codec, "_encode_exact_in_slices", exact)
    other = x64.copy()
    other[-1] = 1 + 2.0**-40  # one value float32 cannot hold: the exact path, for all of them
    calls = []
    monkeypatch.setattr(codec, "_encode_exact_in_slices", lambda *args: calls.append(1) or exact(*args))
    codes = codec.encode(other, fmt)
    assert calls and np.array_equal(codes[:-1], expected[:-1])


def test_an_autograd_tensor_given_for_an_array_is_named():
    """A Tensor iterates into an object array of Tensors, so the array API said 'got dtype object' (a review's find)."""
    from minifp8 import fp8
    from minifp8.autograd import Tensor

    t = Tensor(np.ones(32, np.float32))
    for call in (lambda: codec.encode(t, "E4M3"), lambda: fp8.fake_quantize(t, "current"),
                 lambda: mx.quantize(t, "MXFP8_E4M3")):
        with pytest.raises(TypeError, match=r"x is a minifp8 autograd Tensor, not an array: pass its values, \.data"):
            call()
    # A caller whose name for the array is a phrase: the hint did not paste it before ".data"
    # (it said "pass its values, load_state_dict: 'weight'.data").
    from minifp8 import nn
    layer = nn.Linear(3, 2, rng=np.random.default_rng(0))
    with pytest.raises(TypeError) as info:
        layer.load_state_dict({name: Tensor(array) for name, array in layer.state_dict().items()})
    assert str(info.value).startswith("load_state_dict: 'weight' is a minifp8 autograd Tensor, not an array: "
                                      "pass its values, .data (")
    assert np.array_equal(codec.encode(t.data, "E4M3"), codec.encode(np.ones(32, np.float32), "E4M3"))
