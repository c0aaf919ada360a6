"""NumPy masked arrays at every public entry that takes a caller's array: a TypeError that names
the argument and says how to fill it. ``np.asarray`` would drop the mask and keep the values
under it, so a cast would work on numbers its caller had hidden and say nothing (JAX refuses
masked arrays for the same reason)."""
import numpy as np
import pytest

import minifp8
from minifp8 import data, fp8, fp8lm, gemm, mx, nn, scaling, testing, unit
from minifp8 import functional as F
from minifp8.autograd import Tensor, make_op
from minifp8.model import GPT, GPTConfig


def masked(values, hidden):
    """``values`` as a masked array whose first element is masked and holds ``hidden``."""
    array = np.ma.array(np.array(values), mask=False)
    array.data.flat[0] = hidden
    array.mask.flat[0] = True
    return array


X = np.ones((4, 32), np.float32)
HIDDEN_X = masked(X, 1e30)  # beyond every format's range: it would be an overflow code, or Inf
CODES = np.full((4, 32), 0x38, np.uint8)  # E4M3 1.0
HIDDEN_CODES = masked(CODES, 0x7F)  # E4M3 NaN
SCALES = np.ones((4, 1))
IDS = np.array([1, 2, 3])
HIDDEN_IDS = masked(IDS, 0)
WEIGHT = np.ones((4, 3), np.float32)
TOKENIZER = data.CharTokenizer("12+=\n")
_LINE = TOKENIZER.encode("1+1=2\n" * 3)
WINDOWS = (_LINE[None, :-1], _LINE[None, 1:])  # inputs and targets (targets: inputs shifted by one)

ENTRY_POINTS = {
    "encode": ("x", lambda: minifp8.encode(HIDDEN_X, "E4M3")),
    "encode, random_bits": ("random_bits", lambda: minifp8.encode(
        X, "E4M3", rounding="stochastic", random_bits=masked(np.zeros(X.shape, np.uint32), 1))),
    "quantize": ("x", lambda: minifp8.quantize(HIDDEN_X, "E4M3")),
    "decode": ("codes", lambda: minifp8.decode(HIDDEN_CODES, "E4M3")),
    "mx.quantize": ("x", lambda: mx.quantize(HIDDEN_X, "MXFP8_E4M3")),
    "mx.quantize_nvfp4": ("x", lambda: mx.quantize_nvfp4(HIDDEN_X)),
    "mx.block_amax": ("blocks", lambda: mx.block_amax(HIDDEN_X)),
    "mx.row_max": ("values", lambda: mx.row_max(HIDDEN_X.reshape(-1), 32)),
    "mx.shared_exponents": ("amax", lambda: mx.shared_exponents(HIDDEN_X[:, 0], "E4M3")),
    "scaling.scale_from_amax": ("amax", lambda: scaling.scale_from_amax(HIDDEN_X[:, 0], "E4M3")),
    "scaling.quantize_with_scale, x": ("x", lambda: scaling.quantize_with_scale(HIDDEN_X, 1.0, "E4M3")),
    "scaling.quantize_with_scale, scale": ("scale", lambda: scaling.quantize_with_scale(X, masked([1.0], 0.0), "E4M3")),
    "scaling.quantize_current": ("x", lambda: scaling.quantize_current(HIDDEN_X)),
    "scaling.quantize_rowwise": ("x", lambda: scaling.quantize_rowwise(HIDDEN_X)),
    "scaling.quantize_blockwise": ("x", lambda: scaling.quantize_blockwise(HIDDEN_X)),
    "fp8.fake_quantize": ("x", lambda: fp8.fake_quantize(HIDDEN_X, "current")),
    "testing.compare, actual": ("actual", lambda: testing.compare(HIDDEN_CODES, X, "E4M3")),
    "testing.compare, x": ("x", lambda: testing.compare(CODES, HIDDEN_X, "E4M3")),
    "testing.compare_mx": ("codes", lambda: testing.compare_mx(np.full((4, 1), 127, np.uint8), HIDDEN_CODES, X,
                                                               "E4M3")),
    "gemm.dequantize, codes": ("codes", lambda: gemm.dequantize(HIDDEN_CODES, SCALES, "E4M3")),
    "gemm.dequantize, scales": ("scales", lambda: gemm.dequantize(CODES, masked(SCALES, 0.0), "E4M3")),
    "gemm.compare_matmul": ("actual", lambda: gemm.compare_matmul(
        masked(np.full((4, 4), 32.0, np.float32), np.nan), CODES, SCALES, CODES.T, SCALES.T,
        a_format="E4M3", b_format="E4M3")),
    "Tensor": ("Tensor data", lambda: Tensor(HIDDEN_X)),
    "Tensor + array": ("the other operand", lambda: Tensor(X) + HIDDEN_X),
    # (NumPy indexed with the value under the mask, and backward sent that row a gradient)
    "Tensor index": ("the index", lambda: Tensor(WEIGHT)[HIDDEN_IDS]),
    "Tensor index, in a tuple": ("the index", lambda: Tensor(WEIGHT)[HIDDEN_IDS, 0]),
    "Tensor index, a mask": ("the index", lambda: Tensor(WEIGHT)[np.ma.array([True, False, True, False])]),
    "Tensor index, in a list": ("the index", lambda: Tensor(WEIGHT)[[HIDDEN_IDS]]),
    "functional.embedding": ("ids", lambda: F.embedding(HIDDEN_IDS, Tensor(WEIGHT))),
    "functional.cross_entropy": ("targets", lambda: F.cross_entropy(Tensor(WEIGHT[:3]), HIDDEN_IDS)),
    "unit.embedding": ("ids", lambda: unit.embedding(HIDDEN_IDS, Tensor(WEIGHT))),
    "unit.cross_entropy": ("targets", lambda: unit.cross_entropy(Tensor(WEIGHT[:3]), HIDDEN_IDS)),
    "fp8lm.fp8_all_reduce": ("gradient", lambda: fp8lm.fp8_all_reduce([X, HIDDEN_X])),
    "fp8lm.split_batch": ("split_batch", lambda: fp8lm.split_batch(HIDDEN_X, workers=2)),
    "fp8lm.load_scaled": ("scale", lambda: fp8lm.load_scaled(CODES, masked(1.0, 0.0), "E4M3")),
    "Tensor.backward": ("backward(grad=...)", lambda: (Tensor(X, requires_grad=True) * 2.0).backward(HIDDEN_X)),
    "GPT": ("ids", lambda: GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4),
                               rng=np.random.default_rng(0))(masked(np.zeros((1, 4), np.int64), 1))),
    "nn.Parameter": ("Parameter data", lambda: nn.Parameter(HIDDEN_X)),
    "Module.load_state_dict": ("'weight'", lambda: nn.Linear(32, 4, rng=np.random.default_rng(0)).load_state_dict(
        {"weight": masked(np.ones((4, 32), np.float32), 0.0), "bias": np.zeros(4, np.float32)})),
    "make_op": ("make_op: data", lambda: make_op(HIDDEN_X, (Tensor(X, requires_grad=True),), lambda g: (g,), "copy")),
    "CharTokenizer.decode": ("ids", lambda: TOKENIZER.decode(HIDDEN_IDS)),
    "answer_accuracy, inputs": ("inputs", lambda: data.answer_accuracy(masked(WINDOWS[0], 0), WINDOWS[1], WINDOWS[1],
                                                                               TOKENIZER)),
    "answer_accuracy, predictions": ("predictions", lambda: data.answer_accuracy(
        *WINDOWS[:2], masked(WINDOWS[1], 0), TOKENIZER)),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_masked_array_is_a_type_error_naming_the_argument(entry):
    name, call = ENTRY_POINTS[entry]
    with pytest.raises(TypeError, match=r"MaskedArray.*\.filled\(value\)") as error:
        call()
    assert name in str(error.value)


def test_a_masked_array_with_nothing_masked_is_refused_too():
    """The rule is the type's, so whether a call works never depends on what its mask holds."""
    with pytest.raises(TypeError, match="MaskedArray"):
        minifp8.encode(np.ma.array(X), "E4M3")


def test_the_filled_array_casts_as_a_plain_one():
    filled = HIDDEN_X.filled(2.0)
    assert type(filled) is np.ndarray
    expected = minifp8.encode(np.where(np.arange(X.size).reshape(X.shape) == 0, np.float32(2.0), X), "E4M3")
    np.testing.assert_array_equal(minifp8.encode(filled, "E4M3"), expected)


def test_decode_of_bytes_says_how_to_read_them_as_codes():
    raw = bytes([0x38, 0x40, 0xB8])  # E4M3 1, 2, -1
    with pytest.raises(TypeError, match=r"np\.frombuffer\(codes, np\.uint8\)"):
        minifp8.decode(raw, "E4M3")
    expected = [1.0, 2.0, -1.0]
    assert minifp8.decode(np.frombuffer(raw, np.uint8), "E4M3").tolist() == expected
    # bytearray and memoryview already read as uint8, one code a byte
    assert minifp8.decode(bytearray(raw), "E4M3").tolist() == expected
    assert minifp8.decode(memoryview(raw), "E4M3").tolist() == expected
