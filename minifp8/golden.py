"""Golden-vector files for backends in other languages: ``python -m minifp8.golden --out DIR``.

A C++, CUDA or Rust test cannot import minifp8, but it can read ``.npy`` arrays. This module writes
the oracle's answers to files, deterministically (the same minifp8 version gives byte-identical
files), together with a ``manifest.json`` that says what every array is.

File layout (schema version 2)
------------------------------
``manifest.json``:

    {"schema": "minifp8-golden", "schema_version": 2, "minifp8_version": "...",
     "notes": {"arrays": "...", "codec": "...", ...}, "entries": [ {entry}, ... ]}

``notes`` states, briefly, the rules a reader needs to interpret the entries (the module
docstrings of `minifp8.codec` and `minifp8.mx` give them in full): the array layout and the sign
bit's place, the formats (FNUZ's too), the sign of zero results, the codec's codes for overflow,
Inf and NaN, stochastic rounding, E8M0's rules, MX's scale modes, short last blocks and blocks with
a NaN scale, and NVFP4's order of float32 operations and its caps at FLT_MAX.
Each entry describes one expected result:

- ``kind``: ``"codec"``, ``"mx"`` or ``"nvfp4"``;
- ``file``: the ``.npz`` (a zip of ``.npy`` arrays; ``numpy.load`` reads it, and so does any zip +
  npy reader) and its ``sha256``;
- ``format``, ``rounding``, ``saturate``, ``input_dtype`` (``codec``);
  ``format`` (e.g. ``MXFP8_E4M3``), ``element_format``, ``block_size``, ``axis``, ``scale_mode``,
  ``rounding``, ``ignore_codes_where_scale`` (``mx``: 255, see below); ``format`` (``NVFP4``),
  ``scale_format``, ``block_size``, ``axis``, ``global_amax_given`` (``nvfp4``);
- ``arrays``: which array in the file plays which role, e.g. ``{"input": "x", "expected_codes":
  "codes_nearest_even_nosat", "random_bits": null}`` (codec), ``expected_scales`` and
  ``expected_codes`` (mx: E8M0 scale codes; nvfp4: E4M3 scale codes, plus ``global_amax`` and
  ``encode_scale``), and ``random_bit_count`` for stochastic rounding;
- ``shapes`` and ``dtypes``: the shape and the dtype (numpy's ``dtype.str``: ``"<f4"``, ``"<f8"``,
  ``"|u1"``) of every array the entry names in ``arrays``, random bits included.

Every array is little-endian. Codes are uint8, one per element in the low bits. An MX block whose
expected scale is 0xFF (NaN: the block holds a NaN, or an Inf outside ``rceil``) decodes to NaN
whatever its element codes, so its expected codes are "don't care" (minifp8 writes 0): compare
codes only where the expected scale is not ``ignore_codes_where_scale``. An NVFP4 entry's tensor
amax is its ``global_amax`` array: ``max |x|`` where ``global_amax_given`` is false, a given value
(as from a reduction across devices) where it is true.

Inputs of ``codec`` entries are every value of the format, every midpoint between neighbours and
one float32 ulp either side, the overflow threshold, zeros, +-Inf and +-NaN (where the format has
NaN), and 4,096 random values spread over every binade; ``float64`` files add the midpoints times
(1 +- 2^-40), which a float32-first cast rounds wrongly; last come the stochastic ties: values
``(n + f) * quantum`` (the "stochastic" note) with ``n * quantum`` the smallest positive value, 1
or max, and ``f * 2^8 = k + 1/2`` exactly (k = 0, 1, 254, 255), with random bits ``255 - k``,
where rounding ``k + 1/2`` to even decides whether to round away.

Block files hold float32 arrays of 80 columns, blocked along the last axis. MX (3 scales a row:
blocks of 32, the last padded with zeros), one input per element format: 24 rows of random values
at random binades from 2^-20 to 2^20, among them an all-zero row, an outlier, float32 subnormals,
a NaN, an Inf and signed zeros; then rows built for the element format: every midpoint between
element values, placed so that block scaling lands it exactly on the tie (at shared exponents 5
and -127), and beside it; and blocks whose amax is 2^j, max_elem * 2^j or the "even" carry point,
with their float32 neighbours (the scale modes' boundaries; a float32 log2 rounds the neighbours
of 2^j to j). NVFP4 (5 scales a row: blocks of 16): one entry whose 24 rows lie at random binades
from 2^-6 to 2^6, with an all-zero row, signed zeros and a 16x outlier; and one entry per given
tensor amax (6 and 54.23361) whose block amaxes and elements lie within 2 float32 steps of E4M3
and E2M1 rounding boundaries, where the order of float32 operations decides codes; and two small
tensors for the note's caps: one below 2688 / FLT_MAX (S_enc is FLT_MAX) and one with a non-zero
block whose scale code is 0 (its encode scale is 1 / 0, so FLT_MAX). Every input is
built from random integers with exact or correctly rounded IEEE operations (no libm), so the files
are the same bytes on every machine.

Schema 2 added ``notes``, ``dtypes``, ``ignore_codes_where_scale``, ``global_amax_given`` and the
NVFP4 entries with a given tensor amax, and made ``shapes`` list random bits too.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np

from . import __version__, codec, formats, mx
from .formats import _check_int
from .testing import _magnitudes, _midpoints, edge_cases

SCHEMA_VERSION = 2
ROUNDINGS = ("nearest_even", "nearest_away", "toward_zero", "stochastic")
RANDOM_BIT_COUNT = 8
SEED = 20231022  # any fixed number: the files must not change between runs

# The manifest's "notes": what a reader needs to interpret the entries (minifp8.codec's and minifp8.mx's docstrings).
NOTES = {
    "arrays": "Every array is little-endian; 'dtypes' gives numpy's dtype.str of each. Codes are uint8, "
              "one per element in the low bits; the sign bit is the format's top bit (0x80 for 8 bits, 0x20 for "
              "FP6, 0x08 for FP4; E8M0 has none).",
    "codec": "Formats: E4M3 and E5M2 as OCP OFP8 rev 1.0; E3M2, E2M3 (FP6) and E2M1 (FP4) as OCP MX v1.0; "
             "E8M0: see its note; E4M3FNUZ and E5M2FNUZ (bias 8 and 16, subnormals, no Inf, no -0) spell NaN "
             "0x80 only, and every other code is a number (max 240 and 57344). Round first, to the format's "
             "precision with an exponent unbounded above (below 2**emin the spacing stays the subnormals', "
             "2**(emin - mantissa bits)), then check for overflow (a rounded magnitude above max). In a signed "
             "format, a zero or a value that rounds to zero keeps the input's sign (-0 is 0x80, FP6 0x20, FP4 "
             "0x08), except in FNUZ, where it is 0x00. NaN gives NaN with the input's sign: 0x7F, 0xFF (E4M3); "
             "0x7E, 0xFE (E5M2); 0x80 (FNUZ). saturate=false: overflow and +-Inf give +-Inf (E5M2: 0x7C, 0xFC) or "
             "NaN (E4M3: 0x7F, 0xFF; FNUZ: 0x80). saturate=true: overflow gives +-max; +-Inf gives +-max (E4M3, "
             "E5M2) or NaN 0x80 (FNUZ, which has no Inf: ONNX Cast-19). rounding=toward_zero: finite overflow gives "
             "+-max whatever saturate (IEEE 754-2019 section 7.4). FP6/FP4 (no Inf or NaN; no NaN input in their "
             "files): overflow and +-Inf give +-max. E8M0: see its note. float64 inputs round once, exactly (not "
             "through float32). minifp8.codec's module docstring.",
    "stochastic": "Write |x| = (n + f) * quantum with n an integer and 0 <= f < 1, quantum the spacing of the "
                  "format's values at |x| (2**(max(floor(log2|x|), emin) - mantissa bits)); round f * "
                  "2**random_bit_count to the nearest integer r (ties to even); round away from zero when r + "
                  "random_bits >= 2**random_bit_count (IEEE P3109 'Stochastic'; minifp8.codec.encode); then the "
                  "codec note's overflow rules.",
    "E8M0": "Unsigned, no zero; every value is a power of two, so nearest_even rounds ties (1.5 * 2**k) up. Zero, "
            "negative numbers (-Inf included) and NaN give 0xFF (NaN); values below 2**-127 give 0x00 (2**-127); "
            "overflow and +Inf give 0xFF, or 0xFE (2**127) with saturate=true; with rounding=toward_zero, finite "
            "overflow gives 0xFE whatever saturate. minifp8.codec's module docstring.",
    "mx": "Blocks of block_size along axis; a row whose length is not a multiple of block_size ends in a "
          "shorter block (as if zero-padded), so it has ceil(length / block_size) scales. shared_exp comes from "
          "the exponent bits of the block amax = max |x| (never a float log2), by scale_mode, with emax_elem the "
          "exponent of the element format's largest value (E4M3 8, E5M2 15, E3M2 4, E2M3 2, E2M1 2): floor: "
          "floor(log2(amax)) - emax_elem (OCP); ceil: ceil(log2(amax)) - emax_elem; even: "
          "floor(log2(amax with its significand rounded to the element's mantissa bits, ties away)) - "
          "emax_elem; rceil: ceil(log2(amax / max_elem)), exact. It is clamped to [-127, 127]; the scale code "
          "is shared_exp + 127, and an all-zero block gets 0x00. Elements are x * 2**-shared_exp, exact, "
          "encoded with the entry's rounding and saturate=true (the codec note). A NaN (or, except for rceil, "
          "an Inf) in a block gives scale 0xFF and the block decodes to NaN: its codes are don't-care (minifp8 "
          "writes 0), so skip them where the expected scale is ignore_codes_where_scale; rceil gives a block "
          "with an Inf (and no NaN) 0xFE, and its Inf saturates. OCP MX v1.0 section 6.3; minifp8.mx's module "
          "docstring.",
    "nvfp4": "float32 operations, each rounded to nearest even, in TransformerEngine's order: S_enc = min(2688 / "
             "global_amax, FLT_MAX) (1 if global_amax is 0); S_dec = 1 / S_enc; scale code = e4m3_saturate(min("
             "block_amax * (S_enc * float32(1/6)), FLT_MAX)), with block_amax = max |x| over the block's 16 "
             "elements; S_dec_b = the E4M3 value of that code; encode = min(1 / (S_dec_b * S_dec), FLT_MAX) "
             "(1 / 0 is Inf, so FLT_MAX); code = e2m1_rne(clamp(x * encode, -6, 6)). e4m3_saturate and e2m1_rne "
             "are the codec's E4M3 (saturate=true) and E2M1 codes, rounding to nearest even; a zero keeps its "
             "sign (-0.0 gives 0x08). Use the global_amax array as the tensor amax; the encode_scale array holds "
             "S_enc. minifp8.mx.quantize_nvfp4.",
}


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> str:
    """Write arrays, little-endian, as an uncompressed ``.npz`` with fixed zip timestamps; return its sha256."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            member = io.BytesIO()
            # (np.require, not ascontiguousarray, which makes a 0-d array 1-d: the manifest's shapes hold)
            array = np.asarray(arrays[name])
            little_endian = array.astype(array.dtype.newbyteorder("<"), copy=False)  # the same bytes on any machine
            np.lib.format.write_array(member, np.require(little_endian, requirements="C"), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.create_system = 3  # (Unix; ZipInfo takes it from sys.platform: the bytes would vary by OS)
            archive.writestr(info, member.getvalue())
    data = buffer.getvalue()
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def _random_magnitudes(rng: np.random.Generator, low: int, high: int, size) -> np.ndarray:
    """float64 ``(1 + m / 2**52) * 2**e`` with integers ``m`` in [0, 2**52) and ``e`` in [low, high):
    every step exact, so the values are the same bits on every machine (``np.exp2`` or a normal
    draw goes through libm, whose last bit may differ from one platform to another)."""
    significands = 1.0 + rng.integers(0, 1 << 52, size=size) / 2.0**52
    return np.ldexp(significands, rng.integers(low, high, size=size))


def codec_inputs(fmt, dtype) -> np.ndarray:
    """The inputs of a codec file: edge cases, random values over every binade, float64
    near-midpoints, and last the values of `stochastic_ties`.

    Parameters
    ----------
    fmt : FloatFormat or str
    dtype : float32 or float64 dtype
        The dtype of the codec files, in any spelling ``np.dtype`` takes (``np.float32``,
        ``"float64"``, ``"<f4"``, ...). The inputs step one float32 ulp past the midpoints, so
        narrower floats would lose them, and integers cannot hold NaN or Inf.
    """
    fmt = formats.get(fmt)
    dtype = _check_float_dtype(dtype)
    rng = np.random.default_rng(SEED)
    signs = rng.choice([-1.0, 1.0], size=4096) if fmt.signed else 1.0
    magnitudes = _random_magnitudes(rng, fmt.emin - fmt.mantissa_bits - 3, fmt.emax + 2, 4096)
    with np.errstate(over="ignore", under="ignore"):  # E8M0's top binade is beyond float32: those become Inf
        random_values = (signs * magnitudes).astype(dtype)
    x = np.concatenate([edge_cases(fmt).astype(dtype), random_values])
    if dtype == np.float64:
        midpoints = _midpoints(fmt)
        near = np.concatenate([midpoints * (1 - 2.0**-40), midpoints * (1 + 2.0**-40)])
        x = np.concatenate([x, near, -near if fmt.signed else near])
    return np.concatenate([x, stochastic_ties(fmt)[0].astype(dtype)])


STOCHASTIC_TIE_STEPS = (0, 1, 254, 255)  # k, with f * 2**RANDOM_BIT_COUNT = k + 1/2


def stochastic_ties(fmt) -> tuple[np.ndarray, np.ndarray]:
    """Inputs on a tie of stochastic rounding, and the random bits that make the tie decide.

    Write ``|x| = (n + f) * quantum`` as the "stochastic" note does. These ``x`` have
    ``f * 2**RANDOM_BIT_COUNT = k + 1/2`` exactly, for ``k`` in `STOCHASTIC_TIE_STEPS`, above
    three values ``n * quantum`` of ``fmt`` (the smallest positive one, 1 and max, where rounding
    away overflows), with both signs where ``fmt`` is signed. Rounding ``k + 1/2`` to even gives
    ``r = k`` for even ``k`` and ``k + 1`` for odd; the random bits ``2**RANDOM_BIT_COUNT - 1 - k``
    put ``r + random_bits`` at ``2**RANDOM_BIT_COUNT - 1`` (toward zero) or ``2**RANDOM_BIT_COUNT``
    (away), so rounding the tie away (even ``k``) or down (odd ``k``) instead changes the result.

    Returns
    -------
    x : float32 ndarray
    random_bits : uint8 ndarray
        The bits for ``x``, element by element.
    """
    fmt = formats.get(fmt)
    grid = _magnitudes(fmt)
    quantum = np.append(np.diff(grid), 2.0 ** (fmt.emax - fmt.mantissa_bits))  # the spacing above each value
    chosen = np.isin(grid, [grid[grid > 0][0], 1.0, fmt.max])
    steps = np.array(STOCHASTIC_TIE_STEPS)
    fractions = (2 * steps + 1) / 2.0 ** (RANDOM_BIT_COUNT + 1)  # exact
    magnitudes = (grid[chosen, None] + quantum[chosen, None] * fractions).reshape(-1)  # exact in float32
    bits = np.tile((1 << RANDOM_BIT_COUNT) - 1 - steps, chosen.sum()).astype(np.uint8)
    if fmt.signed:
        return np.concatenate([magnitudes, -magnitudes]).astype(np.float32), np.concatenate([bits, bits])
    return magnitudes.astype(np.float32), bits


def _check_float_dtype(dtype) -> np.dtype:
    """``dtype`` as the native float32 or float64 dtype; TypeError unless numpy reads it as a dtype."""
    try:
        parsed = None if dtype is None else np.dtype(dtype)  # (np.dtype(None) would be float64)
    except TypeError:
        parsed = None
    if parsed is None:
        raise TypeError(f"codec_inputs: dtype must be a float32 or float64 dtype (np.float32, 'float64', ...), "
                        f"got {type(dtype).__name__} {dtype!r}")
    if parsed.kind != "f" or parsed.itemsize not in (4, 8):
        raise ValueError(f"codec_inputs: dtype must be float32 or float64, got {parsed}")
    return parsed.newbyteorder("=")


def codec_entries(fmt, out: Path) -> list[dict]:
    """Write one file per (format, input dtype) holding the inputs and the codes of every option."""
    fmt = formats.get(fmt)
    entries = []
    for dtype in (np.float32, np.float64):
        x = codec_inputs(fmt, dtype)
        rng = np.random.default_rng(SEED)
        random_bits = rng.integers(0, 1 << RANDOM_BIT_COUNT, size=x.shape, dtype=np.uint8)
        tie_bits = stochastic_ties(fmt)[1]
        random_bits[-tie_bits.size:] = tie_bits  # (codec_inputs ends with the ties)
        arrays = {"x": x, "random_bits": random_bits}
        combos = []
        for rounding in ROUNDINGS:
            for saturate in (False, True):
                name = f"codes_{rounding}_{'sat' if saturate else 'nosat'}"
                options = {"rounding": rounding, "saturate": saturate}
                if rounding == "stochastic":
                    options.update(random_bits=random_bits, random_bit_count=RANDOM_BIT_COUNT)
                arrays[name] = codec.encode(x, fmt, **options)
                combos.append((rounding, saturate, name))
        file_name = f"codec_{fmt.name}_{np.dtype(dtype).name}.npz"
        digest = write_npz(out / file_name, arrays)
        for rounding, saturate, name in combos:
            stochastic = rounding == "stochastic"
            roles = {"input": "x", "expected_codes": name, "random_bits": "random_bits" if stochastic else None}
            entries.append({
                "kind": "codec", "file": file_name, "sha256": digest, "format": fmt.name,
                "rounding": rounding, "saturate": saturate, "input_dtype": np.dtype(dtype).name,
                "arrays": roles, "random_bit_count": RANDOM_BIT_COUNT if stochastic else None,
                **_layout(arrays, roles.values()),
            })
    return entries


def block_inputs(rows: int = 24, length: int = 80) -> np.ndarray:
    """Float32 rows for the block-format files, blocked along the last axis (80 = 2.5 blocks of 32).

    Rows, in order: random values at a random binade each (most rows); an all-zero row; a row with
    one huge outlier; float32 subnormals; a row with a NaN; a row with an Inf; and 0.0/-0.0 mixes.
    `mx_inputs` adds rows built for one element format.

    Parameters
    ----------
    rows, length : int
        The shape; at least 7 rows and 71 columns, to hold those special rows (1 to 6) and the Inf
        at column 70.
    """
    _check_int(rows, "block_inputs: rows", 7)
    _check_int(length, "block_inputs: length", 71)
    rng = np.random.default_rng(SEED)
    x = _random_rows(rng, rows, length, -20, 20)
    x[1] = 0.0
    x[2, 7] = 3.0e6
    with np.errstate(under="ignore"):  # (float32 subnormals, rounded)
        x[3] = _random_rows(rng, 1, length, 0, 1)[0] * np.float32(2.0**-140)
    x[4, 40] = np.nan
    x[5, 70] = -np.inf
    x[6, ::2] = -0.0
    return x


MX_TIE_EXPONENT = 5  # ties at shared_exp 5: the block amax max_elem * 2**5
MX_BOUNDARY_BINADES = (-100, -20, 20, 100)  # |j| >= 4: a float32 log2 rounds 2**j * (1 +- 2**-24) to j


def mx_inputs(mx_format, length: int = 80) -> np.ndarray:
    """The input of one MX file: the rows of `block_inputs`, then rows built for its element format.

    The built rows (OCP MX v1.0 section 6.3; `minifp8.mx`'s module docstring), each 32-element block led by
    the element that is its amax:

    1. Ties: every midpoint between neighbouring element values times ``2**5``, with both signs,
       and the float32 values just below and above each, in blocks of amax ``max_elem * 2**5``,
       so that floor, even and rceil give ``shared_exp = 5`` and the scaled elements land exactly
       on the midpoints and one float32 step beside them (ceil gives 6: half of each midpoint,
       still a tie in the normal range).
    2. The midpoints below ``2**emax`` times ``2**-127``, both signs, in blocks of amax
       ``2**(emax - 127)``: every scale mode gives -127, so ceil meets exact ties too, and the
       inputs are float32 subnormals.
    3. Boundary amaxes, for ``j`` in `MX_BOUNDARY_BINADES`: ``2**j`` and the float32 values either
       side (floor and ceil change there, and a float32 ``log2`` rounds both neighbours to ``j``),
       ``max_elem * 2**j`` and its neighbours (rceil), and the "even" carry point
       ``(2 - 2**-(M + 1)) * 2**j`` and the float32 below it; the other elements of these blocks
       are random values below the amax, of both signs.

    Parameters
    ----------
    mx_format : str or MXFormat
        An MX format (``"MXFP8_E4M3"``, ...): its element format decides the midpoints.
    length : int
        The row length, at least 71 (see `block_inputs`).
    """
    element = mx.get(mx_format).elem
    _check_int(length, "mx_inputs: length", 71)
    rng = np.random.default_rng(SEED + 2)
    midpoints = _midpoints(element)
    ties = (midpoints * 2.0**MX_TIE_EXPONENT).astype(np.float32)
    beside = np.concatenate([ties, np.nextafter(ties, np.float32(0)), np.nextafter(ties, np.float32(np.inf))])
    low_ties = (midpoints[midpoints < 2.0**element.emax] * 2.0**-127).astype(np.float32)  # float32 subnormals

    amaxes = []
    for j in MX_BOUNDARY_BINADES:
        power, top = np.float32(2.0**j), np.float32(element.max * 2.0**j)
        carry = np.float32((2 - 2.0 ** -(element.mantissa_bits + 1)) * 2.0**j)
        amaxes += [np.nextafter(power, np.float32(0)), power, np.nextafter(power, np.float32(np.inf)),
                   np.nextafter(top, np.float32(0)), top, np.nextafter(top, np.float32(np.inf)),
                   np.nextafter(carry, np.float32(0)), carry]
    return np.concatenate([block_inputs(length=length),
                           _tie_rows(np.concatenate([beside, -beside]), element.max * 2.0**MX_TIE_EXPONENT, length),
                           _tie_rows(np.concatenate([low_ties, -low_ties]), 2.0 ** (element.emax - 127), length),
                           _boundary_rows(rng, np.array(amaxes, np.float32), length)])


def _tie_rows(values: np.ndarray, amax: float, length: int) -> np.ndarray:
    """float32 rows of ``length`` whose 32-blocks each start with ``amax``, then ``values`` in order
    in the other places (zeros after the last)."""
    leads = np.arange(length) % 32 == 0
    per_row = length - int(leads.sum())
    rows = -(-values.size // per_row)
    x = np.zeros((rows, length), np.float32)
    x[:, leads] = amax
    x[:, ~leads] = np.concatenate([values, np.zeros(rows * per_row - values.size, np.float32)]).reshape(rows, -1)
    return x


def _boundary_rows(rng: np.random.Generator, amaxes: np.ndarray, length: int) -> np.ndarray:
    """float32 rows of ``length``, one 32-block per amax (zero blocks after the last): the amax, with
    a random sign, then random values of both signs below it (``amax * m / 2**24``, ``m`` an integer)."""
    blocks_per_row = -(-length // 32)
    rows = -(-amaxes.size // blocks_per_row)
    block_amax = np.zeros(rows * blocks_per_row, np.float32)
    block_amax[:amaxes.size] = amaxes * rng.choice(np.float32([-1, 1]), amaxes.size)
    block_amax = block_amax.reshape(rows, blocks_per_row)
    fractions = rng.integers(-(1 << 24) + 1, 1 << 24, size=(rows, length)) / 2.0**24
    x = (np.repeat(block_amax, 32, axis=1)[:, :length] * fractions).astype(np.float32)
    x[:, ::32] = block_amax
    return x


def nvfp4_inputs(rows: int = 24, length: int = 80) -> np.ndarray:
    """Float32 rows for the NVFP4 file: random values at a random binade each within 2**-6 to
    2**6, an all-zero row, 0.0/-0.0 mixes and a row with a 16x outlier. One tensor scale serves all
    blocks, so a wider range (the MX rows span 2**40) would leave most block scales at E4M3's zero.

    Parameters
    ----------
    rows, length : int
        The shape; at least 7 rows and 8 columns, to hold the special rows (1, 2 and 6) and the
        outlier at column 7.
    """
    _check_int(rows, "nvfp4_inputs: rows", 7)
    _check_int(length, "nvfp4_inputs: length", 8)
    rng = np.random.default_rng(SEED + 1)
    x = _random_rows(rng, rows, length, -6, 6)
    x[1] = 0.0
    x[2, 7] = 16 * np.abs(x).max()
    x[6, ::2] = -0.0
    return x


def _random_rows(rng: np.random.Generator, rows: int, length: int, low: int, high: int) -> np.ndarray:
    """float32 ``(rows, length)``: each row's values signed, from [1, 2) times ``2**e`` with ``e`` in
    [e_row - 3, e_row + 3), and ``e_row`` in [low, high) per row (`_random_magnitudes`, libm-free)."""
    centres = rng.integers(low, high, size=(rows, 1))
    magnitudes = _random_magnitudes(rng, -3, 3, (rows, length)) * np.ldexp(1.0, centres)
    signs = rng.choice([-1.0, 1.0], size=(rows, length))
    with np.errstate(under="ignore"):  # (rows down among float32's subnormals round to them)
        return (signs * magnitudes).astype(np.float32)


def nvfp4_cap_inputs() -> dict[str, np.ndarray]:
    """Two small float32 tensors for the caps of the "nvfp4" note, which the other inputs never meet.

    ``"tiny"`` (4 x 32): random values from 2**-127 to 2**-118 (float32 subnormals among them),
    so ``2688 / max |x|`` exceeds FLT_MAX and S_enc is FLT_MAX. ``"zero_scale"`` (1 x 32): 6.0,
    so S_enc = 448, and a block of amax 2**-17, whose scale ``2**-17 * 74.67`` rounds to E4M3's 0:
    its encode scale is ``1 / 0``, so FLT_MAX, which takes 2**-17 to 6, 2**-127 to 2 and keeps
    zeros (an encode scale of 0 or Inf would not).
    """
    tiny = _random_rows(np.random.default_rng(SEED + 4), 4, 32, -124, -121)
    zero_scale = np.zeros((1, 32), np.float32)
    zero_scale[0, 0] = 6.0
    zero_scale[0, 16:24] = [2.0**-17, -2.0**-17, 0.0, -0.0, 2.0**-127, -2.0**-128, 3 * 2.0**-130, 2.0**-149]
    return {"tiny": tiny, "zero_scale": zero_scale}


NVFP4_GLOBAL_AMAXES = (6.0, 54.23361)  # S_enc: 448 exactly, and one that is not a power of two times 448


def nvfp4_boundary_inputs(global_amax, rows: int = 6, length: int = 80) -> np.ndarray:
    """Float32 rows for an NVFP4 entry with a given tensor amax, where the order of the float32
    operations decides codes (`minifp8.mx.quantize_nvfp4`).

    Block ``b`` (16 elements) has its amax within 2 float32 steps of the midpoint between the
    E4M3 values of codes ``c_b`` and ``c_b + 1`` times ``6 * global_amax / 2688``, with ``c_b``
    running from 0x01 to 0x7D over the blocks, so that its block scale lies on a rounding
    boundary; its other elements lie within 2 float32 steps of an E2M1 midpoint (0.25 to 5)
    times ``global_amax * S_dec_b / 2688`` (the inverse of the element scale), with random signs.
    Every amax is below ``global_amax``.

    Parameters
    ----------
    global_amax : float
        The tensor amax the entry gives: a finite number > 0, rounded to float32.
    rows, length : int
        The shape; at least 1 row and 16 columns.
    """
    global_amax = mx._check_float32_number(global_amax, "nvfp4_boundary_inputs: global_amax", positive=True)
    _check_int(rows, "nvfp4_boundary_inputs: rows", 1)
    _check_int(length, "nvfp4_boundary_inputs: length", 16)
    rng = np.random.default_rng(SEED + 3)
    used = 16 * (length // 16)  # the columns of whole blocks; the rest stay zero
    e4m3 = formats.E4M3.values().astype(np.float64)
    scale_codes = np.round(np.linspace(0x01, 0x7D, rows * used // 16)).astype(np.int64)
    midpoints = (e4m3[scale_codes] + e4m3[scale_codes + 1]) / 2
    block_amax = _float32_steps((midpoints * 6 * global_amax / 2688).astype(np.float32),
                                rng.integers(-2, 3, scale_codes.size))
    blocks = np.zeros((scale_codes.size, 16), np.float32)
    blocks[:, 0] = block_amax
    x = np.zeros((rows, length), np.float32)
    x[:, :used] = blocks.reshape(rows, used)
    block_scales = codec.decode(mx.quantize_nvfp4(x, global_amax=global_amax).scales[:, :used // 16], "E4M3")
    inverse_scale = block_scales.reshape(-1, 1).astype(np.float64) * global_amax / 2688
    near = (rng.choice(_midpoints(formats.E2M1), (scale_codes.size, 15)) * inverse_scale).astype(np.float32)
    near = np.minimum(_float32_steps(near, rng.integers(-2, 3, near.shape)), block_amax[:, None])
    blocks[:, 1:] = near * rng.choice(np.float32([-1, 1]), near.shape)
    x[:, :used] = blocks.reshape(rows, used)
    return x


def _float32_steps(values: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Positive float32 ``values`` moved by ``steps`` float32 steps each (an integer on the bits)."""
    return (values.view(np.int32) + steps.astype(np.int32)).view(np.float32)


def _layout(arrays: dict[str, np.ndarray], names) -> dict:
    """The ``shapes`` and ``dtypes`` (numpy's little-endian ``dtype.str``) of the named arrays."""
    names = [name for name in names if name is not None]
    return {"shapes": {name: list(np.shape(arrays[name])) for name in names},
            "dtypes": {name: np.asarray(arrays[name]).dtype.newbyteorder("<").str for name in names}}


def block_entries(out: Path) -> list[dict]:
    """MX files (every named MX format, every scale mode) and one NVFP4 file (several entries)."""
    entries = []
    for mx_format in mx.FORMATS.values():
        x = mx_inputs(mx_format)
        arrays = {"x": x}
        for scale_mode in mx.SCALE_MODES:
            result = mx.quantize(x, mx_format, scale_mode=scale_mode)
            arrays[f"scales_{scale_mode}"], arrays[f"codes_{scale_mode}"] = result.scales, result.codes
        file_name = f"mx_{mx_format.name}.npz"
        digest = write_npz(out / file_name, arrays)
        for scale_mode in mx.SCALE_MODES:
            roles = {"input": "x", "expected_scales": f"scales_{scale_mode}", "expected_codes": f"codes_{scale_mode}"}
            entries.append({
                "kind": "mx", "file": file_name, "sha256": digest, "format": mx_format.name,
                "element_format": mx_format.elem.name, "block_size": mx_format.block_size, "axis": -1,
                "scale_mode": scale_mode, "rounding": "nearest_even", "saturate": True, "input_dtype": "float32",
                "ignore_codes_where_scale": mx.E8M0_NAN, "arrays": roles, **_layout(arrays, roles.values()),
            })
    cases = [("", nvfp4_inputs(), None)] + [(f"_{i}", nvfp4_boundary_inputs(amax), amax)
                                            for i, amax in enumerate(NVFP4_GLOBAL_AMAXES, 1)]
    cases += [(f"_{name}", x, None) for name, x in nvfp4_cap_inputs().items()]
    arrays, roles = {}, []
    for suffix, x, global_amax in cases:
        result = mx.quantize_nvfp4(x, global_amax=global_amax)
        arrays.update({f"x{suffix}": x, f"scales{suffix}": result.scales, f"codes{suffix}": result.codes,
                       f"global_amax{suffix}": np.array(result.global_amax, np.float32),
                       f"encode_scale{suffix}": np.array(result.encode_scale, np.float32)})
        roles.append(({"input": f"x{suffix}", "expected_scales": f"scales{suffix}", "expected_codes": f"codes{suffix}",
                       "global_amax": f"global_amax{suffix}", "encode_scale": f"encode_scale{suffix}"},
                      global_amax is not None))
    digest = write_npz(out / "nvfp4.npz", arrays)
    for names, given in roles:
        entries.append({
            "kind": "nvfp4", "file": "nvfp4.npz", "sha256": digest, "format": "NVFP4", "element_format": "E2M1",
            "scale_format": "E4M3", "block_size": mx.NVFP4_BLOCK_SIZE, "axis": -1, "input_dtype": "float32",
            "global_amax_given": given, "arrays": names, **_layout(arrays, names.values()),
        })
    return entries


def write(out, format_names=None, blocks: bool = True) -> dict:
    """Write every golden file under ``out`` and return the manifest (also written as manifest.json).

    Parameters
    ----------
    out : str or os.PathLike
        The folder (created if missing). An existing folder is written into: files of the names
        this writes (``manifest.json``, ``codec_<format>_<dtype>.npz``, ``mx_<format>.npz``,
        ``nvfp4.npz``) are replaced; other files stay as they are, and only the manifest says
        which files are this run's.
    format_names : str, FloatFormat or sequence of them, optional
        The formats of the codec files: one name, or a non-empty list (duplicates are written
        once); default every catalogued format.
    blocks : bool
        Also write the MX and NVFP4 files.
    """
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"golden.write: out must be a folder path (str or os.PathLike), got {type(out).__name__} "
                        f"{out!r}")
    if not os.fspath(out):  # (Path("") is the current folder)
        raise ValueError("golden.write: out must name a folder, got an empty path")
    if format_names is None:
        selected = list(formats.CATALOGUE.values())
    else:
        selected = formats.get_list(format_names, "format_names")
    blocks = formats._check_bool(blocks, "golden.write: blocks")
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".minifp8-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise OSError(f"cannot write golden files to {out}: {error.strerror or error}") from error
    entries = []
    for fmt in selected:
        entries += codec_entries(fmt, out)
    if blocks:
        entries += block_entries(out)
    manifest = {"schema": "minifp8-golden", "schema_version": SCHEMA_VERSION, "minifp8_version": __version__,
                "notes": NOTES, "entries": entries}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def load(directory) -> tuple[dict, dict]:
    """Read a golden directory with numpy alone: the manifest and ``{file name: {array: ndarray}}``.

    Raises ``ValueError`` when ``manifest.json`` is not a minifp8 golden manifest of a schema this
    version reads, or when a file's sha256 is not the one its entries record (a truncated copy, or
    files from another run).
    """
    directory = Path(directory)
    manifest = json.loads((directory / "manifest.json").read_text())
    schema = (manifest.get("schema"), manifest.get("schema_version")) if isinstance(manifest, dict) else None
    if schema != ("minifp8-golden", SCHEMA_VERSION):
        raise ValueError(f"golden.load: {directory / 'manifest.json'} must be a 'minifp8-golden' manifest of "
                         f"schema_version {SCHEMA_VERSION}, got schema and version {schema}")
    files = {}
    for entry in manifest["entries"]:
        if entry["file"] not in files:
            data = (directory / entry["file"]).read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if digest != entry["sha256"]:
                raise ValueError(f"golden.load: {directory / entry['file']} has sha256 {digest}, but the manifest "
                                 f"records {entry['sha256']}: the file is damaged or from another run")
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                files[entry["file"]] = {name: archive[name] for name in archive.files}
    return manifest, files


def main(argv=None) -> int:
    """The command line; returns the exit status (0 written, 1 the folder cannot be written, 2 bad flags)."""
    from .train_tiny import _Parser

    parser = _Parser(  # one-line errors, as train_tiny's
        prog="python -m minifp8.golden",
        description="Write golden-vector files (.npz + manifest.json) for testing another backend against minifp8.",
        epilog="File layout (schema version " + __doc__.split("\nFile layout (schema version ", 1)[1]
        + "\nExit status: 0 written, 1 the folder cannot be written, 2 bad flags.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True,
                        help="output folder, created if missing; an existing one is written into: files of the "
                             "names this writes are replaced, other files stay, and manifest.json lists this "
                             "run's files only (required)")
    parser.add_argument("--formats", default=None,
                        help=f"comma-separated formats of the codec files, in any case, each written once "
                             f"(default: all: {','.join(formats.CATALOGUE)}); the MX and NVFP4 files do not "
                             f"depend on it (see --no-blocks)")
    parser.add_argument("--no-blocks", action="store_true", help="skip the MX and NVFP4 files")
    args = parser.parse_args(argv)
    if not args.out.strip():
        parser.error("--out must name a folder, got an empty string")
    names = None
    if args.formats is not None:
        names = [name.strip() for name in args.formats.split(",") if name.strip()]
        if not names:
            parser.error(f"--formats names no format, got {args.formats!r}; leave it out for all formats")
        for name in names:
            try:
                formats.get(name)
            except ValueError as error:
                parser.error(f"--formats: {error}")
    try:
        if Path(args.out).exists() and not Path(args.out).is_dir():
            print(f"{parser.prog}: error: --out {args.out} is a file, not a folder", file=sys.stderr)
            return 1
        manifest = write(args.out, names, blocks=not args.no_blocks)
    except OSError as error:
        print(f"{parser.prog}: error: --out: {error}", file=sys.stderr)
        return 1
    files = sorted({entry["file"] for entry in manifest["entries"]})
    print(f"wrote {len(files)} files and manifest.json ({len(manifest['entries'])} entries) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
