"""Training data for the mini-GPT: a generated arithmetic corpus, a character tokenizer, batches.

Nothing is downloaded and no data file ships: the default corpus is *generated* from a seed, so
every install, test and tutorial sees the same text. ``--data PATH`` trains on any UTF-8 text file
with the same character tokenizer instead (`load_dataset`).

The default corpus: arithmetic lines
------------------------------------
Every problem ``a op b`` with ``0 <= a, b <= max_operand`` (99) and ``op`` in ``"+-"`` is written
once, as a line ``a op b = answer``, in an order shuffled by the seed. The training text of
seed 0 begins:

    89-86=3
    5+62=67
    76+37=113
    29-12=17
    42+70=112
    82-40=42
    11-97=-86

That is 2 * 100 * 100 = 20,000 lines, 184,035 characters (9.2 per line), built in about 20 ms;
the vocabulary is the 14 characters ``"\\n+-0123456789="``. Why arithmetic rather than prose or a
toy grammar:

* **Correctness is measurable.** The answer of every line is determined by its question, so a
  trainer can report *task accuracy* (`answer_accuracy`), not only loss.
* **The loss has a known floor.** The operands and the operator are uniform and independent, the
  rest of a line is determined by them, so the entropy of a line is ``ln(#problems)`` and the best
  cross-entropy per character is that divided by the mean line length (`arithmetic_loss_floor`,
  1.076 nats for the default). A loss curve can be drawn against the line "knows arithmetic
  perfectly". A loss averaged over windows of ``B >= 7`` characters sits higher, because a
  window's first characters do not see where their line starts: that model then scores
  1.076 + 4.059 / B, 1.203 for ``train_tiny``'s 32-character windows and 1.140 for 64
  (``arithmetic_loss_floor(block_size=B)``, `Dataset.window_loss_floor`).
* **Graded difficulty.** To a model that knows the rule, the answer and the newline cost nothing;
  ``=`` costs 0.22 nats on average (it tells whether the second operand has one digit or two), the
  operator 0.91 (ln 2 for which one, plus those 0.22 about the first operand), and the operand
  digits are irreducibly random (2.31 nats each on average). Answer digits need the carry/borrow
  and, for ``-``, the sign: a model that learned only the format stalls visibly above the floor.
* **Generalisation, not memorisation.** The validation split holds problems that never occur in the
  training split (a held-out 10% of the 20,000), so validation accuracy measures arithmetic
  learned. (``b+a`` may be in training when ``a+b`` is held out: commutativity is fair to learn.)
* **Small and fast.** 14 tokens keep the embedding and the LM head tiny on a 2-core CPU.

Answers are written most significant digit first, as people write them. Writing them reversed is
known to make addition easier for small transformers (Lee et al. 2023, "Teaching Arithmetic to
Small Transformers", arXiv:2307.03381); plain order is kept here for readability.

API
---
- `arithmetic_corpus`, `arithmetic_loss_floor`: the generated text and its loss floor.
- `CharTokenizer`: characters <-> int64 ids (nanoGPT's character-level scheme).
- `load_text`: a UTF-8 text file, with a clear error for anything else.
- `Dataset` and `load_dataset`: train/val token arrays and random ``(x, y)`` batches.
- `answer_accuracy` and `answer_mask`: teacher-forced task accuracy on answers.

Examples
--------
>>> import numpy as np
>>> from minifp8.data import load_dataset
>>> data = load_dataset()                      # the arithmetic corpus, seed 0
>>> data.vocab_size, data.task
(14, 'arithmetic')
>>> x, y = data.get_batch("train", 4, 32, np.random.default_rng(0))
>>> x.shape, bool((x[:, 1:] == y[:, :-1]).all())
((4, 32), True)
"""
from __future__ import annotations

import functools
import hashlib
import math
import os
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .formats import _check_int, _check_str_choice, _is_real, _plain_array

__all__ = [
    "AnswerAccuracy", "CharTokenizer", "Dataset", "OPERATORS", "SPLITS", "answer_accuracy",
    "answer_mask", "arithmetic_corpus", "arithmetic_loss_floor", "load_dataset", "load_text",
]

#: The operators an arithmetic corpus may use, with the integer operation each one denotes.
OPERATORS: dict[str, np.ufunc] = {"+": np.add, "-": np.subtract, "*": np.multiply}

#: The names `Dataset.get_batch` accepts.
SPLITS = ("train", "val")


# ---- argument checks ---------------------------------------------------------------------------

def _check_fraction(name: str, value) -> float:
    """A float strictly between 0 and 1."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value!r}")
    return float(value)


def _held_out_count(total: int, val_fraction: float, what: str) -> int:
    """How many of ``total`` items go to validation: round(total * val_fraction), at least 1 each."""
    count = round(total * val_fraction)
    if not 1 <= count <= total - 1:
        raise ValueError(
            f"val_fraction={val_fraction} of {total} {what} leaves an empty train or val split; "
            f"use more {what} (or, calling the API, another val_fraction)")
    return count


# ---- the arithmetic corpus ---------------------------------------------------------------------

def _check_corpus(max_operand, operators) -> tuple[int, str]:
    """The arithmetic corpus' ``max_operand`` (an int in [1, 999]) and ``operators`` (distinct
    characters of `OPERATORS`), checked; the operand as a Python int."""
    max_operand = _check_int(max_operand, "max_operand", 1, 999)
    if not isinstance(operators, str):
        raise TypeError(f"operators must be a str drawn from {''.join(OPERATORS)!r}, got {operators!r}")
    if not operators or set(operators) - set(OPERATORS) or len(set(operators)) != len(operators):
        raise ValueError(f"operators must be distinct characters from {''.join(OPERATORS)!r}, "
                         f"got {operators!r}")
    return max_operand, str(operators)


def _arithmetic_lines(max_operand, operators) -> list[str]:
    """Every line ``f"{a}{op}{b}={a op b}\\n"``, operator-major then a then b (a fixed order)."""
    max_operand, operators = _check_corpus(max_operand, operators)
    values = np.arange(max_operand + 1, dtype=np.int64)
    left, right = (grid.ravel() for grid in np.meshgrid(values, values, indexing="ij"))
    lines = []
    for op in operators:
        result = OPERATORS[op](left, right)
        # String formatting has no fast NumPy form (np.char.add is ~7x slower than this join).
        lines += [f"{a}{op}{b}={c}\n" for a, b, c in zip(left.tolist(), right.tolist(), result.tolist())]
    return lines


def arithmetic_corpus(seed: int = 0, *, max_operand: int = 99, operators: str = "+-",
                      val_fraction: float = 0.1) -> tuple[str, str]:
    """The default corpus: every arithmetic problem once, shuffled, split into held-out problems.

    Parameters
    ----------
    seed : int
        Seed of the ``np.random.default_rng`` that shuffles the lines. Same seed, same text.
    max_operand : int
        Operands run over ``0..max_operand`` (1 to 999).
    operators : str
        Distinct characters from ``"+-*"``. ``-`` gives negative answers (``3-41=-38``).
    val_fraction : float
        Fraction of the *problems* held out for validation (strictly between 0 and 1).

    Returns
    -------
    (train_text, val_text) : tuple of str
        ``len(operators) * (max_operand + 1)**2`` lines in all, each ``a op b = answer`` ending in
        ``"\\n"``, with no line in both. The validation lines are the first
        ``round(total * val_fraction)`` of one seeded permutation, the training lines the rest.
    """
    seed = _check_int(seed, "seed", 0)
    lines = _arithmetic_lines(max_operand, operators)
    val_count = _held_out_count(len(lines), _check_fraction("val_fraction", val_fraction), "lines")
    order = np.random.default_rng(seed).permutation(len(lines))
    val_text = "".join([lines[i] for i in order[:val_count].tolist()])
    train_text = "".join([lines[i] for i in order[val_count:].tolist()])
    return train_text, val_text


def arithmetic_loss_floor(max_operand: int = 99, operators: str = "+-", *,
                          block_size: int | None = None) -> float:
    """The best achievable cross-entropy on the arithmetic corpus, in nats per character.

    A line is fixed by its operands and operator, drawn uniformly from ``P`` equally likely
    problems, and every line is a different string, so a line carries ``ln P`` nats. For a stream
    of independent lines the entropy rate is ``ln P / E[line length]`` (characters, newline
    included): the loss of a model that knows the generating rule exactly, and a lower bound on the
    expected per-character loss of any model on an i.i.d. stream. (The corpus is a permutation, not
    i.i.d.; a model below the floor has memorised which problems occur.)

    For the default corpus: P = 20,000, mean line length 9.20175, floor = 1.0763 nats/char. On one
    split the same model scores ``ln P`` over that split's mean line length: 1.0757 on seed 0's
    validation lines (9.2065 characters on average).

    Parameters
    ----------
    max_operand, operators
        The corpus, as in `arithmetic_corpus`.
    block_size : int or None
        None: the entropy rate above (whole lines of context). An int ``B >= 1``: the floor of a
        loss averaged over the ``B`` predictions of a window, each from the characters before it
        in the window, as ``train_tiny``'s loss is. It is higher, because a window's first
        characters do not see where their line starts: by the chain rule it is
        ``(H(B + 1) - H(1)) / B``, with ``H(n)`` the entropy of ``n`` consecutive characters at a
        random position of the stream (`_block_entropy`). Once ``B`` reaches the longest line, every
        later prediction has a newline in its context and costs the entropy rate, so the floor is
        the rate plus a fixed excess over ``B``: for the default corpus 1.0763 + 4.059 / B, 1.2031
        for ``train_tiny``'s 32-character windows and 1.1397 for 64. Its cost grows with the
        corpus: about 0.1 s for the default one, and about 1 KB of memory a line (0.9 GB and 12 s
        for ``max_operand=999`` with ``"+"``, a million lines: measured 2026-12-03). Each floor is
        computed once in a process (the last 16 are kept): a sweep of runs, or a figure beside
        them, asks for the same one.
    """
    max_operand, operators = _check_corpus(max_operand, operators)
    return _loss_floor(max_operand, operators, None if block_size is None else _check_int(block_size, "block_size", 1))


@functools.lru_cache(maxsize=16)
def _loss_floor(max_operand: int, operators: str, block_size: int | None) -> float:
    """`arithmetic_loss_floor` of checked arguments."""
    lines = _arithmetic_lines(max_operand, operators)
    mean_length = sum(map(len, lines)) / len(lines)
    rate = math.log(len(lines)) / mean_length
    if block_size is None:
        return rate
    stream = _Stream(lines)
    longest = int(stream.lengths.max())
    if block_size < longest:
        return (stream.block_entropy(block_size + 1) - stream.block_entropy(1)) / block_size
    excess = stream.block_entropy(longest + 1) - stream.block_entropy(1) - longest * rate
    return rate + excess / block_size


class _Stream:
    """A stream of lines drawn independently and uniformly from ``lines``, for `arithmetic_loss_floor`.

    Characters are codes 1..15 in one flat array (``codes``) with the longest line's width of zeros
    after it, so that a string of up to 15 characters is one base-16 int64, distinct for distinct
    strings, read from where it starts.
    """

    def __init__(self, lines: list[str]):
        self.lengths = np.array([len(line) for line in lines], dtype=np.int64)
        self.line_starts = np.cumsum(self.lengths) - self.lengths
        text = np.frombuffer("".join(lines).encode("ascii"), dtype=np.uint8)
        code_of = np.zeros(256, dtype=np.int64)
        present = np.unique(text)
        code_of[present] = np.arange(1, present.size + 1)
        self.width = int(self.lengths.max())
        self.codes = np.concatenate([code_of[text], np.zeros(self.width, dtype=np.int64)])

    def _nats(self, starts: np.ndarray, length: np.ndarray, out_of: int) -> float:
        """The sum over the strings ``codes[start:start + length]`` of ``-ln(count / out_of)``, where
        ``count`` is how many of these strings equal that one."""
        keys = np.zeros(starts.size, dtype=np.int64)
        for column in range(self.width):  # (a column at a time: strings x width would be large)
            keys |= np.where(column < length, self.codes[starts + column], 0) << (4 * column)
        counts = np.unique(keys, return_counts=True)[1]
        return float(-np.sum(counts * np.log(counts / out_of)))

    def block_entropy(self, n: int) -> float:
        """The entropy, in nats, of the ``n`` characters from a uniformly random position.

        Every (line, position) pair starts the window with probability ``1 / C``, ``C`` the
        characters of all lines. A window that ends inside its first line has probability (pairs
        that spell it) / ``C``. One that reaches its first newline, ``m`` characters in, splits
        there: (pairs whose rest of line is that part) / ``C``, times the probability that a fresh
        stream starts with the other ``n - m`` characters. That part's entropy, ``fresh[n - m]``,
        follows by recursion over the fresh stream's first line: all of it (``ln P`` nats, ``P``
        lines), or a prefix that some of the lines share.
        """
        lengths, problems = self.lengths, self.lengths.size
        fresh = np.zeros(n + 1)
        for count in range(1, n + 1):
            whole = lengths <= count
            cut = self.line_starts[~whole]
            fresh[count] = (np.sum(math.log(problems) + fresh[count - lengths[whole]])
                            + (self._nats(cut, np.full(cut.size, count), problems) if cut.size else 0.0)) / problems
        total = int(lengths.sum())
        starts = np.arange(total)
        rest = np.repeat(self.line_starts + lengths, lengths) - starts  # to the line's end, newline included
        inside = rest > n
        nats = np.sum(fresh[n - rest[~inside]]) + self._nats(starts[~inside], rest[~inside], total)
        if inside.any():
            nats += self._nats(starts[inside], np.full(int(inside.sum()), n), total)
        return float(nats) / total


# ---- character tokenizer -----------------------------------------------------------------------

#: Characters `CharTokenizer.encode` converts at a time (its temporaries take ~40 bytes a character).
_ENCODE_CHUNK = 1 << 18


def _code_points(text: str) -> np.ndarray:
    """The Unicode code points of ``text`` as int64, without a Python loop over characters."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int64)


class CharTokenizer:
    """One token per character: the vocabulary is the distinct characters of a text, sorted.

    Character ``chars[i]`` has id ``i``. This is nanoGPT's character-level scheme
    (``shakespeare_char/prepare.py``): ids follow code-point order, so a tokenizer is fully
    described by its ``chars`` string, and ``CharTokenizer(tok.chars) == tok``.

    Parameters
    ----------
    text : str
        Any non-empty text; its distinct characters become the vocabulary.
    """

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise TypeError(f"CharTokenizer needs a str, got {type(text).__name__}")
        if not text:
            raise ValueError("CharTokenizer needs a non-empty text to take its characters from")
        # sorted distinct code points, through a set: memory for the vocabulary only (np.unique would
        # sort an int64 copy of the whole text)
        self._code_points = np.array(sorted(map(ord, set(text))), dtype=np.int64)
        self.chars = self._decode_code_points(self._code_points)

    @property
    def vocab_size(self) -> int:
        """Number of distinct characters (ids run over ``0..vocab_size-1``)."""
        return int(self._code_points.size)

    @staticmethod
    def _decode_code_points(code_points: np.ndarray) -> str:
        return code_points.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")

    def encode(self, text: str) -> np.ndarray:
        """The ids of the characters of ``text``: a 1-D int64 array of ``len(text)``.

        Raises ``ValueError`` naming the first character that is not in the vocabulary.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode needs a str, got {type(text).__name__}")
        ids = np.empty(len(text), dtype=np.int64)
        first_unknown, unknown_count = None, 0
        # in chunks, so that the temporary arrays stay small however long the text (only ids is full-size)
        for start in range(0, len(text), _ENCODE_CHUNK):
            code_points = _code_points(text[start:start + _ENCODE_CHUNK])
            chunk = np.minimum(np.searchsorted(self._code_points, code_points), self.vocab_size - 1)
            unknown = self._code_points[chunk] != code_points
            if unknown.any():
                unknown_count += int(unknown.sum())
                if first_unknown is None:
                    first_unknown = start + int(np.argmax(unknown))
            ids[start:start + chunk.size] = chunk
        if first_unknown is not None:  # (set with the first unknown character: unknown_count > 0)
            char = text[first_unknown]
            raise ValueError(
                f"character {char!r} (U+{ord(char):04X}) at index {first_unknown} is not in the vocabulary "
                f"of {self.vocab_size} characters {self.chars!r} ({unknown_count} unknown in all)")
        return ids

    def decode(self, ids: ArrayLike) -> str:
        """The text of a 1-D sequence of ids (list or integer array)."""
        ids = _plain_array(ids, "decode: ids")
        if ids.size == 0 and ids.ndim == 1:
            return ""
        if ids.dtype == np.bool_ or not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"decode needs integer ids, got dtype {ids.dtype}")
        if ids.ndim != 1:
            raise ValueError(f"decode needs a 1-D sequence of ids, got shape {ids.shape}")
        bad = (ids < 0) | (ids >= self.vocab_size)
        if bad.any():
            raise ValueError(f"id {ids[np.argmax(bad)]} is out of range for a vocabulary of "
                             f"{self.vocab_size} characters (ids 0..{self.vocab_size - 1})")
        return self._decode_code_points(self._code_points[ids])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and self.chars == other.chars

    def __hash__(self) -> int:
        return hash(self.chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size}, chars={self.chars!r})"


# ---- text files --------------------------------------------------------------------------------

def load_text(path: str | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """Read a UTF-8 text file, with a clear error for anything that is not one.

    A leading UTF-8 byte-order mark is dropped and ``\\r\\n`` / ``\\r`` line ends become ``\\n`` (as
    Python's text mode does). Memory: at most the file's bytes plus the returned str (1, 2 or 4
    bytes a character, as CPython stores it: 4 once one character lies outside the Basic
    Multilingual Plane, e.g. an emoji), or twice the str while line ends are replaced.

    Raises
    ------
    TypeError
        ``path`` is not a str or os.PathLike.
    FileNotFoundError
        Nothing exists at ``path``.
    IsADirectoryError
        ``path`` is a directory.
    PermissionError
        The file (or a directory on its path) may not be read.
    ValueError
        ``path`` is not a regular file (a device, a pipe), is empty, contains NUL bytes (binary
        data, or UTF-16/32 text) or is not valid UTF-8 (the message gives the byte offset).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    shown = os.fsdecode(os.fspath(path))
    if not os.path.exists(path):
        raise FileNotFoundError(f"text file not found: {shown}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"expected a UTF-8 text file, got a directory: {shown}")
    if not os.path.isfile(path):
        raise ValueError(f"expected a regular UTF-8 text file, got a special file: {shown}")
    with open(path, "rb") as file:
        raw = file.read()
    if not raw:
        raise ValueError(f"text file is empty: {shown}")
    if b"\x00" in raw:
        raise ValueError(f"not a UTF-8 text file (contains NUL bytes at offset {raw.index(0)}: "
                         f"binary data, or UTF-16/32 text): {shown}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        # (utf-8-sig counts positions after a byte-order mark; the offset is the file's)
        offset = error.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        raise ValueError(f"not a UTF-8 text file (invalid byte 0x{raw[offset]:02X} at offset "
                         f"{offset}): {shown}") from None
    del raw  # (one replacement at a time: never more than two copies of the text alive)
    text = text.replace("\r\n", "\n")
    text = text.replace("\r", "\n")
    if not text:
        raise ValueError(f"text file is empty (only a byte-order mark): {shown}")
    return text


# ---- dataset and batches -----------------------------------------------------------------------

_HASHED_CHARACTERS = 1 << 20  # characters encoded and hashed at a time for `Dataset.text_sha256`


class Dataset:
    """A tokenized train/val pair of texts that hands out random training windows.

    Parameters
    ----------
    train_text, val_text : str
        The two splits. The tokenizer is built from both, so every character of either is known.
    name : str
        A description for logs (a file path, or the corpus and its seed).
    task : str or None
        ``"arithmetic"`` when `answer_accuracy` applies to this data, else None.
    loss_floor : float or None
        The best achievable loss in nats per character with whole lines of context, when known
        (`arithmetic_loss_floor`); a window's loss has a higher floor (`window_loss_floor`).

    Attributes
    ----------
    train, val : np.ndarray
        1-D int64 token ids of each split.
    tokenizer : CharTokenizer
    text_sha256 : str
        The SHA-256 (hex) of the training text then the validation text, in UTF-8 (lone surrogates
        passed through): for `load_dataset` of a file, its text as `load_text` reads it (no
        byte-order mark, ``\\n`` line ends), so for a file already so what ``sha256sum FILE``
        prints; for the arithmetic corpus, the text generated from its seed. ``train_tiny`` records
        it, so that ``--resume`` refuses to continue on another text. It covers the text, not where
        it is split: ``Dataset("ab", "c")`` and ``Dataset("a", "bc")`` share it (``train_tiny`` has
        one split per text, so its ``--resume`` check is not weakened).
    """

    def __init__(self, train_text: str, val_text: str, *, name: str = "text",
                 task: str | None = None, loss_floor: float | None = None):
        for split, text in (("train", train_text), ("val", val_text)):
            if not isinstance(text, str):
                raise TypeError(f"{split}_text must be a str, got {type(text).__name__}")
            if not text:
                raise ValueError(f"{split}_text is empty")
        if task is not None and _check_str_choice(task, "task", ("arithmetic",)) != "arithmetic":
            raise ValueError(f"task must be 'arithmetic' or None, got {task!r}")
        if loss_floor is not None and not (_is_real(loss_floor) and 0 <= loss_floor < math.inf):
            raise ValueError(f"loss_floor must be a finite number >= 0 (nats per character) or None, got "
                             f"{loss_floor!r}")
        # (the distinct characters of each split: train_text + val_text would copy the whole text)
        self.tokenizer = CharTokenizer("".join(set(train_text) | set(val_text)))
        self.train = self.tokenizer.encode(train_text)
        self.val = self.tokenizer.encode(val_text)
        digest = hashlib.sha256()
        for text in (train_text, val_text):  # a slice at a time: no UTF-8 copy of the whole text
            for start in range(0, len(text), _HASHED_CHARACTERS):
                digest.update(text[start:start + _HASHED_CHARACTERS].encode("utf-8", "surrogatepass"))
        self.text_sha256 = digest.hexdigest()
        self.name = name
        self.task = task
        self.loss_floor = loss_floor
        self._corpus: tuple[int, str] | None = None  # (max_operand, operators) of `arithmetic`'s corpus

    @classmethod
    def from_text(cls, text: str, *, val_fraction: float = 0.1, name: str = "text") -> "Dataset":
        """Split one text by position: the first ``1 - val_fraction`` trains, the rest validates.

        The validation part is the last ``round(len(text) * val_fraction)`` characters: split by
        position, as nanoGPT's character-level data preparation does (its count, ``n - int(0.9 n)``,
        can be one more).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        val_count = _held_out_count(len(text), _check_fraction("val_fraction", val_fraction), "characters")
        return cls(text[:-val_count], text[-val_count:], name=name)

    @classmethod
    def arithmetic(cls, seed: int = 0, *, max_operand: int = 99, operators: str = "+-",
                   val_fraction: float = 0.1) -> "Dataset":
        """The generated arithmetic corpus (`arithmetic_corpus`): validation problems are held out."""
        train_text, val_text = arithmetic_corpus(seed, max_operand=max_operand, operators=operators,
                                                 val_fraction=val_fraction)
        dataset = cls(train_text, val_text, task="arithmetic",
                      name=f"arithmetic(seed={seed}, max_operand={max_operand}, operators={operators!r})",
                      loss_floor=arithmetic_loss_floor(max_operand, operators))
        dataset._corpus = (max_operand, operators)
        return dataset

    def window_loss_floor(self, block_size: int) -> float | None:
        """The floor of a loss averaged over windows of ``block_size`` characters, as a model
        trained on this data reports it (`arithmetic_loss_floor`), or None where it is not known
        (any data but `arithmetic`'s)."""
        if self._corpus is None:
            return None
        max_operand, operators = self._corpus
        return arithmetic_loss_floor(max_operand, operators, block_size=block_size)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def get_batch(self, split: str, batch_size: int, block_size: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``batch_size`` random windows of ``block_size`` tokens and their next tokens.

        The window starts are ``rng.integers(0, n - block_size, size=batch_size)`` for a split of
        ``n`` tokens: one draw from ``rng`` per call and nothing else, so a run that saves and
        restores the generator's state resumes the same batches. Windows may overlap.

        Returns
        -------
        x, y : np.ndarray
            int64, shape ``(batch_size, block_size)``, C-contiguous, with
            ``y[b, t] = split[start_b + t + 1]`` the token after ``x[b, t] = split[start_b + t]``.
        """
        if _check_str_choice(split, "split", SPLITS) not in SPLITS:  # (an array would compare elementwise)
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        batch_size = _check_int(batch_size, "batch_size", 1)
        block_size = _check_int(block_size, "block_size", 1)
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
                            f"got {type(rng).__name__}")
        tokens = self.train if split == "train" else self.val
        if block_size >= tokens.size:
            raise ValueError(
                f"block_size={block_size} needs at least {block_size + 1} tokens (a window and its "
                f"next token), but the {split} split of {self.name} has {tokens.size}; use a smaller "
                f"block_size or more text")
        starts = rng.integers(0, tokens.size - block_size, size=batch_size)
        index = starts[:, None] + np.arange(block_size)
        return tokens[index], tokens[index + 1]

    def __repr__(self) -> str:
        return (f"Dataset({self.name}, vocab_size={self.vocab_size}, train={self.train.size:,} tokens, "
                f"val={self.val.size:,} tokens)")


def load_dataset(path: str | os.PathLike[str] | os.PathLike[bytes] | None = None, *, seed: int = 0,
                 val_fraction: float = 0.1) -> Dataset:
    """The data for ``train_tiny``: the arithmetic corpus when ``path`` is None, else a text file.

    ``seed`` (an int >= 0, checked either way) shuffles the arithmetic corpus and is ignored for a
    file. A file is read with
    `load_text` (so its errors apply) and split by position with `Dataset.from_text`.

    Memory for a file of N characters: at peak the text, its two splits and the int64 token ids,
    ``N * (2 c + 8)`` bytes with ``c`` = 1, 2 or 4 bytes per character as CPython stores the str
    (1 for ASCII or Latin-1 text; 4 once one character lies outside the Basic Multilingual Plane),
    plus a few MB: about 10 bytes per byte of an ASCII file, 16 at most per file byte.
    """
    if path is None:
        return Dataset.arithmetic(seed, val_fraction=val_fraction)
    _check_int(seed, "seed", 0)  # (a seed of "banana" passed with a file; refused without one)
    val_fraction = _check_fraction("val_fraction", val_fraction)  # (before a file is read)
    text, shown = load_text(path), os.fsdecode(os.fspath(path))
    try:
        return Dataset.from_text(text, val_fraction=val_fraction, name=shown)
    except ValueError as error:  # a file too short to split: name it, as load_text's errors do
        raise ValueError(f"{error}: {shown}") from None


# ---- task accuracy -----------------------------------------------------------------------------

@dataclass(frozen=True)
class AnswerAccuracy:
    """Counts from `answer_accuracy`. Add two to pool batches: ``total = a + b``.

    ``char_accuracy`` and ``exact_match`` are NaN when nothing was scored. Each count is an int
    >= 0, and each correct count at most its total.
    """

    correct_chars: int
    total_chars: int
    correct_answers: int
    total_answers: int

    def __post_init__(self):
        for correct, total in (("correct_chars", "total_chars"), ("correct_answers", "total_answers")):
            object.__setattr__(self, total, _check_int(getattr(self, total), f"AnswerAccuracy: {total}", 0))
            object.__setattr__(self, correct, _check_int(getattr(self, correct), f"AnswerAccuracy: {correct}", 0,
                                                         getattr(self, total)))

    @property
    def char_accuracy(self) -> float:
        """Fraction of answer characters (sign, digits, closing newline) predicted exactly."""
        return self.correct_chars / self.total_chars if self.total_chars else math.nan

    @property
    def exact_match(self) -> float:
        """Fraction of answers with every character right, each predicted from the true text before
        it (teacher forcing; `answer_accuracy` says when greedy decoding would write the same)."""
        return self.correct_answers / self.total_answers if self.total_answers else math.nan

    def __add__(self, other: "AnswerAccuracy") -> "AnswerAccuracy":
        if not isinstance(other, AnswerAccuracy):
            return NotImplemented
        return AnswerAccuracy(self.correct_chars + other.correct_chars,
                              self.total_chars + other.total_chars,
                              self.correct_answers + other.correct_answers,
                              self.total_answers + other.total_answers)


def _check_ids(name: str, ids: np.ndarray, tokenizer: CharTokenizer) -> None:
    """ValueError naming the first id of ``ids`` that is not one of ``tokenizer``'s."""
    bad = (ids < 0) | (ids >= tokenizer.vocab_size)
    if bad.any():
        raise ValueError(f"{name} hold id {ids.flat[np.argmax(bad)]}, outside the vocabulary of "
                         f"{tokenizer.vocab_size} characters (ids 0..{tokenizer.vocab_size - 1})")


def _check_windows(inputs, targets, tokenizer):
    """Validate (inputs, targets) windows and return the full sequences plus the '='/newline ids."""
    if not isinstance(tokenizer, CharTokenizer):
        raise TypeError(f"tokenizer must be a CharTokenizer, got {type(tokenizer).__name__}")
    if "=" not in tokenizer.chars or "\n" not in tokenizer.chars:
        raise ValueError("answer accuracy needs '=' and '\\n' in the vocabulary (the arithmetic "
                         f"corpus); this tokenizer has {tokenizer.chars!r}")
    arrays = []
    for name, array in (("inputs", inputs), ("targets", targets)):
        array = _plain_array(array, name)
        if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"{name} must hold integer token ids, got dtype {array.dtype}")
        if array.ndim != 2:
            raise ValueError(f"{name} must have shape (batch, block), got {array.shape}")
        _check_ids(name, array, tokenizer)
        arrays.append(array)
    inputs, targets = arrays
    if inputs.shape != targets.shape:
        raise ValueError(f"inputs and targets must have the same shape, got {inputs.shape} and "
                         f"{targets.shape}")
    if not np.array_equal(inputs[:, 1:], targets[:, :-1]):
        raise ValueError("targets must be inputs shifted by one token (y[:, t] == x[:, t + 1]), "
                         "as returned by Dataset.get_batch")
    sequence = np.concatenate([inputs[:, :1], targets], axis=1)      # (batch, block + 1)
    equals_id, newline_id = (tokenizer.chars.index(c) for c in "=\n")
    return sequence, equals_id, newline_id


def _answer_spans(sequence: np.ndarray, equals_id: int, newline_id: int):
    """For each position of ``sequence`` (batch, L): is it a scored answer character, and which answer.

    Position j is a scored answer character when (1) the last '=' or newline before j is an '='
    (j lies after the '=' and up to and including the newline that ends the line), (2) a newline
    occurs before j (the whole question is in the window) and (3) a newline occurs at or after j
    (the whole answer is in the window). Answers are identified by the flat index of the newline
    that starts their line, so a line with a second '=' ("1=2=3") is one answer, "2=3\n", as the
    scored positions say (keyed by the last '=', it counted as two).
    """
    batch, length = sequence.shape
    if length == 0:  # windows of no token: nothing to score
        return np.zeros((batch, 0), bool), np.zeros((batch, 0), np.int64)
    positions = np.arange(length)
    rows = np.arange(batch)[:, None]
    is_equals = sequence == equals_id
    is_newline = sequence == newline_id

    def last_before(mark):   # index of the last marked position strictly before j, -1 if none
        last = np.maximum.accumulate(np.where(mark, positions, -1), axis=1)
        return np.concatenate([np.full((batch, 1), -1), last[:, :-1]], axis=1)

    last_marker = last_before(is_equals | is_newline)
    after_equals = (last_marker >= 0) & is_equals[rows, np.maximum(last_marker, 0)]
    question_seen = last_before(is_newline) >= 0
    next_newline = np.minimum.accumulate(np.where(is_newline, positions, length)[:, ::-1], axis=1)[:, ::-1]
    answer_ends = next_newline < length
    return after_equals & question_seen & answer_ends, rows * length + last_before(is_newline)


def answer_mask(inputs: ArrayLike, targets: ArrayLike, tokenizer: CharTokenizer) -> np.ndarray:
    """Boolean (batch, block): True where ``targets[b, t]`` is a scored answer character.

    An answer is what follows ``=`` on a line, up to and including the newline that ends it (a
    minus sign, the digits, ``\\n``: the newline is scored because stopping is part of the answer).
    Only *complete* lines count: the newline before the question and the one ending the answer must
    both be inside the window ``inputs[b, 0], targets[b, :]``; an answer cut by either window edge
    is not scored (its operands, or its end, are unseen).
    """
    sequence, equals_id, newline_id = _check_windows(inputs, targets, tokenizer)
    scored, _ = _answer_spans(sequence, equals_id, newline_id)
    return scored[:, 1:]


def answer_accuracy(inputs: ArrayLike, targets: ArrayLike, predictions: ArrayLike,
                    tokenizer: CharTokenizer) -> AnswerAccuracy:
    """Teacher-forced task accuracy on the answers of arithmetic windows.

    Parameters
    ----------
    inputs, targets : array of int, shape (batch, block)
        A batch from `Dataset.get_batch` (``targets`` is ``inputs`` shifted by one). A ValueError
        names the first id outside ``0..tokenizer.vocab_size - 1`` (here and in ``predictions``).
    predictions : array of int, shape (batch, block)
        The model's predicted next token at every position, e.g. ``logits.argmax(-1)`` for the
        logits of ``model(inputs)``: ``predictions[b, t]`` is its guess for ``targets[b, t]``.
    tokenizer : CharTokenizer
        Must contain ``=`` and ``\\n``.

    Returns
    -------
    AnswerAccuracy
        Over the answer characters that `answer_mask` selects: how many were predicted exactly
        (``char_accuracy``), and how many whole answers had every character right
        (``exact_match``). Each prediction sees the true preceding text (teacher forcing), so
        ``exact_match`` is also the fraction of answers that greedy decoding from the question would
        write exactly (each greedy step then sees the same context), for a model whose prediction
        at ``t`` depends on the tokens up to ``t`` only, and not on how many follow: the standard
        family under fp32, fp8 (or ``unit``, the same casts) and delayed. The unit family's attention scale depends on
        the input's length (u-muP's causal rule, `minifp8.unit.scaled_dot_product_attention`), and
        ``current``'s, ``mxfp8``'s and ``blockwise``'s scales on later tokens (``blockwise``: the
        1x128 tiles of v run along the key axis), so there the count only approximates
        greedy decoding's (a review found 2.9% of a unit-family model's answer characters predicted
        otherwise from the prefix alone). ``char_accuracy`` is more generous than greedy decoding:
        a wrong digit does not derail the digits after it.

    Notes
    -----
    The counts are over answer *occurrences* in the windows, not over distinct problems: a line
    inside two overlapping windows counts twice, and a line of ``L`` characters (newline included)
    is whole, with the newline before it, in ``block - L + 1`` window placements (27 against 23 for
    6- and 10-character lines at ``block = 32``), so short problems weigh a little more.
    ``train_tiny``'s default evaluation (8 batches of 32 windows of 32 characters, seed 0) scores
    666 answers of 551 distinct problems, of the 2,000 held out.
    """
    sequence, equals_id, newline_id = _check_windows(inputs, targets, tokenizer)
    predictions = _plain_array(predictions, "predictions")
    if predictions.dtype == np.bool_ or not np.issubdtype(predictions.dtype, np.integer):
        raise TypeError(f"predictions must hold integer token ids (logits.argmax(-1)), got dtype "
                        f"{predictions.dtype}")
    _check_ids("predictions", predictions, tokenizer)
    if predictions.shape != sequence[:, 1:].shape:
        raise ValueError(f"predictions must have the shape of targets {sequence[:, 1:].shape}, got "
                         f"{predictions.shape} (pass logits.argmax(-1), not logits)")
    scored, answer_id = _answer_spans(sequence, equals_id, newline_id)
    scored, answer_id = scored[:, 1:], answer_id[:, 1:]
    correct = (predictions == sequence[:, 1:])[scored]
    _, answer_of_char = np.unique(answer_id[scored], return_inverse=True)
    answers = int(answer_of_char.max()) + 1 if answer_of_char.size else 0
    wrong_per_answer = np.bincount(answer_of_char.ravel()[~correct], minlength=answers)
    return AnswerAccuracy(correct_chars=int(correct.sum()), total_chars=int(correct.size),
                          correct_answers=int((wrong_per_answer == 0).sum()), total_answers=answers)
