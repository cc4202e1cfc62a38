"""Shared test setup: quiet TensorFlow logs, tiny configs and realistic random inputs."""

import gc
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _threads_per_worker():
    """The CPU cores each test process gets: the machine's cores shared among pytest-xdist's workers."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return str(max(1, (os.cpu_count() or 1) // workers))


# TensorFlow sizes its thread pools to every core of the machine in every process. With one test process per core
# (and the processes the tests start, which inherit this) the machine runs twice the threads it has cores, and a
# process's threads spin and wait for each other while the other process holds the core they need. Each xdist
# worker (and what it starts) therefore gets the pools of the cores it owns: one inter-op and one intra-op thread
# per worker on 2 cores. Measured on 2 cores (AMD EPYC, AVX-512; docs/results.md, 2026-12-06): two training-heavy
# files side by side (tests/test_finetuning.py's classification and regression, tests/test_long_documents.py),
# 89-92 s and 108-117 s with the default intra-op pool, 76 s and 94-102 s with one intra-op thread each, and less
# CPU time (user 90-94 and 85-89 s against 78-82 and 77-82 s). (Earlier, on an AVX2 machine, test_export.py and
# test_packing.py: 156 and 154 s with the default pools, 140 and 127 s with one inter-op thread, 136 and 128 s with
# one intra-op thread as well: files that train little.) A test that runs alone at the end of a run uses one core.
# Only in xdist's workers (the controller runs no TensorFlow, and what it set would reach the workers as a user's; a
# file run with `-n 0` keeps TensorFlow's defaults); a value already set wins.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", _threads_per_worker())
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", _threads_per_worker())

import numpy as np  # noqa: E402
import pytest  # noqa: E402


# Each test file's time budget: seconds of test time (setup, call and teardown of its tests, summed) on 2 AVX2-only
# cores, the slower kind. Together they make the suite's target: with two workers, under 20 minutes (the sum is
# 2,400 s). Set 2026-12-05 from each file's share of that day's run (its time there x 1.37 for AVX2, x 0.545 to fit
# the target), then scaled x0.97 when five files were added, so that a new file's time comes out of every share; the
# files far over theirs are where the suite's time must come from. No test fails on time (machines are noisy):
# every run's summary names the files over their budget. docs/development.md shows the same table (tests/test_docs.py
# checks it).
BUDGETS_S = {"test_guides.py": 190, "test_demo.py": 155, "test_pretraining.py": 155, "test_benchmark.py": 150,
             "test_export_bounds.py": 150, "test_finetuning.py": 130, "test_long_documents.py": 100,
             "test_packing.py": 95, "test_export.py": 90, "test_token_classification.py": 85,
             "test_export_precision.py": 75, "test_serving.py": 70, "test_serving_fuzz.py": 60,
             "test_generation.py": 55, "test_squad_simple.py": 55, "test_eval_during_training.py": 50,
             "test_buckets.py": 45, "test_pretraining_data.py": 45, "test_recompute.py": 45, "test_label_names.py": 40,
             "test_multi_label.py": 40, "test_remote_store.py": 35, "test_console.py": 30, "test_pipelines_data.py": 30,
             "test_prediction_rows.py": 30, "test_first_week_errors.py": 25, "test_serving_hostile.py": 25,
             "test_training_step.py": 25, "test_pipelines_predict.py": 20, "test_serving_production.py": 20,
             "test_serving_v2.py": 20, "test_cli_errors.py": 15, "test_distributed_inference.py": 15,
             "test_keras_saving.py": 15, "test_loss_scaling.py": 15, "test_model.py": 15, "test_remote_export.py": 15,
             "test_token_classification_data.py": 15, "test_tokenization.py": 15, "test_benchmark_serving.py": 10,
             "test_convert_run_options.py": 10, "test_finetuning_data.py": 10, "test_serving_rest.py": 10,
             "test_architecture.py": 5, "test_config.py": 5, "test_convert_faithful.py": 5, "test_docs.py": 5,
             "test_dropout.py": 5, "test_graph_words.py": 5, "test_hardware.py": 5, "test_heads.py": 5,
             "test_kubernetes.py": 5, "test_masks_positions.py": 5, "test_metrics.py": 5,
             "test_official_checkpoint.py": 5, "test_parity_transformers.py": 5, "test_request_logs.py": 5,
             "test_sample_data.py": 5, "test_sampling.py": 5, "test_serving_gate.py": 5, "test_serving_messages.py": 5,
             "test_serving_tls.py": 5, "test_tasks.py": 5}
DEFAULT_BUDGET_S = 5  # a file the table does not name


def pytest_collection_modifyitems(items):
    """The files with the largest budgets start first: with `--dist loadfile` each file runs whole on one worker, in
    collection order (setup.cfg's --no-loadscope-reorder: xdist would otherwise start the files with the most
    tests first), so a long file collected last would leave the other worker idle at the end. Every test runs,
    each file's tests in their own order."""
    items.sort(key=lambda item: -BUDGETS_S.get(os.path.basename(str(item.fspath)), 0))


# `make test-quick` (XLNET_TF_QUICK_TESTS=1, `-m "not slow"`): the tests that need no training run, no server and no
# subprocess. In that mode each of the three fails at once with what to do, so that a test that needs one of them is
# marked `slow` (it then runs in `make test` only) instead of making the quick loop slow.
QUICK = os.environ.get("XLNET_TF_QUICK_TESTS") == "1"
SESSION_START = pytest.StashKey[float]()


class NotQuick(AssertionError):
    """What a test run by `make test-quick` may not do."""


def _refused(what):
    def refuse(*args, **kwargs):
        raise NotQuick(f"{what} in `make test-quick`: mark the test @pytest.mark.slow (it then runs in `make test` "
                       "only), or make it quick (docs/development.md)")
    return refuse


@pytest.fixture(scope="session", autouse=QUICK)
def quick_only():
    """In `make test-quick`: a training run, a server or a subprocess fails the test (NotQuick); session-wide, so
    that the module fixtures are held to it too."""
    import subprocess

    from serving.server import ModelServer
    from xlnet_tf.training.loop import Trainer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", _refused("a subprocess"))
        patch.setattr(Trainer, "train", _refused("a training run (Trainer.train)"))
        patch.setattr(ModelServer, "start", _refused("a server (ModelServer.start)"))
        yield


@pytest.fixture(scope="module", autouse=True)
def survivors_frozen():
    """After each test file (its module fixtures torn down first): one full garbage collection, then `gc.freeze()`,
    so that later collections leave what survived alone. A worker keeps millions of objects alive by the end of a
    run, and every full collection walked them all: files that build many graphs late in a run spent most of
    their time collecting (docs/results.md, 2026-12-06). Only objects that outlived a full collection are frozen
    (the collector would have kept them), and refcounting still frees them when their last reference goes."""
    yield
    gc.collect()
    gc.freeze()


OP_TRACEBACKS_ENV = "XLNET_TF_TEST_OP_TRACEBACKS"  # "1": keep them (to see where a failing graph op was built)


@pytest.fixture(scope="session", autouse=True)
def op_tracebacks_off():
    """In the test processes only: TensorFlow keeps, for every graph op it builds, the Python stack that built it
    (the "defined at" lines of a graph's error message), and walking a test's stack (pytest's, the test's, Keras':
    about 90 frames) for each op was 3-6% of a training or export test's CPU time (docs/results.md, 2026-12-06,
    two runs side by side). Here a graph's error says "<stack traces unavailable>" instead; what the ops compute
    is the same. The processes the tests start (the commands, servers and guides) keep them, as a user's do."""
    if os.environ.get(OP_TRACEBACKS_ENV) == "1":
        yield
        return
    import inspect

    from tensorflow.python.framework import ops

    create = ops._create_c_op
    if "extract_traceback" not in inspect.signature(create).parameters:  # another TensorFlow: leave it as it is
        yield
        return

    def without_traceback(*args, **kwargs):
        kwargs["extract_traceback"] = False
        return create(*args, **kwargs)

    ops._create_c_op = without_traceback
    try:
        yield
    finally:
        ops._create_c_op = create


FILE_SECONDS = {}  # test file -> seconds of setup, call and teardown, summed (in xdist's controller: every worker's)
FILE_CPU_SECONDS = {}  # test file -> CPU seconds of its tests (`_tree_cpu_seconds`), summed the same way
CPU_PROPERTY = "cpu_s"  # the report's user property that carries a test's CPU seconds to the controller
_CPU_AT_START = {}  # in the test process: node id -> `_tree_cpu_seconds()` when the test's setup began


XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory"


@pytest.hookimpl(trylast=True)  # after the tmp_path plugin has set up its folders
def pytest_configure(config):
    """One persistent XLA compilation cache for the whole run (TensorFlow's own, TF_XLA_FLAGS), shared by the
    workers and every process the tests start (they inherit the environment): the training step's compiled parts
    (the GELU and its gradient, the dropout masks, `--jit-compile` steps) are compiled once per shape in the run
    instead of once per process, ~0.3-0.5 s each. The cache is keyed by the compiled program, so a hit runs the
    very program a compile would have made. It lives in the run's temporary folder (nothing is shared between
    runs). Set in the controller before the workers start; a TF_XLA_FLAGS that names a cache already wins."""
    if hasattr(config, "workerinput"):
        return
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if XLA_CACHE_FLAG in flags:
        return
    cache = config._tmp_path_factory.getbasetemp() / "xla-cache"
    cache.mkdir(exist_ok=True)
    os.environ["TF_XLA_FLAGS"] = f"{flags} {XLA_CACHE_FLAG}={cache}".strip()


def pytest_sessionstart(session):
    session.config.stash[SESSION_START] = time.monotonic()


def _tree_cpu_seconds():
    """CPU seconds (user + system) of this process and of every process under it: those still running, and those
    that ended and were waited for by this process or one under it (the commands a warm launcher forked, a server a
    test stopped). What the tests of a file cost a run on a busy machine, where their wall time also holds the
    other worker's share of the cores. Linux's /proc; None elsewhere."""
    try:
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    parents, seconds = {}, {}
    for name in names:
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        pid = int(name)
        parents[pid] = int(fields[1])
        seconds[pid] = sum(int(value) for value in fields[11:15]) / tick  # utime stime cutime cstime
    me, total = os.getpid(), 0.0
    for pid, own in seconds.items():
        ancestor = pid
        while ancestor not in (me, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        total += own if ancestor == me else 0.0
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Notes `_tree_cpu_seconds()` as the test begins (in the process that runs it: a worker, or pytest with -n 0)."""
    _CPU_AT_START[item.nodeid] = _tree_cpu_seconds()
    yield
    _CPU_AT_START.pop(item.nodeid, None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The teardown's report carries the test's CPU seconds (setup, call and teardown) as a user property, which
    xdist sends to the controller with it."""
    outcome = yield
    report = outcome.get_result()
    began = _CPU_AT_START.get(item.nodeid) if call.when == "teardown" else None
    now = _tree_cpu_seconds() if began is not None else None
    if now is not None:
        report.user_properties.append((CPU_PROPERTY, round(now - began, 2)))


def pytest_runtest_logreport(report):
    name = os.path.basename(report.nodeid.split("::", 1)[0])
    FILE_SECONDS[name] = FILE_SECONDS.get(name, 0.0) + report.duration
    for key, value in report.user_properties:
        if key == CPU_PROPERTY:
            FILE_CPU_SECONDS[name] = FILE_CPU_SECONDS.get(name, 0.0) + value


def pytest_terminal_summary(terminalreporter, config):
    """Every run ends with its wall time and the machine it ran on (the slowest steps: --durations in setup.cfg)."""
    began = config.stash.get(SESSION_START, None)
    if began is None or hasattr(config, "workerinput"):
        return
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    shown = [flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if flag in flags]
    wall = time.monotonic() - began
    budgets = {name: BUDGETS_S.get(name, DEFAULT_BUDGET_S) for name in FILE_SECONDS}
    over = sorted(((seconds, name) for name, seconds in FILE_SECONDS.items() if seconds > budgets[name]), reverse=True)
    if over and not QUICK:
        terminalreporter.write_line("test files over their time budget (seconds on this machine / the budget on 2 "
                                    "AVX2-only cores, tests/conftest.py BUDGETS_S): " + ", ".join(
                                        f"{name} {seconds:.0f} / {budgets[name]}" for seconds, name in over))
    if FILE_CPU_SECONDS:
        costly = sorted(((seconds, name) for name, seconds in FILE_CPU_SECONDS.items()), reverse=True)
        terminalreporter.write_line(
            f"CPU time of the tests {sum(FILE_CPU_SECONDS.values()):.0f} s (each test's process and every process it "
            "started); the 10 largest files (CPU s / wall s): " + ", ".join(
                f"{name} {seconds:.0f} / {FILE_SECONDS.get(name, 0.0):.0f}" for seconds, name in costly[:10]))
    target = "`make test-quick` under 4 min" if QUICK else "`make test` under 20 min"
    terminalreporter.write_line(f"suite wall time {wall / 60:.1f} min ({wall:.0f} s) on {os.cpu_count()} cores "
                                f"({' '.join(shown) or 'no AVX2'}); target: {target} on 2 AVX2-only cores, budgets "
                                "per test file in docs/development.md")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def warm_cli(tmp_path_factory):
    """One `xlnet-tf` per test process that forks each command from a process with TensorFlow imported already
    (tests/warm_cli.py, `WarmLauncher`: the guides' tour runs every command through it). For the commands a test
    starts beside its own work, where what it checks is the command's output, not the program's start: each
    skips the 3-5 s (one core) a fresh process spends importing TensorFlow, Keras and the rest. The console
    script as a program of its own is what tests/test_console.py, tests/test_cli_errors.py and tests/test_demo.py
    run."""
    from warm_cli import WarmLauncher

    with WarmLauncher(str(tmp_path_factory.mktemp("warm-cli"))) as launcher:
        yield launcher


def warm_command(launcher, *args):
    """The argv of `xlnet-tf ARGS` run through `launcher` (the `warm_cli` fixture)."""
    return [os.path.join(launcher.bin, "xlnet-tf"), *[str(a) for a in args]]


def say(text):
    """Prints past pytest's capture (capsys, which each in-process command's run reads and empties)."""
    print(text, file=sys.__stdout__, flush=True)


def check(label, value, bound, ok):
    """Asserts `ok`, printing the figure with its bound (one CHECK line, past the capture)."""
    say(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


def run_cli(argv, capsys):
    """(exit status, stdout, stderr) of `xlnet-tf ARGV` run in this process (argparse's exit is a status too)."""
    from xlnet_tf.cli import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def refused(label, argv, capsys, *words):
    """Runs `xlnet-tf ARGV` in this process as a user's mistake: exit status 2, one error line holding every one of
    `words`, no traceback (each checked and printed with its bound) -> that line."""
    began = time.monotonic()
    code, out, err = run_cli(argv, capsys)
    errors = [line for line in err.splitlines() if line.startswith("xlnet-tf ")]
    line = errors[-1] if errors else "(no error line)"
    say(f"{label} ({time.monotonic() - began:.1f} s): {line}")
    check(f"{label}: exit status", code, "2", code == 2)
    check(f"{label}: error lines", len(errors), "1", len(errors) == 1)
    check(f"{label}: traceback", "Traceback" in out + err, "False", "Traceback" not in out + err)
    check(f"{label}: words named", [w for w in words if w not in line], f"none missing of {list(words)}",
          all(w in line for w in words))
    return line


def check_close(name, got, want, bound=1e-5):
    """Asserts max |got - want| <= bound, printing the figure with its bound."""
    diff = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)), initial=0.0))
    print(f"{name}: max|diff| = {diff:.2e} (bound {bound:.0e})")
    assert diff <= bound, name


def ragged_ids(rng, lengths, vocab=64):
    """Random token ids in [9, vocab) as a ragged [N, None] int32 tensor with rows of `lengths`."""
    import tensorflow as tf

    return tf.ragged.constant([rng.integers(9, vocab, size=n).tolist() for n in lengths], dtype=tf.int32,
                              row_splits_dtype=tf.int64)


def tiny_config(**changes):
    from xlnet_tf.config import XLNetConfig

    values = dict(n_token=64, d_model=32, n_layer=2, n_head=4, d_head=8, d_inner=48, ff_activation="gelu", untie_r=True)
    values.update(changes)
    return XLNetConfig(**values)


def permutation_inputs(rng, batch=3, length=12, num_predict=4, vocab=64, pad_lengths=(0, 3, 6), left_pad=True):
    """Inputs as the pretraining data builds them: padding, two segments, a sampled factorization order.

    perm_mask[b, i, j] = 1 when j is a target that does not come before i in the order (so a target never
    sees itself); non-targets see each other only. target_mapping picks `num_predict` real targets per row.
    """
    input_ids = rng.integers(9, vocab, size=(batch, length)).astype(np.int32)
    padding = np.ones((batch, length), np.float32)
    segment = np.zeros((batch, length), np.int32)
    perm = np.zeros((batch, length, length), np.float32)
    mapping = np.zeros((batch, num_predict, length), np.float32)
    for b in range(batch):
        pad = pad_lengths[b % len(pad_lengths)]
        real = np.arange(pad, length) if left_pad else np.arange(0, length - pad)
        padded = np.setdiff1d(np.arange(length), real)
        padding[b, padded] = 0
        input_ids[b, padded] = 5  # <pad>
        segment[b, padded] = 4
        segment[b, real[len(real) // 2:]] = 1
        targets = rng.choice(real, size=num_predict, replace=False)
        order = np.full(length, -1)
        order[targets] = rng.permutation(num_predict)
        is_target = np.zeros(length, bool)
        is_target[targets] = True
        perm[b] = (is_target[None, :] & (order[None, :] >= order[:, None])).astype(np.float32)
        mapping[b, np.arange(num_predict), targets] = 1
    return {
        "input_ids": input_ids,
        "segment_ids": segment,
        "padding_mask": padding,
        "perm_mask": perm,
        "target_mapping": mapping,
    }


def tiny_spm(work, texts):
    """A SentencePiece model of 400 pieces trained on CPython's documentation text and `texts` -> its path (str)."""
    import pydoc_data.topics

    from xlnet_tf.tokenization import train_spm

    lines = [line.strip() for _, text in sorted(pydoc_data.topics.topics.items())
             for line in text.splitlines() if line.strip()]
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(lines[:1500] + list(texts) * 3) + "\n", encoding="utf-8")
    return train_spm(corpus, work / "spm" / "spiece", 400, minloglevel=2, num_threads=2)


def tiny_finetuned(work, name, finetune_config, config, seed, spm):
    """A tiny fine-tuned directory `work`/finetuned/`name` of `finetune_config`'s task (random weights,
    initializer_range 0.3) as `xlnet-tf finetune` writes it, with the SentencePiece model `spm` -> its path (str)."""
    import keras

    from xlnet_tf.config import RunOptions
    from xlnet_tf.heads import head_arguments, save_finetuned
    from xlnet_tf.tasks import build_head_model

    finetune_config = {"lower_case": False, "spm_model": "spiece.model", "doc_stride": 128, "max_query_len": 64,
                       **finetune_config}
    keras.utils.set_random_seed(seed)
    model = build_head_model(finetune_config["task"], config,
                             RunOptions(dropout=0.0, dropatt=0.0, initializer_range=0.3),
                             **head_arguments(finetune_config))
    model_dir = work / "finetuned" / name
    save_finetuned(model, str(model_dir), finetune_config, extra_files=[spm])
    return str(model_dir)


def tiny_finetuned_classifier(work, texts, config, max_seq_len, seed, label_names=("negative", "neutral", "positive")):
    """A tiny fine-tuned classification directory (random weights, initializer_range 0.3) under `work`, as
    `xlnet-tf finetune` writes it, with a SentencePiece model of 400 pieces trained on CPython's documentation
    text and `texts` -> its path (str)."""
    return tiny_finetuned(work, "cls", {"task": "classification", "max_seq_len": max_seq_len,
                                        "num_labels": len(label_names), "label_names": list(label_names)},
                          config, seed, tiny_spm(work, texts))


def resumes_bit_identical(make_trainer, tmp_path, what, steps=8, stop_at=4):
    """Trains `make_trainer(model_dir, steps)` straight through, and again stopped after step `stop_at` (as
    SIGTERM would: the loop saves and stops) then resumed by a new trainer; asserts the weights are the same to
    the bit, printing the figure with its bound."""
    import signal

    straight = make_trainer(tmp_path / "straight", steps)
    straight.train()
    first = make_trainer(tmp_path / "resumed", steps)
    counts = first.inputs.token_counts

    def stop_after(first_step, end_step):
        if end_step >= stop_at:
            first._stop_signal = signal.SIGTERM
        return counts(first_step, end_step)

    first.inputs.token_counts = stop_after
    first.train()
    stopped = int(first.step.numpy())
    second = make_trainer(tmp_path / "resumed", steps)
    second.train()
    diffs = [float(np.max(np.abs(a.numpy() - b.numpy()))) for a, b in zip(straight.model.weights, second.model.weights)]
    print(f"weights after {steps} steps vs stopped at step {stopped} and resumed ({what}): max |diff| "
          f"{max(diffs):.1e} (bound 0)")
    assert stopped == stop_at and max(diffs) == 0.0
