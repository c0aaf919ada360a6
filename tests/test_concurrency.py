"""Module-level state under threads: what one thread switches on stays in that thread, and caches
neither mix threads' work nor grow with every format a sweep makes.

Each race is forced into one order with events (never left to the scheduler), so a test passes
or fails the same way every run (but the last, which interleaves a training run with evaluations as
the scheduler lets them, and can fail only where the switches leak between threads):

- ``no_grad`` and ``default_dtype`` switch the calling thread only (torch's grad mode is
  per-thread too): another thread keeps recording graphs and making float32 tensors, two threads'
  blocks ended out of order leave each thread as it was, and a new thread starts from the defaults.
- A ``ScaleTracker`` records what its own thread tracks; another thread's ``track`` neither writes
  into it nor trips over it leaving (the stack was shared: an IndexError between check and look-up).
- Threads that cast big tensors at once share one cast pool (each made its own, then dropped all
  but the last); a process forked after the pool started makes its own (it waited forever on the
  parent's workers, which fork does not copy).
- Decode tables of formats made in a sweep are not kept without bound: a format made early is
  freed once enough others were made; the catalogue's tables stay; a format's table, rebuilt, holds
  the values the OFP8 spec gives.
- End to end: an FP8 model trained in one thread while another evaluates under ``no_grad`` ends
  with the weights of the same training run alone.
"""
import gc
import sys
import threading
import time
import warnings
import weakref

import numpy as np
import pytest

from minifp8 import codec, fastcast, formats, fp8, optim, scaling
from minifp8.autograd import Tensor, default_dtype, get_default_dtype, is_grad_enabled, no_grad
from minifp8.formats import FloatFormat
from minifp8.model import GPT, GPTConfig

WAIT = 10.0  # seconds an event waits at most: a test that would hang fails instead


def run_in_thread(target):
    """Start ``target`` in a new thread; its result (or exception) lands in the returned dict once joined."""
    result = {}

    def body():
        try:
            result["value"] = target()
        except BaseException as error:  # re-raised in the test's thread by `joined`
            result["error"] = error

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    result["thread"] = thread
    return result


def joined(result):
    result["thread"].join(WAIT)
    assert not result["thread"].is_alive(), "the helper thread did not finish"
    if "error" in result:
        raise result["error"]
    return result.get("value")


def wait(event):
    assert event.wait(WAIT), "an event was never set"


# ---- autograd's switches -----------------------------------------------------------------------
def interleave(switch):
    """Thread A enters ``switch()``, then thread B does; A leaves first, then B (out of order).
    Returns what B saw while only A was inside: (grad enabled, default dtype, whether B's op
    recorded a graph, B's gradient of sum(3 x) at x = [1, 2])."""
    a_inside, b_inside, a_left = threading.Event(), threading.Event(), threading.Event()

    def thread_a():
        with switch():
            a_inside.set()
            wait(b_inside)
        a_left.set()

    def thread_b():
        wait(a_inside)
        x = Tensor([1.0, 2.0], requires_grad=True)
        y = (x * 3.0).sum()
        seen = is_grad_enabled(), get_default_dtype(), y.requires_grad
        if y.requires_grad:
            y.backward()
        with switch():
            b_inside.set()
            wait(a_left)
        return (*seen, None if x.grad is None else x.grad.tolist())

    a, b = run_in_thread(thread_a), run_in_thread(thread_b)
    joined(a)
    return joined(b)


def test_no_grad_switches_its_own_thread_only():
    enabled, dtype, recorded, grad = interleave(no_grad)
    assert enabled and recorded and grad == [3.0, 3.0]  # d(sum 3x)/dx = 3, recorded beside A's no_grad
    # A and B left their blocks out of order: each restored its own thread, none leaked here
    assert is_grad_enabled() and (Tensor([1.0], requires_grad=True) * 2.0).requires_grad


def test_default_dtype_switches_its_own_thread_only():
    enabled, dtype, recorded, grad = interleave(lambda: default_dtype(np.float64))
    assert dtype == np.float32 and Tensor([0.1]).dtype == np.float32
    assert get_default_dtype() == np.float32 and Tensor([0.1]).data.dtype == np.float32


def test_a_new_thread_starts_with_the_defaults():
    with no_grad(), default_dtype(np.float64):
        inside = run_in_thread(lambda: (is_grad_enabled(), get_default_dtype(), Tensor([0.5]).dtype))
        assert joined(inside) == (True, np.float32, np.float32)
        assert not is_grad_enabled() and get_default_dtype() == np.float64  # still in force here


# ---- fp8's scale trackers ----------------------------------------------------------------------
def test_scale_tracker_records_its_own_thread_only():
    inside, done = threading.Event(), threading.Event()

    def owner():
        with fp8.ScaleTracker() as tracker:
            inside.set()
            wait(done)
        return tracker

    owner_result = run_in_thread(owner)
    wait(inside)
    x = np.ones(3, np.float32)
    returned = fp8.track("from_another_thread", x)
    done.set()
    assert list(joined(owner_result).records) == []
    assert returned is x  # outside a tracker of its own thread: x itself, no graph


def test_track_while_another_thread_leaves_its_tracker():
    """The other thread's tracker leaves while ``track`` converts its input (forced by the input's
    ``__array__``): with one shared stack the emptiness check passed and ``[-1]`` raised."""
    inside, leave, left = threading.Event(), threading.Event(), threading.Event()

    def owner():
        with fp8.ScaleTracker():
            inside.set()
            wait(leave)
        left.set()

    class ConvertsWhileTheTrackerLeaves:
        def __array__(self, dtype=None, copy=None):
            leave.set()
            wait(left)
            return np.ones(3, np.float32)

    owner_result = run_in_thread(owner)
    wait(inside)
    x = ConvertsWhileTheTrackerLeaves()
    try:
        returned = fp8.track("x", x)
    finally:
        leave.set()
        joined(owner_result)
    assert returned is x


# ---- fastcast's pool ---------------------------------------------------------------------------
def test_map_slices_returns_its_results_in_slice_order(monkeypatch):
    """A review's find: with threads the results came back grouped by thread ([(0, 1), (2, 3), (4, 5),
    (1, 2), ...]); every caller only summed them, but one that concatenated would have permuted rows."""
    monkeypatch.setattr(fastcast, "_CHUNK_ELEMENTS", 10)
    for threads in (1, 2, 3):
        monkeypatch.setattr(fastcast, "CAST_THREADS", threads)
        assert fastcast._map_slices(lambda start, stop: (start, stop), 7, 10) == [(i, i + 1) for i in range(7)]


def test_threads_casting_mixed_recipes_formats_and_shapes_at_once_match_serial_casts(monkeypatch):
    """Eight caller threads, each casting its own mix of recipes, formats and shapes (the per-thread scratch
    of each regrows and its caches turn over) through the shared pool, equal the same casts run one by one,
    bit for bit (a review found only equal-size fp8 casts tested at once)."""
    monkeypatch.setattr(fastcast, "CAST_THREADS", 2)
    rng = np.random.default_rng(31)
    jobs = []
    for i in range(24):
        shape = [(3, 700), (257, 129), (4096,), (64, 300)][i % 4]
        recipe = ["fp8", "current", "mxfp8", "blockwise"][i // 4 % 4]
        fmt = "E4M3" if i % 3 else "E5M2"
        x = (rng.standard_normal(shape) * 2.0 ** int(rng.integers(-20, 20))).astype(np.float32)
        if recipe in ("mxfp8", "blockwise") and x.ndim == 1:
            x = x.reshape(16, -1)
        jobs.append((x, recipe, fmt))

    def cast(job):
        x, recipe, fmt = job
        values, stats = fp8.fake_quantize(x, recipe, fmt)
        return values.tobytes(), stats

    serial = [cast(job) for job in jobs]
    results: dict = {}
    errors = []

    def worker(index):
        try:
            for turn in range(3):
                for j in range(index, len(jobs), 8):
                    results[(turn, j)] = cast(jobs[j])
        except Exception as error:  # (re-raised below, in the test's thread)
            errors.append(error)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (switch threads as often as possible)
    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert not errors, errors
    assert len(results) == 3 * len(jobs)
    for (turn, j), result in results.items():
        assert result == serial[j], (turn, j, jobs[j][1:])


def test_threads_casting_at_once_make_one_pool(monkeypatch):
    """The first thread makes the pool while a second starts casting: the second waits for that
    pool instead of making its own. The first makes it only once the second has asked for the lock
    (or, without the lock, has started making a pool of its own). Both casts equal codec.quantize,
    bit for bit."""
    first_making, second_arrived = threading.Event(), threading.Event()
    made = []

    class SlowToMake(fastcast.ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            made.append(self)
            if len(made) == 1:
                first_making.set()
                wait(second_arrived)
            else:
                second_arrived.set()
            super().__init__(*args, **kwargs)

    class LockThatSaysWhoWaits:
        """fastcast's pool lock; the second thread to ask for it sets ``second_arrived``."""

        def __init__(self):
            self.lock, self.asked = threading.Lock(), 0

        def __enter__(self):
            self.asked += 1  # (the second asks only after the first holds it: no race on the count)
            if self.asked == 2:
                second_arrived.set()
            self.lock.acquire()

        def __exit__(self, *exc_info):
            self.lock.release()

    monkeypatch.setattr(fastcast, "ThreadPoolExecutor", SlowToMake)
    monkeypatch.setattr(fastcast, "_pool_lock", LockThatSaysWhoWaits(), raising=False)
    monkeypatch.setattr(fastcast, "_pool", None)
    monkeypatch.setattr(fastcast, "_pool_workers", 0)
    monkeypatch.setattr(fastcast, "CAST_THREADS", 2)
    rng = np.random.default_rng(20)
    inputs = [(rng.standard_normal(2 * fastcast._CHUNK_ELEMENTS) * 8).astype(np.float32) for _ in range(2)]
    try:
        first = run_in_thread(lambda: fp8.fake_quantize(inputs[0], "fp8")[0])
        wait(first_making)
        second = run_in_thread(lambda: fp8.fake_quantize(inputs[1], "fp8")[0])
        values = [joined(first), joined(second)]
    finally:
        second_arrived.set()  # (a failed wait above must not leave the first thread waiting)
        for pool in made:
            if hasattr(pool, "_shutdown_lock"):  # (made whole)
                pool.shutdown()
    assert len(made) == 1
    for x, got in zip(inputs, values):
        want = codec.quantize(x, "E4M3", saturate=True)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_worker_slabs_keep_the_callers_error_state(monkeypatch):
    """NumPy's error state is per thread: a cast that ignores overflow while it rescales (FLT_MAX
    back through a power-of-2 scale is Inf) warned in the slabs the pool's workers ran, and with
    warnings as errors raised there, while the same value in this thread's slab did not (a review's
    find). One thread and two give the same bits and no warning."""
    monkeypatch.setattr(fastcast, "CAST_THREADS", 2)
    x = np.ones(2 * fastcast._CHUNK_ELEMENTS, np.float32)
    x[-1] = np.finfo(np.float32).max                 # in the last slab: a worker's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = fp8.fake_quantize(x, "current", power_of_2=True)[0]
        monkeypatch.setattr(fastcast, "CAST_THREADS", 1)
        alone = fp8.fake_quantize(x, "current", power_of_2=True)[0]
    assert got[-1] == np.inf and np.array_equal(got.view(np.uint32), alone.view(np.uint32))
    reference = scaling.quantize_current(x, power_of_2=True).dequantize()
    assert np.array_equal(got.view(np.uint32), reference.view(np.uint32))


# ---- formats' decode tables --------------------------------------------------------------------
FORKED_CAST = """
import multiprocessing, sys
import numpy as np
import pytest
from minifp8 import fastcast, fp8
fastcast.CAST_THREADS = 2  # a pool even on one core

def cast(queue):
    x = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)  # 2**20 elements: split
    queue.put(fp8.fake_quantize(x, "current")[0].tobytes())

if __name__ == "__main__":
    x = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)
    expected = fp8.fake_quantize(x, "current")[0].tobytes()  # the parent's pool has its worker now
    assert fastcast._pool is not None
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=cast, args=(queue,), daemon=True)  # (daemon: a hung child dies with us)
    child.start()
    got = queue.get(timeout=30)  # (the child hung, waiting on a worker it did not have: queue.Empty here)
    child.join(60)
    print("same" if got == expected else "different", child.exitcode)
"""


def test_a_forked_process_casts_with_a_pool_of_its_own(tmp_path):
    import multiprocessing
    import subprocess

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("this platform cannot fork")
    script = tmp_path / "forked_cast.py"
    script.write_text(FORKED_CAST, encoding="utf-8")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0 and result.stdout.split() == ["same", "0"], result.stdout + result.stderr


def test_a_format_sweep_keeps_a_bounded_number_of_tables():
    catalogued = {fmt: fmt.values() for fmt in formats.CATALOGUE.values()}
    first = FloatFormat("test_concurrency.sweep_first", 4, 3, 7)  # E4M3's fields
    first_table = weakref.ref(first.values())
    first = weakref.ref(first)
    for i in range(1000):
        FloatFormat(f"test_concurrency.sweep_{i}", 4, 3, 4 + i % 8)
    gc.collect()
    assert first() is None and first_table() is None  # nothing holds the first format any more
    assert formats._built_decode_table.cache_info().maxsize < 1000
    for fmt, table in catalogued.items():  # the catalogue's tables are kept for good
        assert fmt.values() is table
    # made again, its table is rebuilt: OFP8 E4M3 (bias 7): 2**-9, 2**-6 (smallest normal), 448, NaN
    again = FloatFormat("test_concurrency.sweep_first", 4, 3, 7).values()
    assert again[0x01] == 2.0**-9 and again[0x08] == 2.0**-6 and again[0x7E] == 448.0 and np.isnan(again[0x7F])
    assert again[0xFE] == -448.0 and not again.flags.writeable


def test_codec_keeps_a_bounded_number_of_float32_tables():
    # 128 KiB a table: unbounded, a sweep of a thousand custom formats kept 750 MB
    made = [FloatFormat(f"test_concurrency.codec_{i}", 4, 3, 4 + i % 8, has_infinity=i % 2 == 1,
                        nan_style="ieee" if i % 2 else "all_ones") for i in range(80)]
    for fmt in made:
        assert codec.encode(np.float32([1.0]), fmt)[0] == fmt.bias << 3  # 1.0: exponent field = bias
    assert codec._float32_tables.cache_info().currsize <= 64
    on_boundary, inside_interval = codec._float32_tables(made[-1], "nearest_even", False)
    assert not on_boundary.flags.writeable and not inside_interval.flags.writeable  # shared by every caller


# ---- end to end --------------------------------------------------------------------------------
def test_training_beside_an_evaluation_under_no_grad_matches_training_alone():
    config = dict(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16)
    ids = np.random.default_rng(3).integers(0, 16, (4, 9))

    def train():
        model = GPT(GPTConfig(**config), rng=np.random.default_rng(0))
        state = fp8.apply_recipe(model, "current")
        optimizer = optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(6):
            with fp8.ScaleTracker():
                _, loss = model(ids[:, :-1], ids[:, 1:])
                optimizer.zero_grad()
                loss.backward()
            optimizer.step()
            state.step()
        return np.concatenate([p.data.ravel() for p in model.parameters()])

    alone = train()
    stop, evaluations = threading.Event(), []

    def evaluate():
        model = GPT(GPTConfig(**config), rng=np.random.default_rng(1))
        while not stop.is_set():
            with no_grad(), fp8.ScaleTracker():
                model(ids[:, :-1], ids[:, 1:])
            evaluations.append(1)

    def trainer():
        while not evaluations and not stop.is_set():  # evaluations under way first
            time.sleep(0.001)
        try:
            return train()
        finally:
            stop.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often
    try:
        evaluator, training = run_in_thread(evaluate), run_in_thread(trainer)
        beside = joined(training)
        joined(evaluator)
    finally:
        sys.setswitchinterval(interval)
        stop.set()
    np.testing.assert_array_equal(beside, alone)
