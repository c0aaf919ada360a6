"""Golden-vector files for backends in other languages: ``python -m minifp8.golden --out DIR``.

A C++, CUDA or Rust test cannot import minifp8, but it can read ``.npy`` arrays. This module writes
the oracle's answers to files, deterministically (the same minifp8 version gives byte-identical
files), together with a ``manifest.json`` that says what every array is.

File layout (schema version 1)
------------------------------
``manifest.json``:

    {"schema": "minifp8-golden", "schema_version": 1, "minifp8_version": "...",
     "entries": [ {entry}, ... ]}

Each entry describes one expected result:

- ``kind``: ``"codec"``, ``"mx"`` or ``"nvfp4"``;
- ``file``: the ``.npz`` (a zip of ``.npy`` arrays; ``numpy.load`` reads it, and so does any zip +
  npy reader) and its ``sha256``;
- ``format``, ``rounding``, ``saturate``, ``input_dtype`` (``codec``);
  ``format`` (e.g. ``MXFP8_E4M3``), ``element_format``, ``block_size``, ``axis``, ``scale_mode``,
  ``rounding`` (``mx``); ``format`` (``NVFP4``), ``scale_format``, ``block_size``, ``axis`` (``nvfp4``);
- ``arrays``: which array in the file plays which role, e.g. ``{"input": "x", "expected_codes":
  "codes_nearest_even_nosat", "random_bits": null}`` (codec), ``expected_scales`` and
  ``expected_codes`` (mx: E8M0 scale codes; nvfp4: E4M3 scale codes, plus ``global_amax`` and
  ``encode_scale``), and ``random_bit_count`` for stochastic rounding;
- ``shapes``: the shape of the input and of every expected array (a codec entry's ``random_bits``
  has the input's shape).

Codes are uint8, one per element in the low bits. Inputs of ``codec`` entries are every value of the
format, every midpoint between neighbours and one float32 ulp either side, the overflow threshold,
zeros, +-Inf and NaN (where the format has NaN), and 4,096 random values spread over every binade;
``float64`` files add the midpoints times (1 +- 2^-40), which a float32-first cast rounds wrongly.
Block files hold a (24, 80) float32 array blocked along its last axis. MX: rows at random binades
from 2^-20 to 2^20, an all-zero row, an outlier, float32 subnormals, a NaN, an Inf and signed
zeros. NVFP4, whose one tensor scale serves every block: rows at random binades from 2^-6 to 2^6,
an all-zero row, signed zeros and a 16x outlier. The scales have shape (24, 3) for MX (blocks of
32, the last padded with zeros) and (24, 5) for NVFP4 (blocks of 16). Every input is built from
random integers with exact operations, so the files are the same bytes on every machine.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import zipfile
from pathlib import Path

import numpy as np

from . import __version__, codec, formats, mx
from .formats import _check_int
from .testing import edge_cases

SCHEMA_VERSION = 1
ROUNDINGS = ("nearest_even", "nearest_away", "toward_zero", "stochastic")
RANDOM_BIT_COUNT = 8
SEED = 20231022  # any fixed number: the files must not change between runs


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> str:
    """Write arrays as an uncompressed ``.npz`` with fixed zip timestamps; return its sha256."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            member = io.BytesIO()
            # (np.require, not ascontiguousarray, which makes a 0-d array 1-d: the manifest's shapes hold)
            np.lib.format.write_array(member, np.require(arrays[name], requirements="C"), allow_pickle=False)
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
    """The inputs of a codec file: edge cases, random values over every binade, float64 near-midpoints.

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
    with np.errstate(over="ignore"):  # E8M0's top binade is beyond float32: those become Inf
        random_values = (signs * magnitudes).astype(dtype)
    x = np.concatenate([edge_cases(fmt).astype(dtype), random_values])
    if dtype == np.float64:
        table = fmt.values()
        grid = np.unique(np.abs(table[np.isfinite(table)]))
        midpoints = (grid[:-1] + grid[1:]) / 2
        near = np.concatenate([midpoints * (1 - 2.0**-40), midpoints * (1 + 2.0**-40)])
        x = np.concatenate([x, near, -near if fmt.signed else near])
    return x


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
            entries.append({
                "kind": "codec", "file": file_name, "sha256": digest, "format": fmt.name,
                "rounding": rounding, "saturate": saturate, "input_dtype": np.dtype(dtype).name,
                "arrays": {"input": "x", "expected_codes": name, "random_bits": "random_bits" if stochastic else None},
                "random_bit_count": RANDOM_BIT_COUNT if stochastic else None,
                "shapes": {"x": list(x.shape), name: list(x.shape)},
            })
    return entries


def block_inputs(rows: int = 24, length: int = 80) -> np.ndarray:
    """Float32 rows for the block-format files, blocked along the last axis (80 = 2.5 blocks of 32).

    Rows, in order: random values at a random binade each (most rows); an all-zero row; a row with
    one huge outlier; float32 subnormals; a row with a NaN; a row with an Inf; and 0.0/-0.0 mixes.

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
    x[3] = _random_rows(rng, 1, length, 0, 1)[0] * np.float32(2.0**-140)
    x[4, 40] = np.nan
    x[5, 70] = -np.inf
    x[6, ::2] = -0.0
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
    return (signs * magnitudes).astype(np.float32)


def block_entries(out: Path) -> list[dict]:
    """MX files (every named MX format, every scale mode) and one NVFP4 file."""
    x = block_inputs()
    entries = []
    for mx_format in mx.FORMATS.values():
        arrays = {"x": x}
        names = {}
        for scale_mode in mx.SCALE_MODES:
            result = mx.quantize(x, mx_format, scale_mode=scale_mode)
            arrays[f"scales_{scale_mode}"], arrays[f"codes_{scale_mode}"] = result.scales, result.codes
            names[scale_mode] = (f"scales_{scale_mode}", f"codes_{scale_mode}")
        file_name = f"mx_{mx_format.name}.npz"
        digest = write_npz(out / file_name, arrays)
        for scale_mode, (scales_name, codes_name) in names.items():
            entries.append({
                "kind": "mx", "file": file_name, "sha256": digest, "format": mx_format.name,
                "element_format": mx_format.elem.name, "block_size": mx_format.block_size, "axis": -1,
                "scale_mode": scale_mode, "rounding": "nearest_even", "saturate": True, "input_dtype": "float32",
                "arrays": {"input": "x", "expected_scales": scales_name, "expected_codes": codes_name},
                "shapes": {"x": list(x.shape), scales_name: list(arrays[scales_name].shape),
                           codes_name: list(x.shape)},
            })
    nvfp4_x = nvfp4_inputs()
    result = mx.quantize_nvfp4(nvfp4_x)
    arrays = {"x": nvfp4_x, "scales": result.scales, "codes": result.codes,
              "global_amax": np.array(result.global_amax, np.float32),
              "encode_scale": np.array(result.encode_scale, np.float32)}
    digest = write_npz(out / "nvfp4.npz", arrays)
    entries.append({
        "kind": "nvfp4", "file": "nvfp4.npz", "sha256": digest, "format": "NVFP4", "element_format": "E2M1",
        "scale_format": "E4M3", "block_size": mx.NVFP4_BLOCK_SIZE, "axis": -1, "input_dtype": "float32",
        "arrays": {"input": "x", "expected_scales": "scales", "expected_codes": "codes",
                   "global_amax": "global_amax", "encode_scale": "encode_scale"},
        "shapes": {name: list(np.shape(value)) for name, value in arrays.items()},
    })
    return entries


def write(out, format_names=None, blocks: bool = True) -> dict:
    """Write every golden file under ``out`` and return the manifest (also written as manifest.json).

    Parameters
    ----------
    out : str or pathlib.Path
        The folder (created if missing).
    format_names : str, FloatFormat or sequence of them, optional
        The formats of the codec files: one name, or a non-empty list (duplicates are written
        once); default every catalogued format.
    blocks : bool
        Also write the MX and NVFP4 files.
    """
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
                "entries": entries}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def load(directory) -> tuple[dict, dict]:
    """Read a golden directory with numpy alone: the manifest and ``{file name: {array: ndarray}}``."""
    directory = Path(directory)
    manifest = json.loads((directory / "manifest.json").read_text())
    files = {}
    for entry in manifest["entries"]:
        if entry["file"] not in files:
            with np.load(directory / entry["file"], allow_pickle=False) as archive:
                files[entry["file"]] = {name: archive[name] for name in archive.files}
    return manifest, files


def main(argv=None) -> int:
    """The command line; returns the exit status (0 written, 1 the folder cannot be written, 2 bad flags)."""
    from .train_tiny import _Parser

    parser = _Parser(  # one-line errors, as train_tiny's
        prog="python -m minifp8.golden",
        description="Write golden-vector files (.npz + manifest.json) for testing another backend against minifp8.",
        epilog=__doc__.split("File layout (schema version 1)\n------------------------------\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True, help="output folder (created if missing)")
    parser.add_argument("--formats", default=None,
                        help=f"comma-separated formats of the codec files (default: all: "
                             f"{','.join(formats.CATALOGUE)}); the MX and NVFP4 files do not depend on it "
                             f"(see --no-blocks)")
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
                parser.error(str(error))
    try:
        if Path(args.out).exists() and not Path(args.out).is_dir():
            print(f"{parser.prog}: error: --out {args.out} is a file, not a folder", file=sys.stderr)
            return 1
        manifest = write(args.out, names, blocks=not args.no_blocks)
    except OSError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    files = sorted({entry["file"] for entry in manifest["entries"]})
    print(f"wrote {len(files)} files and manifest.json ({len(manifest['entries'])} entries) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
