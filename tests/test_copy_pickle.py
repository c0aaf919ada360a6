"""Copying and pickling: ``copy.copy``, ``copy.deepcopy``, ``pickle`` (every protocol) and a spawned
worker process.

The references are independent of the code under test: an uncopied twin trained the same way (the
copy's losses must match its losses bit for bit, and training the copy must leave it as it was),
gradients derived by hand, the bytes that a model's parameters and gradients occupy, and the fields
of the formats (their largest values worked out from the spec rule).
"""
import concurrent.futures
import copy
import multiprocessing
import pickle
import threading

import numpy as np
import pytest

from minifp8 import codec, formats, fp8, fp8lm, mx, optim, testing
from minifp8.autograd import Tensor, default_dtype, get_default_dtype, is_grad_enabled, no_grad
from minifp8.model import GPT, GPTConfig
from minifp8.nn import Parameter
from minifp8.train_tiny import LossScaler, TrainConfig

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)
BATCHES = np.random.default_rng(1).integers(0, 11, (6, 4, 9))  # (step, batch, block_size + 1) token ids


def pickled(obj, protocol=pickle.DEFAULT_PROTOCOL):
    return pickle.loads(pickle.dumps(obj, protocol=protocol))


COPIERS = {"deepcopy": copy.deepcopy, "pickle": pickled, "pickle-5": lambda obj: pickled(obj, 5)}


# ---- a training run: (model, FP8 state, optimizer) ---------------------------------------------------------

def training_run(family: str, recipe: str, optimizer: str, n_embd: int = 16):
    config = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=n_embd, family=family, dropout=0.1)
    model = GPT(config, rng=np.random.default_rng(0))
    options = {"history_len": 4, "saturate_gradients": True} if recipe == "delayed" else {}
    state = fp8.apply_recipe(model, recipe, **options)
    groups = model.optimizer_groups(1e-2, weight_decay=0.1)
    return model, state, optim.AdamW(groups) if optimizer == "adamw" else fp8lm.FP8AdamW(groups)


def forward_backward(run, step: int) -> float:
    model, _, optimizer = run
    optimizer.zero_grad()
    loss = model(BATCHES[step, :, :-1], BATCHES[step, :, 1:])[1]
    loss.backward()
    return float(loss.data)


def finish_step(run) -> None:
    run[2].step()
    run[1].step()


def train(run, steps) -> list[float]:
    losses = []
    for step in steps:
        losses.append(forward_backward(run, step))
        finish_step(run)
    return losses


def snapshot(run) -> dict:
    """Copies of everything a run's future depends on."""
    model, state, optimizer = run
    return copy.deepcopy({"model": model.state_dict(), "fp8": state.state_dict(), "optimizer": optimizer.state_dict()})


def same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    return a == b


@pytest.mark.parametrize("copier", COPIERS)
@pytest.mark.parametrize("family, recipe, optimizer", [
    ("standard", "delayed", "adamw"),     # amax histories
    ("unit", "mxfp8", "fp8adamw"),         # block casts (reused output arrays), FP8 moments
    ("standard", "blockwise", "fp8adamw"),
    ("unit", "current", "adamw"),
])
def test_a_run_copied_mid_step_continues_bit_identically_and_independently(copier, family, recipe, optimizer):
    run = training_run(family, recipe, optimizer)
    train(run, range(2))
    forward_backward(run, 2)  # gradients held, moments, histories, dropout's generator mid-stream
    twin = COPIERS[copier](run)
    before = snapshot(run)
    finish_step(twin)
    twin_losses = train(twin, range(3, 6))
    assert same(snapshot(run), before), "training the copy changed the original"
    finish_step(run)
    losses = train(run, range(3, 6))
    assert np.isfinite(losses).all()
    assert np.array_equal(twin_losses, losses)
    assert same(snapshot(twin), snapshot(run))


def test_copies_hold_no_cast_buffers():
    """The arrays a cast point reuses for its casts are scratch memory, many times the parameters'
    size: a pickle (a checkpoint, a message to a worker) or a deep copy holds the parameters and
    gradients, not them."""
    run = training_run("standard", "mxfp8", "adamw", n_embd=32)
    model, state, _ = run
    forward_backward(run, 0)
    needed = sum(p.data.nbytes + p.grad.nbytes for p in model.parameters())
    assert len(pickle.dumps((model, state))) < 1.2 * needed + 50_000
    copied_state = copy.deepcopy(state)
    assert all(not point._outputs for point in copied_state.points.values())
    assert any(point._outputs for point in state.points.values())  # (the original keeps its own)


# ---- tensors ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_leaf_round_trips_through_every_pickle_protocol(protocol):
    p = Parameter(np.arange(6.0).reshape(2, 3))
    p.grad = np.full((2, 3), 0.5, np.float32)
    ids = Tensor(np.arange(4))
    q, ids_back = pickled((p, ids), protocol)
    assert type(q) is Parameter and q.is_leaf and q.requires_grad and q.dtype == np.float32
    assert np.array_equal(q.data, np.arange(6.0).reshape(2, 3)) and np.array_equal(q.grad, np.full((2, 3), 0.5))
    assert not np.shares_memory(q.data, p.data) and not np.shares_memory(q.grad, p.grad)
    assert ids_back.dtype == ids.dtype and np.array_equal(ids_back.data, [0, 1, 2, 3]) and not ids_back.requires_grad
    (q * 3.0).sum().backward()  # d(3 sum q)/dq = 3, added to the 0.5 it carried
    assert np.array_equal(q.grad, np.full((2, 3), 3.5)) and np.array_equal(p.grad, np.full((2, 3), 0.5))


def test_an_ops_output_refuses_pickle_and_deepcopy_with_a_clear_error():
    """Its backward closure refers to the original's inputs: a deep copy would compute its gradients
    from them, behind its version checks (here 2 * 11 instead of 2 * 1 after the original's input
    moved on), and pickle cannot store it (it raised an AttributeError about a local object)."""
    x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    y = x * x
    message = r"cannot pickle or deep-copy Tensor\(shape=\(3,\).*op 'mul'.*t\.detach\(\)"
    for protocol in PROTOCOLS:
        with pytest.raises(TypeError, match=message):
            pickle.dumps(y, protocol=protocol)
    with pytest.raises(TypeError, match=message):
        copy.deepcopy(y)
    with pytest.raises(TypeError, match=message):
        copy.deepcopy({"outputs": [y]})
    values = pickled(y.detach())
    assert values.is_leaf and not values.requires_grad and np.array_equal(values.data, [1.0, 4.0, 9.0])


def test_a_models_loss_refuses_pickle_with_a_clear_error():
    for family in ("standard", "unit"):
        run = training_run(family, "fp32", "adamw")
        loss = run[0](BATCHES[0, :, :-1], BATCHES[0, :, 1:])[1]
        with pytest.raises(TypeError, match=r"cannot pickle or deep-copy Tensor\(shape=\(\), .*autograd graph"):
            pickle.dumps({"loss": loss})
        assert float(pickled(loss.detach()).data) == float(loss.data)


def test_copy_copy_of_an_ops_output_is_another_handle_on_the_same_node():
    x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    y = x * x
    z = copy.copy(y)
    assert z is not y and z.data is y.data and not z.is_leaf and z.requires_grad
    z.backward(np.ones(3))
    assert np.array_equal(x.grad, [2.0, 4.0, 6.0])  # d(x^2)/dx = 2x


def test_copies_take_nothing_from_the_thread_local_switches():
    """A copy keeps the original's dtype and requires_grad whatever ``no_grad`` and ``default_dtype``
    say in the thread that copies or loads it, and copying changes no switch."""
    p32 = Parameter(np.ones(3))
    with default_dtype(np.float64):
        p64 = Parameter(np.ones(3))
    blob = pickle.dumps((p32, p64))
    copies = {}

    def worker():
        with no_grad(), default_dtype(np.float64):
            copies["thread"] = (*pickle.loads(blob), copy.deepcopy(p32))
        copies["switches"] = (is_grad_enabled(), get_default_dtype())

    thread = threading.Thread(target=worker)
    with no_grad():  # (the main thread's switches do not reach the worker's either)
        thread.start()
        thread.join()
        copies["main"] = (*pickle.loads(blob), copy.deepcopy(p32))
    assert copies["switches"] == (True, np.float32) and is_grad_enabled() and get_default_dtype() == np.float32
    for a32, a64, b32 in (copies["thread"], copies["main"]):
        assert (a32.dtype, a64.dtype, b32.dtype) == (np.float32, np.float64, np.float32)
        assert a32.requires_grad and a64.requires_grad and b32.requires_grad
        (a32 * 2.0).sum().backward()
        assert np.array_equal(a32.grad, [2.0, 2.0, 2.0])


# ---- formats ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_catalogue_formats_come_back_as_themselves(protocol):
    """As enum members do: ``fmt is formats.E4M3`` holds for a loaded or copied E4M3."""
    for fmt in formats.CATALOGUE.values():
        assert pickled(fmt, protocol) is fmt
        assert copy.copy(fmt) is fmt and copy.deepcopy(fmt) is fmt
    x = np.linspace(-3.0, 3.0, 64, dtype=np.float32).reshape(2, 32)
    blocks = mx.quantize(x, "MXFP8_E4M3")
    loaded = pickled(blocks, protocol)
    assert loaded.elem is formats.E4M3 and np.array_equal(loaded.dequantize(), blocks.dequantize())
    for mx_format in mx.FORMATS.values():
        assert pickled(mx_format, protocol) is mx_format
        assert copy.copy(mx_format) is mx_format and copy.deepcopy(mx_format) is mx_format
    other = mx.MXFormat("MXFP8_E4M3", formats.E4M3, block_size=16)  # the name, not the block size
    back = pickled(other, protocol)
    assert back == other and back is not other and back.block_size == 16 and back != mx.MXFP8_E4M3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_other_formats_round_trip_by_their_fields(protocol):
    # largest finite values by the OFP8 rule (all-ones NaN: top code's mantissa is 110):
    # E4M3 fields with bias 8: 1.75 * 2**(15 - 8) = 224; E3M4 with bias 3: 1.875 * 2**(7 - 3) = 30
    imposter = formats.FloatFormat("E4M3", 4, 3, 8)  # E4M3's name, not its bias: not the catalogue's
    custom = formats.FloatFormat("E3M4", 3, 4, 3, aliases=("e3m4",))
    x = np.linspace(-40.0, 40.0, 97, dtype=np.float32)
    for fmt, largest in ((imposter, 224.0), (custom, 30.0)):
        back = pickled(fmt, protocol)
        assert back == fmt and hash(back) == hash(fmt) and back.aliases == fmt.aliases
        assert back.max == largest and back.max_code == fmt.max_code
        assert np.array_equal(back.values(), fmt.values(), equal_nan=True)
        assert np.array_equal(codec.encode(x, back), codec.encode(x, fmt))
    assert pickled(imposter, protocol) != formats.E4M3


# ---- configs, reports, a worker process ------------------------------------------------------------------

@pytest.mark.parametrize("copier", COPIERS)
def test_configs_and_reports_round_trip(copier):
    config = GPTConfig(vocab_size=11, block_size=8, n_layer=3, n_head=2, n_embd=16, family="unit", dropout=0.25)
    train_config = TrainConfig(recipe="delayed,mxfp8", steps=7, lr=0.5, fp8_optimizer="O3", out="somewhere")
    x = np.array([0.3, 1e-4, 500.0, -2.0], np.float32)
    report = testing.compare(codec.encode(x, "E4M3") ^ np.array([1, 0, 0, 0], np.uint8), x, "E4M3")
    scaler = LossScaler("dynamic", growth_interval=3)
    scaler.update(False)
    config_back, train_config_back, report_back, scaler_back = COPIERS[copier]((config, train_config, report, scaler))
    assert config_back == config and train_config_back == train_config
    assert report_back.mismatches == report.mismatches and str(report_back) == str(report) and not report_back.ok
    assert scaler_back.state_dict() == {"scale": 2.0 ** 15, "clean_steps": 0, "skipped": 1}


def _train_in_worker(blob: bytes, steps: range):
    run = pickle.loads(blob)
    return train(run, steps), run[0].state_dict()


def test_a_run_sent_to_a_spawned_worker_continues_there_bit_identically():
    run = training_run("unit", "delayed", "adamw")
    train(run, range(2))
    blob = pickle.dumps(run)  # (before the run moves on: the pool pickles its arguments in a thread)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        future = pool.submit(_train_in_worker, blob, range(2, 5))
        losses = train(run, range(2, 5))
        worker_losses, worker_weights = future.result(timeout=120)
    assert np.isfinite(losses).all() and np.array_equal(worker_losses, losses)
    assert same(worker_weights, run[0].state_dict())


# ---- pickles of earlier versions, and subclasses ------------------------------------------------------

# A leaf pickled by minifp8 at a55480d (before Tensor.__getstate__): data [1.5, -2], grad [0.25, 4].
OLD_LEAF = (b'\x80\x02cminifp8.autograd\nTensor\nq\x00)\x81q\x01N}q\x02(X\x05\x00\x00\x00_dataq\x03cnumpy._core.multiarray\n_reconstruct\nq\x04cnumpy\nndarray\nq\x05K\x00\x85q\x06c_codecs\nencode\nq\x07X\x01\x00\x00\x00bq\x08X\x06\x00\x00\x00latin1q\t\x86q\nRq\x0b\x87q\x0cRq\r(K\x01K\x02\x85q\x0ecnumpy\ndtype\nq\x0fX\x02\x00\x00\x00f4q\x10\x89\x88\x87q\x11Rq\x12(K\x03X\x01\x00\x00\x00<q\x13NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tq\x14b\x89h\x07X\n\x00\x00\x00\x00\x00\xc3\x80?\x00\x00\x00\xc3\x80q\x15h\t\x86q\x16Rq\x17tq\x18bX\x04\x00\x00\x00gradq\x19h\x04h\x05K\x00\x85q\x1ah\x0b\x87q\x1bRq\x1c(K\x01K\x02\x85q\x1dh\x12\x89h\x07X\n\x00\x00\x00\x00\x00\xc2\x80>\x00\x00\xc2\x80@q\x1eh\t\x86q\x1fRq tq!bX\x0e\x00\x00\x00_requires_gradq"\x88X\x08\x00\x00\x00_parentsq#)X\t\x00\x00\x00_backwardq$NX\x03\x00\x00\x00_opq%X\x00\x00\x00\x00q&X\x0c\x00\x00\x00_retain_gradq\'\x89X\x08\x00\x00\x00_versionq(]q)K\x00aX\x0f\x00\x00\x00_saved_versionsq*)X\r\x00\x00\x00_made_versionq+K\x00u\x86q,b.')


def test_a_leaf_pickled_by_an_earlier_version_loads():
    t = pickle.loads(OLD_LEAF)
    assert t.requires_grad and np.array_equal(t.data, [1.5, -2.0]) and np.array_equal(t.grad, [0.25, 4.0])
    (t * 2.0).sum().backward()
    assert np.array_equal(t.grad, [2.25, 6.0])


class Tagged(Parameter):  # a user's subclass with a __dict__
    pass


class Scaled(Tensor):  # a user's subclass with slots of its own
    __slots__ = ("scale",)


class Labelled(Tensor):  # one slot, spelled as a string
    __slots__ = "label"


class Private(Tensor):  # a private slot: stored as _Private__key
    __slots__ = ("__key",)

    def set_key(self, value):
        self.__key = value

    def key(self):
        return self.__key


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy, lambda t: pickle.loads(pickle.dumps(t)),
                                     lambda t: pickle.loads(pickle.dumps(t, protocol=0))])
def test_subclasses_keep_their_own_attributes(copier):
    p = Tagged(np.ones(2)); p.tag = "embedding"
    s = Scaled(np.ones(2)); s.scale = 0.5
    assert copier(p).tag == "embedding" and type(copier(p)) is Tagged
    assert copier(s).scale == 0.5
    labelled = Labelled(np.ones(2))
    labelled.label = "q"
    assert copier(labelled).label == "q"
    private = Private(np.ones(2))
    private.set_key(7)
    assert copier(private).key() == 7
