"""`xlnet-tf pretrain`: the loss falls, strategies agree (with and without --recompute), a killed float16 run
resumes exactly (with --recompute blocks and loss scaling), XLA, bfloat16 and float16 run (with recompute; float16
also with accumulation, its losses close to float32's), memory flows from step to step, and a NaN stops the run
keeping the last good checkpoint."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import warm_command
from xlnet_tf.cli import main

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`

SEQ_LEN, REUSE_LEN = 64, 32


def corpus_lines():
    import pydoc_data.topics

    for topic in pydoc_data.topics.topics.values():
        paragraphs = [" ".join(p.split()) for p in topic.split("\n\n") if p.strip()]
        yield from paragraphs
        yield ""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from xlnet_tf.data.pretraining import create_pretraining_data
    from xlnet_tf.tokenization import train_spm

    root = tmp_path_factory.mktemp("pretraining")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(corpus_lines()), encoding="utf-8")
    spm = train_spm([str(corpus)], str(root / "spm"), 800)
    out = root / "data"
    create_pretraining_data([str(corpus)], spm, str(out), seq_len=SEQ_LEN, reuse_len=REUSE_LEN, num_shards=2,
                            seed=1, progress=False)
    return str(out)


def pretrain_args(data_dir, model_dir, steps, *extra):
    return ["pretrain", "--data-dir", data_dir, "--model-dir", str(model_dir), "--model-size", "tiny",
            "--train-steps", str(steps), "--batch-size", "8", "--learning-rate", "2e-3", "--warmup-steps", "5",
            "--num-predict", "10", "--steps-per-loop", "1", "--save-every", "1000", *extra]


def losses(model_dir):
    with open(os.path.join(model_dir, "train_log.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f]


def cli_process(args, env=None, launcher=None):
    """`xlnet-tf ARGS` in a process of its own: the console script as a program, or forked by `launcher`
    (tests/conftest.py `warm_cli`) for a run beside the test's own that is not killed."""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    command = warm_command(launcher, *args) if launcher else [sys.executable, "-m", "xlnet_tf.cli", *args]
    return subprocess.Popen(command, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process, timeout=300):
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-3000:]
    return output


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_plm_loss_falls(data_dir, tmp_path):
    model_dir = tmp_path / "model"
    assert main(pretrain_args(data_dir, model_dir, 150, "--strategy", "one_device", "--steps-per-loop", "10",
                              "--dropout", "0.0", "--dropatt", "0.0")) == 0
    seen = losses(model_dir)
    first, last = seen[0], seen[-1]
    print(f"PLM loss over 150 steps: first 10 steps {first:.3f} -> last 10 steps {last:.3f} (bound: last < first - 1.0)")
    assert last < first - 1.0
    assert os.path.exists(model_dir / "training_curve.png") and os.path.exists(model_dir / "spiece.model")
    assert list((model_dir / "train").iterdir())  # TensorBoard events
    with open(os.path.join(model_dir, "train_log.jsonl")) as f:
        peaks = [json.loads(line)["peak_host_memory_mb"] for line in f]  # a CPU run: the process's peak RSS
    print(f"peak host memory per log line: {peaks[0]:.0f} .. {peaks[-1]:.0f} MiB (bounds: 100 MiB < each, "
          f"never decreasing)")
    assert len(peaks) == 15 and peaks[0] > 100 and peaks == sorted(peaks)
    from xlnet_tf.model import XLNetPretrainer

    XLNetPretrainer.from_pretrained(model_dir)  # the model directory is a pretrained directory


def test_same_loss_curve_on_one_device_mirrored_and_multi_worker(data_dir, warm_cli, tmp_path):
    """One device without recompute; mirrored recomputing blocks, multi-worker recomputing attention."""
    common = ("--dropout", "0.0", "--dropatt", "0.0")
    assert main(pretrain_args(data_dir, tmp_path / "one", 6, "--strategy", "one_device", *common)) == 0
    mirrored = cli_process(pretrain_args(data_dir, tmp_path / "mirrored", 6, "--strategy", "mirrored",
                                         "--cpu-devices", "2", "--recompute", "blocks", *common), launcher=warm_cli)
    ports = [free_port(), free_port()]
    workers = []
    for index in range(2):
        config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": index}}
        workers.append(cli_process(pretrain_args(data_dir, tmp_path / f"worker{index}", 6, "--strategy", "multi_worker",
                                                 "--recompute", "attention", *common),
                                   env={"TF_CONFIG": json.dumps(config)}))
    for process in [mirrored, *workers]:
        finish(process)
    one, two, multi = losses(tmp_path / "one"), losses(tmp_path / "mirrored"), losses(tmp_path / "worker0")
    worst = max(np.max(np.abs(np.subtract(one, two))), np.max(np.abs(np.subtract(one, multi))))
    print(f"one device {np.round(one, 4).tolist()}\nmirrored   {np.round(two, 4).tolist()}\n"
          f"multi-worker {np.round(multi, 4).tolist()}\nmax |diff| = {worst:.2e} (bound 1e-4)")
    assert len(one) == len(two) == len(multi) == 6 and worst <= 1e-4
    # Only the chief writes checkpoints; every worker keeps its own replicas' memory beside them.
    assert [p.name for p in (tmp_path / "worker1" / "checkpoints").iterdir()] == ["mems-6-worker1.npy"]


def test_killed_run_resumes_to_the_same_weights(data_dir, warm_cli, tmp_path):
    """SIGKILL in the middle, rerun the same command: same final weights as an uninterrupted run
    (deterministic ops, dropout on so the random state must resume too, memory on, blocks recomputed in the
    backward pass with the forward pass's dropout masks), in float16 with dynamic loss scaling from a scale
    that overflows and grows back every 2 finite steps: steps are skipped before and after the kill, so the
    scale, its counters and the data position must resume too (float32 resumes are checked in process by
    test_training_step and test_buckets)."""
    common = ("--strategy", "one_device", "--deterministic", "--save-every", "4", "--steps-per-loop", "2",
              "--recompute", "blocks", "--mixed-precision", "float16", "--initial-loss-scale", "1048576",
              "--loss-scale-growth-steps", "2")
    # The uninterrupted run goes on beside the killed one and its rerun (separate processes and directories).
    whole = cli_process(pretrain_args(data_dir, tmp_path / "whole", 16, *common), launcher=warm_cli)
    killed_dir = tmp_path / "killed"
    try:
        _kill_and_resume(data_dir, killed_dir, common)
        finish(whole)
    finally:
        if whole.poll() is None:  # a failure above: stop the uninterrupted run too
            whole.kill()
    a = tf.train.load_checkpoint(str(tmp_path / "whole" / "checkpoints" / "ckpt-16"))
    b = tf.train.load_checkpoint(str(killed_dir / "checkpoints" / "ckpt-16"))
    names = [n for n in a.get_variable_to_shape_map() if n.startswith(("model/", "optimizer/"))]
    worst = max(float(np.max(np.abs(a.get_tensor(n).astype(np.float64) - b.get_tensor(n)))) for n in names)
    print(f"{len(names)} variables compared: max |diff| = {worst:.2e} (bound 1e-6)")
    assert len(names) > 30 and worst <= 1e-6
    assert losses(killed_dir)[-1] == pytest.approx(losses(tmp_path / "whole")[-1], abs=1e-6)
    logs = {name: [json.loads(line) for line in open(tmp_path / name / "train_log.jsonl")]
            for name in ("whole", "killed")}
    skips = {name: [(r["step"], r["skipped_steps"]) for r in log] for name, log in logs.items()}
    at_kill = max(skipped for step, skipped in skips["killed"] if step <= 8)
    print(f"float16 (step, skipped steps) per call: whole {skips['whole']}, killed and resumed {skips['killed']}; "
          f"skipped by step 8 {at_kill} (bound > 0), at the end {skips['killed'][-1][1]} (bound > {at_kill}, == the "
          f"whole run's {skips['whole'][-1][1]}); loss scale at the end {logs['killed'][-1]['loss_scale']} (bound "
          f"== {logs['whole'][-1]['loss_scale']})")
    assert 0 < at_kill < skips["killed"][-1][1] == skips["whole"][-1][1]
    assert logs["killed"][-1]["loss_scale"] == logs["whole"][-1]["loss_scale"]


def _kill_and_resume(data_dir, killed_dir, common):
    """The run killed with SIGKILL once it has written ckpt-8, then the same command rerun to the end."""
    process = cli_process(pretrain_args(data_dir, killed_dir, 16, *common))
    marker = killed_dir / "checkpoints" / "ckpt-8.index"
    deadline = time.time() + 240
    while not marker.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    latest = tf.train.latest_checkpoint(str(killed_dir / "checkpoints"))
    print(f"killed after {latest}")
    assert latest is not None and not latest.endswith("ckpt-16")
    output = finish(cli_process(pretrain_args(data_dir, killed_dir, 16, *common)))
    assert "resuming from" in output


def test_xla_bfloat16_accumulation_and_mlm_runs_train(data_dir, tmp_path):
    from xlnet_tf.model import XLNetPretrainer

    for name, extra in (("xla", ["--jit-compile", "--recompute", "blocks"]),
                        ("bf16", ["--mixed-precision", "bfloat16", "--recompute", "attention"]),
                        ("accumulation", ["--grad-accum-steps", "2", "--batch-size", "4"]),
                        ("fp16", ["--mixed-precision", "float16", "--grad-accum-steps", "2", "--batch-size", "4",
                                  "--recompute", "blocks"]),
                        ("mlm", ["--objective", "mlm"])):
        model_dir = tmp_path / name
        assert main(pretrain_args(data_dir, model_dir, 40, "--strategy", "one_device", "--steps-per-loop", "10",
                                  "--dropout", "0.0", "--dropatt", "0.0", *extra)) == 0
        seen = losses(model_dir)
        print(f"{name}: loss {seen[0]:.3f} -> {seen[-1]:.3f} (bound: falls by > 0.3)")
        assert seen[-1] < seen[0] - 0.3
    # float16 (dynamic loss scaling, Keras' initial scale 2^15) with accumulation and recompute, against the float32
    # run with the same accumulation: the same data, seeds and schedule.
    half, full = losses(tmp_path / "fp16"), losses(tmp_path / "accumulation")
    last = json.loads(open(tmp_path / "fp16" / "train_log.jsonl").readlines()[-1])
    gap = abs(half[-1] - full[-1])
    print(f"float16 vs float32 (accumulation 2): losses {np.round(half, 3).tolist()} vs {np.round(full, 3).tolist()}, "
          f"at step {last['step']} |diff| {gap:.3f} (bound 0.15); steps skipped {last['skipped_steps']} (bound <= 2)")
    assert last["step"] == 40 and gap <= 0.15 and last["skipped_steps"] <= 2
    float_model = XLNetPretrainer.from_pretrained(tmp_path / "bf16", dropout=0.0, dropatt=0.0)
    bf16_model = XLNetPretrainer.from_pretrained(tmp_path / "bf16", dropout=0.0, dropatt=0.0, dtype="mixed_bfloat16")
    assert float_model.transformer.compute_dtype == "float32"
    assert all(v.dtype == "float32" for v in bf16_model.weights)  # float32 master weights
    ids = np.random.default_rng(0).integers(9, 800, size=(2, 16)).astype(np.int32)
    diff = float(np.max(np.abs(float_model({"input_ids": ids})["logits"] - bf16_model({"input_ids": ids})["logits"])))
    print(f"bf16-trained checkpoint in float32 vs bfloat16: logits max |diff| = {diff:.3f} (bound 0.5)")
    assert diff <= 0.5


def test_memory_flows_between_steps(data_dir, tmp_path):
    """The loss logged at step 2 is the one computed with step 1's cached states as memory."""
    from xlnet_tf.config import XLNetConfig, RunOptions
    from xlnet_tf.data.pretraining import pretraining_dataset
    from xlnet_tf.data.sampling import SamplingOptions
    from xlnet_tf.model import XLNetPretrainer
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    sampling = SamplingOptions(seq_len=SEQ_LEN, reuse_len=REUSE_LEN, num_predict=10)
    # A wide initialisation, so that attention is far from uniform and the memory visibly matters.
    run = RunOptions(dropout=0.0, dropatt=0.0, mem_len=REUSE_LEN, reuse_len=REUSE_LEN, initializer_range=0.3)
    config = XLNetConfig(n_token=800, d_model=32, n_layer=2, n_head=4, d_head=8, d_inner=64)

    def dataset_fn(context, start):
        return pretraining_dataset(data_dir, 4, sampling, seed=3, input_context=context, start_batch=start)

    def build():
        return XLNetPretrainer(config, run)

    trainer = Trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), build, lambda o, b: (o["loss_sum"], o["target_count"]),
                      dataset_fn, TrainingOptions(train_steps=1, batch_size=4, steps_per_loop=1, learning_rate=1e-3),
                      tmp_path / "m")
    trainer.train()
    weights = [v.numpy() for v in trainer.model.weights]
    memory = [m.numpy() for m in trainer.mems]
    batch2 = next(iter(dataset_fn(None, 1)))
    model = build()
    for target, value in zip(model.weights, weights):
        target.assign(value)
    with_memory = float(model(batch2, mems=memory)["loss"])
    zeros = float(model(batch2, mems=[np.zeros_like(m) for m in memory])["loss"])
    trainer.options = TrainingOptions(train_steps=2, batch_size=4, steps_per_loop=1, learning_rate=1e-3)
    logged = trainer.train()[-1]["loss"]
    print(f"step-2 loss logged {logged:.6f}; recomputed with step-1 memory {with_memory:.6f}, with zero memory "
          f"{zeros:.6f} (bound |logged - with memory| <= 1e-5, and the memory matters: differs by > 1e-3)")
    assert abs(logged - with_memory) <= 1e-5 and abs(with_memory - zeros) > 1e-3
    assert memory[0].shape == (4, REUSE_LEN, 32) and np.abs(memory[0]).sum() > 0


def test_nan_stops_and_keeps_the_last_good_checkpoint(data_dir, tmp_path):
    from xlnet_tf.config import XLNetConfig, RunOptions
    from xlnet_tf.data.pretraining import pretraining_dataset
    from xlnet_tf.data.sampling import SamplingOptions
    from xlnet_tf.model import XLNetPretrainer
    from xlnet_tf.training.loop import Trainer, TrainingDiverged, TrainingOptions

    sampling = SamplingOptions(seq_len=SEQ_LEN, reuse_len=REUSE_LEN, num_predict=10)
    trainer = Trainer(
        tf.distribute.OneDeviceStrategy("/cpu:0"),
        lambda: XLNetPretrainer(XLNetConfig(n_token=800, d_model=16, n_layer=1, n_head=2, d_head=8, d_inner=32),
                                RunOptions(dropout=0.0, dropatt=0.0)),
        # The loss turns into NaN from the 4th step on.
        lambda out, batch: (out["loss_sum"] * tf.where(trainer.step >= 3, np.nan, 1.0), out["target_count"]),
        lambda context, start: pretraining_dataset(data_dir, 4, sampling, input_context=context, start_batch=start),
        TrainingOptions(train_steps=10, batch_size=4, steps_per_loop=1, save_every=2), tmp_path / "m",
    )
    with pytest.raises(TrainingDiverged, match="NaN or Inf.*between steps 4 and 4.*ckpt-2") as error:
        trainer.train()
    print(error.value)
    kept = sorted(os.listdir(tmp_path / "m" / "checkpoints"))
    assert tf.train.latest_checkpoint(str(tmp_path / "m" / "checkpoints")).endswith("ckpt-2")
    assert not any(name.startswith("ckpt-4") for name in kept)
