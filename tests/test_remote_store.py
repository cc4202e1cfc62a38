"""Every artefact on a remote store: TensorFlow's `ram://` filesystem goes through the same `tf.io.gfile` layer
as gs://. One process, an empty working directory: train-spm, create-pretraining-data, pretrain (stopped by
SIGTERM, then resumed by the same command, equal to an uninterrupted run on the same data written locally and
copied into ram:// file by file), finetune, evaluate, predict, plot-attention, export and `xlnet-tf serve` from
the ram:// export base; afterwards every artefact is on ram:// and nothing is in the working directory."""

import json
import os
import random
import signal
import uuid

import numpy as np
import tensorflow as tf

from xlnet_tf.cli import main
import pytest

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`

gfile = tf.io.gfile


def _write(path, text):
    gfile.makedirs(os.path.dirname(path))
    with gfile.GFile(path, "w") as f:
        f.write(text)


def _corpus():
    from test_pretraining import corpus_lines

    lines = list(corpus_lines())
    return "\n".join(lines[: len(lines) // 8]) + "\n"


def _pretrain_args(data, model, steps=4):
    # dropout on and memory carried: the resume must restore the dropout state and the memory exactly.
    return ["pretrain", "--data-dir", data, "--model-dir", model, "--model-size", "tiny", "--train-steps", str(steps),
            "--batch-size", "4", "--learning-rate", "2e-3", "--num-predict", "8", "--steps-per-loop", "1",
            "--save-every", "1000", "--strategy", "one_device", "--dropout", "0.1"]


def _checkpoint_values(model_dir, step):
    from xlnet_tf.files import checkpoint_reader

    reader = checkpoint_reader(f"{model_dir}/checkpoints/ckpt-{step}")
    names = [n for n in reader.get_variable_to_shape_map() if n.endswith("/.ATTRIBUTES/VARIABLE_VALUE")]
    return {n: reader.get_tensor(n) for n in names if not n.startswith("save_counter")}


def _stop_after(step, monkeypatch):
    """SIGTERM to this process once the training log has written `step` (a preempted TPU VM gets SIGTERM)."""
    from xlnet_tf.training import summaries

    original = summaries.TrainingLog.write

    def write(self, record):
        original(self, record)
        if record["step"] == step:
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(summaries.TrainingLog, "write", write)


def test_every_command_on_ram_leaves_the_local_disk_empty(tmp_path, monkeypatch):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    root = f"ram://store-{uuid.uuid4().hex[:8]}"
    corpus = f"{root}/text/corpus.txt"
    _write(corpus, _corpus())

    assert main(["train-spm", "--input", corpus, "--model-prefix", f"{root}/spm/spm", "--vocab-size", "500"]) == 0
    data = f"{root}/data"
    assert main(["create-pretraining-data", "--input", corpus, "--spm-model", f"{root}/spm/spm.model",
                 "--output-dir", data, "--seq-len", "32", "--reuse-len", "16", "--num-shards", "2"]) == 0
    metadata = json.loads(gfile.GFile(f"{data}/metadata.json").read())
    print(f"metadata.json names its SentencePiece model {metadata['spm_model']!r} (bound: the relative copy "
          f"'spiece.model' inside the data directory)")
    assert metadata["spm_model"] == "spiece.model" and gfile.exists(f"{data}/spiece.model")

    # The same data written on a workstation (a local folder, not the working directory) and copied into the
    # store file by file: it names its SentencePiece model by a relative path, so it trains there. Its
    # uninterrupted run is the reference of the same command stopped by SIGTERM after step 2 and run again.
    from xlnet_tf.data.pretraining import create_pretraining_data

    workstation = tmp_path / "workstation"
    workstation.mkdir()
    (workstation / "corpus.txt").write_bytes(gfile.GFile(corpus, "rb").read())
    (workstation / "spm.model").write_bytes(gfile.GFile(f"{root}/spm/spm.model", "rb").read())
    create_pretraining_data([str(workstation / "corpus.txt")], str(workstation / "spm.model"),
                            str(workstation / "data"), seq_len=32, reuse_len=16, num_shards=2, progress=False)
    copied = f"{root}/copied-data"
    gfile.makedirs(copied)
    for name in sorted(os.listdir(workstation / "data")):
        gfile.copy(str(workstation / "data" / name), f"{copied}/{name}")
    for name in ("corpus.txt", "spm.model"):  # the copy must not reach back to the workstation's files
        os.remove(workstation / name)
    reference, model = f"{root}/reference", f"{root}/pretrained"
    assert main(_pretrain_args(copied, reference)) == 0
    with monkeypatch.context() as patch:
        _stop_after(2, patch)
        assert main(_pretrain_args(data, model)) == 143
    assert gfile.exists(f"{model}/checkpoints/ckpt-2.index") and not gfile.exists(f"{model}/checkpoints/ckpt-4.index")
    assert main(_pretrain_args(data, model)) == 0
    want, got = _checkpoint_values(reference, 4), _checkpoint_values(model, 4)
    slots = sum(n.startswith("optimizer/") for n in want)
    diff = max(float(np.max(np.abs(want[n].astype(np.float64) - got[n]))) for n in want)
    print(f"resumed on ram:// vs uninterrupted on the copied data: {len(want)} checkpointed values ({slots} of the optimizer, the "
          f"step, the dropout seed states), max |diff| {diff} (bound 0)")
    assert sorted(want) == sorted(got) and slots > 0 and diff == 0
    memory = [np.load(gfile.GFile(f"{d}/checkpoints/mems-4-worker0.npy", "rb")) for d in (reference, model)]
    memory_diff = float(np.max(np.abs(memory[0] - memory[1])))
    print(f"memory after step 4 {memory[0].shape}: max |diff| {memory_diff} (bound 0), "
          f"max |memory| {float(np.max(np.abs(memory[0]))):.3f} (bound > 0: not zeros)")
    assert memory_diff == 0 and np.max(np.abs(memory[0])) > 0
    log_steps = [json.loads(line)["step"] for line in gfile.GFile(f"{model}/train_log.jsonl").read().splitlines()]
    print(f"train_log.jsonl on ram:// after the resume: steps {log_steps} (bound [1, 2, 3, 4])")
    assert log_steps == [1, 2, 3, 4]

    # Fine-tuning from the ram:// checkpoint, its files on ram:// too; evaluate, predict, plot, export, serve.
    rng = random.Random(0)
    words = "river stone cloud forest lamp window garden bridge paper music".split()
    rows = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))) for _ in range(48)]
    table = "text_a\tlabel\n" + "".join(f"{t}\t{'yes' if 'river' in t else 'no'}\n" for t in rows)
    _write(f"{root}/tasks/train.tsv", table)
    _write(f"{root}/tasks/dev.tsv", table)
    tuned = f"{root}/finetuned"
    assert main(["finetune", "--task", "classification", "--init-checkpoint", model, "--model-dir", tuned,
                 "--train-file", f"{root}/tasks/train.tsv", "--eval-file", f"{root}/tasks/dev.tsv",
                 "--max-seq-len", "16", "--train-steps", "3", "--batch-size", "8", "--strategy", "one_device"]) == 0
    assert main(["evaluate", "--model-dir", tuned, "--eval-file", f"{root}/tasks/dev.tsv"]) == 0
    predictions = f"{root}/out/new/predictions.jsonl"
    assert main(["predict", "--model-dir", tuned, "--input", f"{root}/tasks/dev.tsv", "--output", predictions]) == 0
    lines = gfile.GFile(predictions).read().splitlines()
    print(f"predictions on ram://: {len(lines)} lines (bound == {len(rows)} rows)")
    assert len(lines) == len(rows)
    plot = f"{root}/plots/new/attention.png"
    assert main(["plot-attention", "--model-dir", tuned, "--text", "river stone", "--output", plot]) == 0
    assert gfile.GFile(plot, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    base = f"{root}/exports/cls"
    assert main(["export", "--model-dir", tuned, "--export-base", base]) == 0

    from xlnet_tf.serving.client import Client
    from xlnet_tf.serving.server import serve

    texts = ["the river and the stone", "a lamp in the window"]
    loaded = tf.saved_model.load(f"{base}/1")
    want = loaded.signatures["serving_default"](text=tf.constant(texts))
    with serve(model_base_path=base, port=0, rest_api_port=None, poll_interval=0.2).start() as server:
        answer = Client(server.grpc_target, "cls").predict({"text": np.array(texts, dtype=object)})
    served_diff = float(np.max(np.abs(answer["probabilities"] - want["probabilities"].numpy())))
    print(f"xlnet-tf serve from {base}: Predict probabilities vs the loaded export, max |diff| {served_diff:.2e} "
          f"(bound 1e-5)")
    assert served_diff <= 1e-5

    expected = {
        f"{root}/spm": ["spm.model", "spm.vocab"],
        data: ["metadata.json", "spiece.model", "records-00000-of-00002.tfrecord"],
        model: ["xlnet_config.json", "pretraining_run.json", "spiece.model", "train_log.jsonl", "training_curve.png",
                "checkpoints/checkpoint", "checkpoints/mems-4-worker0.npy", "train"],
        tuned: ["xlnet_config.json", "finetune_config.json", "spiece.model", "eval_results.json",
                "train_log.jsonl", "training_curve.png", "checkpoints/checkpoint"],
        f"{base}/1": ["saved_model.pb", "variables/variables.index", "assets.extra/xlnet_export.json"],
    }
    missing = [f"{folder}/{name}" for folder, names in expected.items() for name in names
               if not gfile.exists(f"{folder}/{name}")]
    local = sorted(os.listdir(work))
    print(f"artefacts missing on ram://: {missing} (bound none); the working directory holds {local} (bound empty)")
    assert not missing and local == []
