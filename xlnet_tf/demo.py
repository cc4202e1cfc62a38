"""`xlnet-tf demo`: the whole life of an XLNet model on text that ships with Python, with nothing to download.

CPython's documentation topics (`pydoc_data.topics`) -> SentencePiece -> pretraining records -> permutation-LM
pretraining of a tiny XLNet -> fine-tuning of a classifier (is a documentation paragraph code or prose?) and an
extractive QA model (which name does a paragraph quote first, or last?) -> SavedModels with built-in
tokenization -> `xlnet-tf serve` -> queries with the client -> a summary table and PNG training curves.
Every step keeps its output in the work directory; a second run reuses what the first one built.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time

# The data makers moved to xlnet_tf.sample_data; their names stay importable from here (the README's
# Quickstart used `from xlnet_tf.demo import write_corpus, write_classification_task` until `xlnet-tf sample-data`).
from xlnet_tf.sample_data import (  # noqa: F401
    documentation_paragraphs, write_classification_task, write_corpus, write_qa_task)

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DemoSize:
    vocab_size: int
    seq_len: int
    reuse_len: int
    pretrain_steps: int
    classify_steps: int
    qa_steps: int
    batch_size: int


FULL = DemoSize(vocab_size=2000, seq_len=128, reuse_len=64, pretrain_steps=500, classify_steps=300, qa_steps=600,
                batch_size=16)
QUICK = DemoSize(vocab_size=1000, seq_len=64, reuse_len=32, pretrain_steps=150, classify_steps=150, qa_steps=200,
                 batch_size=16)
TINY_CONFIG = dict(d_model=64, n_layer=3, n_head=4, d_head=16, d_inner=256)


def _done(path):
    return os.path.exists(path)


def run_demo(workdir="demo_work", quick=False, port=0, verbose=False):
    """Runs every step (reusing finished ones) and returns the summary dict it prints. SentencePiece's trainer
    log goes to WORKDIR/xlnet-tf.log unless `verbose`."""
    from xlnet_tf.training import strategies

    strategy = strategies.make_strategy("one_device")
    import keras

    from xlnet_tf.config import RunOptions, XLNetConfig
    from xlnet_tf.console import LOG_FILE
    from xlnet_tf.data.pretraining import create_pretraining_data
    from xlnet_tf.tokenization import train_spm
    from xlnet_tf.training.finetune import FinetuneSetup, run_finetuning
    from xlnet_tf.training.loop import TrainingOptions
    from xlnet_tf.training.pretrain import PretrainingSetup, run_pretraining
    from xlnet_tf.training.summaries import read_log

    size = QUICK if quick else FULL
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    keras.utils.set_random_seed(0)
    summary = {"workdir": workdir, "mode": "quick" if quick else "full", "steps": {}}
    began = time.time()

    def step(name, path, fn):
        t0 = time.time()
        reused = _done(path)
        if not reused:
            print(f"\n== {name}")
            fn()
        summary["steps"][name] = {"seconds": round(time.time() - t0, 1), "reused": reused, "path": path}

    corpus = os.path.join(workdir, "corpus.txt")
    step("corpus", corpus, lambda: write_corpus(corpus))
    spm = os.path.join(workdir, "spm.model")
    spm_log = None if verbose else os.path.join(workdir, LOG_FILE)
    step("sentencepiece", spm, lambda: train_spm([corpus], spm[: -len(".model")], size.vocab_size, log_file=spm_log))
    data_dir = os.path.join(workdir, "pretraining_data")
    step("pretraining data", os.path.join(data_dir, "metadata.json"),
         lambda: create_pretraining_data([corpus], spm, data_dir, seq_len=size.seq_len, reuse_len=size.reuse_len))

    config = XLNetConfig(n_token=size.vocab_size, **TINY_CONFIG)
    pretrained = os.path.join(workdir, "pretrained")
    pretrain_options = TrainingOptions(train_steps=size.pretrain_steps, batch_size=size.batch_size,
                                       learning_rate=2e-3, warmup_steps=20, steps_per_loop=10, save_every=100)
    step("pretraining", os.path.join(pretrained, "checkpoints", f"ckpt-{size.pretrain_steps}.index"),
         lambda: run_pretraining(
             PretrainingSetup(data_dir, pretrained, config, RunOptions(dropout=0.1, dropatt=0.1, mem_len=size.reuse_len,
                                                                       reuse_len=size.reuse_len),
                              num_predict=max(1, size.seq_len // 6)),
             pretrain_options, strategy))

    tasks = os.path.join(workdir, "tasks")
    os.makedirs(tasks, exist_ok=True)
    step("task files", os.path.join(tasks, "qa", "dev.json"), lambda: _write_tasks(tasks))

    results = {}
    for task, name, steps, train, dev, seq_len in (
        ("classification", "classifier", size.classify_steps, "classification/train.tsv", "classification/dev.tsv", 64),
        ("squad", "qa", size.qa_steps, "qa/train.json", "qa/dev.json", 128),
    ):
        model_dir = os.path.join(workdir, name)
        options = TrainingOptions(train_steps=steps, batch_size=size.batch_size, learning_rate=1e-3, warmup_steps=30,
                                  steps_per_loop=10, save_every=100)
        setup = FinetuneSetup(task=task, train_file=os.path.join(tasks, train), eval_file=os.path.join(tasks, dev),
                              model_dir=model_dir, config=config, run_options=RunOptions(dropout=0.1, dropatt=0.1),
                              spm_model=spm, init_checkpoint=pretrained, max_seq_len=seq_len, max_query_len=16)
        results_file = os.path.join(model_dir, "eval_results.json")
        step(f"fine-tune {name}", results_file, lambda setup=setup, options=options: run_finetuning(setup, options, strategy))
        with open(results_file, encoding="utf-8") as f:
            results[name] = json.load(f)

    exports = {}
    for name in ("classifier", "qa"):
        base = os.path.join(workdir, "exports", name)
        step(f"export {name}", os.path.join(base, "1", "saved_model.pb"),
             lambda name=name, base=base: _export(os.path.join(workdir, name), base))
        exports[name] = os.path.join(base, "1")
    summary["exports"] = exports
    summary["serving"] = serve_and_query(workdir, os.path.join(tasks, "classification", "dev.tsv"),
                                         os.path.join(tasks, "qa", "dev.json"), port=port)

    curves = plot_demo_curves(workdir, {"pretraining": read_log(os.path.join(pretrained, "train_log.jsonl")),
                                         "classifier": read_log(os.path.join(workdir, "classifier", "train_log.jsonl")),
                                         "qa": read_log(os.path.join(workdir, "qa", "train_log.jsonl"))})
    pre = read_log(os.path.join(pretrained, "train_log.jsonl"))
    summary.update(
        pretraining_loss=[round(pre[0]["loss"], 3), round(pre[-1]["loss"], 3)] if pre else None,
        classifier=results["classifier"], qa=results["qa"], curves=curves,
    )
    summary["seconds"] = round(time.time() - began, 1)
    with open(os.path.join(workdir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print_summary(summary)
    return summary


def _write_tasks(tasks):
    for name in ("classification", "qa"):
        os.makedirs(os.path.join(tasks, name), exist_ok=True)
    train, dev = write_classification_task(os.path.join(tasks, "classification"))
    print(f"classification (code vs prose): {train} train / {dev} dev paragraphs")
    train, dev = write_qa_task(os.path.join(tasks, "qa"))
    print(f"extractive QA (which name is quoted first / last): {train} train / {dev} dev questions")


def _export(model_dir, base):
    from xlnet_tf.export import export_model

    print(export_model(model_dir, base, version=1))


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_and_query(workdir, classification_dev, qa_dev, port=0, requests=20):
    """Starts `xlnet-tf serve` on both exports (a models.config), queries it with the client, stops it with
    SIGTERM; returns answers and request latencies."""
    import signal
    import subprocess
    import sys

    from xlnet_tf.serving import Client

    config = os.path.join(workdir, "exports", "models.config")
    with open(config, "w", encoding="utf-8") as f:
        f.write("model_config_list {\n")
        for name in ("classifier", "qa"):
            f.write(f'  config {{ name: "{name}" base_path: "{os.path.join(workdir, "exports", name)}" '
                    f'model_platform: "tensorflow" }}\n')
        f.write("}\n")
    port = port or _free_port()
    print(f"\n== serving both models on 127.0.0.1:{port} (xlnet-tf serve --model-config-file {config})")
    server = subprocess.Popen([sys.executable, "-m", "xlnet_tf.cli", "serve", "--model-config-file", config,
                               "--port", str(port), "--rest-api-port", "-1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        classifier = Client(f"127.0.0.1:{port}", "classifier", timeout=60.0, retries=30)
        qa = Client(f"127.0.0.1:{port}", "qa", timeout=60.0, retries=30)
        deadline = time.time() + 120
        while True:  # both models loaded and warmed up
            try:
                if all(str(v.get("state", "")).upper() == "AVAILABLE"
                       for c in (classifier, qa) for v in c.status()):
                    break
            except Exception:  # noqa: BLE001 - not up yet
                pass
            if time.time() > deadline:
                raise RuntimeError("the demo server did not load its models within 120 s")
            time.sleep(0.5)
        with open(classification_dev, encoding="utf-8") as f:
            rows = [line.rstrip("\n").split("\t") for line in f][1:]
        with open(qa_dev, encoding="utf-8") as f:
            paragraphs = [a["paragraphs"][0] for a in json.load(f)["data"]]
        latencies = []
        for i in range(requests):
            text = rows[i % len(rows)][0]
            t0 = time.perf_counter()
            classifier.classify([text])
            latencies.append((time.perf_counter() - t0) * 1000)
        samples = []
        for paragraph in paragraphs[:3]:
            question = paragraph["qas"][0]["question"]
            got = qa.answer([question], [paragraph["context"]])[0]
            samples.append({"question": question, "context": paragraph["context"][:80] + "...",
                            "answer": got["answer"], "gold": paragraph["qas"][0]["answers"][0]["text"]})
        label = classifier.classify([rows[0][0]])[0]
        latencies.sort()
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
    for sample in samples:
        print(f"  Q: {sample['question']!r} -> {sample['answer']!r} (gold {sample['gold']!r})")
    return {"port": port, "classify_example": {"text": rows[0][0][:60], "label": label.get("label"),
                                               "gold": rows[0][1]},
            "qa_examples": samples, "latency_ms": {"p50": round(latencies[len(latencies) // 2], 2),
                                                   "p90": round(latencies[int(len(latencies) * 0.9)], 2)},
            "server_exit_code": code}


def plot_demo_curves(workdir, logs):
    """One PNG with the loss curves of every training run of the demo."""
    from xlnet_tf.plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, len(logs), figsize=(4.5 * len(logs), 3.5))
    for ax, (name, records) in zip(axes, logs.items()):
        ax.plot([r["step"] for r in records], [r["loss"] for r in records], marker=".")
        ax.set_title(f"{name} loss")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, os.path.join(workdir, "training_curves.png"))


def print_summary(summary):
    rows = [("work directory", summary["workdir"])]
    if summary.get("pretraining_loss"):
        rows.append(("pretraining PLM loss", f"{summary['pretraining_loss'][0]} -> {summary['pretraining_loss'][1]}"))
    c, q = summary["classifier"], summary["qa"]
    rows.append(("classifier (code vs prose)", f"accuracy {c['accuracy']:.3f} (chance 0.5), MCC {c['mcc']:.3f}"))
    rows.append(("extractive QA", f"EM {q['exact_match']:.1f}, F1 {q['f1']:.1f} over {q['total']} questions"))
    for name, path in (summary.get("exports") or {}).items():
        rows.append((f"export: {name}", path))
    serving = summary.get("serving")
    if serving:
        rows.append(("served (gRPC, xlnet-tf serve)", f"127.0.0.1:{serving['port']}, exit code {serving['server_exit_code']}"))
        rows.append(("classify request latency", f"p50 {serving['latency_ms']['p50']} ms, p90 {serving['latency_ms']['p90']} ms"))
    rows.append(("training curves", summary["curves"]))
    rows.append(("total time", f"{summary['seconds']} s"))
    width = max(len(r[0]) for r in rows)
    print("\n" + "=" * 72 + "\nxlnet-tf demo summary\n" + "-" * 72)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print("=" * 72)
