"""What a new user meets in the first week after the Quickstart (issue #52): each mistake exits with status 2 and
one line (no traceback) that says what happened and names the fix (the file and line, the flag or the command),
and the two lines that read wrong on a good run read right.

1. a label column with another name (`review,sentiment`): refused before training, naming the file, line 1, its
   columns and --label-column; for --train-file and --eval-file;
2. `query` with no server: "no server answers at HOST:PORT", with `xlnet-tf serve` and --retries;
3. `serve` on a port in use: refused before any model loads, naming --port (--rest-api-port for REST);
4. an export folder given as --model-dir (predict, evaluate, export): says so and names
   `xlnet-tf predict --export-dir` with the version folder;
5. a short run's loss line: one log point is said to be one, several are given with their steps;
6. `serve`'s start line shows once on the console (and the log file keeps the server's own record).

Each message is printed with what it was checked for (run with -s).
"""

from __future__ import annotations

import re
import socket
import time

import pytest

from conftest import check, refused, run_cli, say

TEXTS = ["the movie was great", "what a terrible film", "it was fine I guess", "a wonderful story", "so boring",
         "not bad at all", "awful acting", "an average day"]
SENTIMENTS = ["positive", "negative", "neutral", "positive", "negative", "positive", "negative", "neutral"]


def run(argv, capsys):
    """(exit status, stdout, stderr, seconds) of `xlnet-tf ARGV` run in this process."""
    began = time.monotonic()
    return (*run_cli(argv, capsys), time.monotonic() - began)


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path, monkeypatch):
    """The commands' $TMPDIR/xlnet-tf-logs files under this test's folder."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))


def write_reviews(path, header="review,sentiment"):
    path.write_text(header + "\n" + "".join(f"{t},{s}\n" for t, s in zip(TEXTS, SENTIMENTS)))
    return path


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_label_column_with_another_name(tmp_path, capsys):
    """`review,sentiment`: refused before training (no SentencePiece model, no TensorFlow run needed), naming the
    file, line 1, the columns and --label-column; the same for --eval-file and for a JSONL file's keys; given
    --label-column sentiment, the file passes the check."""
    from xlnet_tf.data import readers

    reviews = write_reviews(tmp_path / "reviews.csv")
    labelled = write_reviews(tmp_path / "train.csv", "text,label")
    jsonl = tmp_path / "reviews.jsonl"
    jsonl.write_text("".join(f'{{"review": "{t}", "sentiment": "{s}"}}\n' for t, s in zip(TEXTS, SENTIMENTS)))
    model_dir = tmp_path / "model"
    base = ["finetune", "--task", "classification", "--model-dir", str(model_dir), "--train-steps", "1"]
    for label, extra, path in (("--train-file", ["--train-file", str(reviews)], reviews),
                               ("--eval-file", ["--train-file", str(labelled), "--eval-file", str(reviews)], reviews),
                               ("--train-file JSONL", ["--train-file", str(jsonl)], jsonl)):
        refused(f"finetune {label} without a 'label' column", base + extra, capsys, f"{path}, line 1",
                "['review', 'sentiment']", "--label-column sentiment")
    check("files finetune wrote", sorted(p.name for p in model_dir.iterdir() if p.suffix != ".log"), "none (refused "
          "before the run)", not [p for p in model_dir.iterdir() if p.suffix != ".log"])
    readers.check_labels(reviews, label="sentiment")  # --label-column sentiment: no complaint
    examples, report = readers.read_examples(reviews, label="sentiment", require_labels=True)
    check("--label-column sentiment: labelled examples", (len(examples), report["labeled"]), "(8, True)",
          (len(examples), report["labeled"]) == (8, True))


def test_max_seq_len_too_short_to_learn_from(tmp_path, capsys):
    """--max-seq-len 4 for classification (2 pieces of text beside <sep> <cls>; it trained and scored chance) is
    refused before anything is read, with the smallest useful value (8 pieces of text, `tasks.base.MIN_TEXT_PIECES`:
    10 for one text, 11 for a pair); that value and above still pass the flag checks (a promise kept: 16 is in use)."""
    from xlnet_tf.tasks.base import MIN_TEXT_PIECES
    from xlnet_tf.training.finetune import FinetuneSetup

    train = write_reviews(tmp_path / "train.csv", "text,label")
    base = ["finetune", "--task", "classification", "--train-file", str(train), "--model-dir", str(tmp_path / "m"),
            "--train-steps", "1", "--model-size", "tiny"]
    useful = 2 + MIN_TEXT_PIECES
    refused("finetune --max-seq-len 4", base + ["--max-seq-len", "4"], capsys, "--max-seq-len 4",
            f"the smallest useful value is {useful}")
    refused("finetune --max-seq-len 10 for a pair", base + ["--max-seq-len", str(useful), "--text-b-column", "b"],
            capsys, "--max-seq-len", f"the smallest useful value is {useful + 1}")
    for length in (useful, 16):
        FinetuneSetup(task="classification", train_file=str(train), model_dir=str(tmp_path / "m"), config=None,
                      run_options=None, spm_model=None, max_seq_len=length)
    say(f"  --max-seq-len {useful} and 16 pass the flag checks (bound: no error)")


def test_query_without_a_server(tmp_path, capsys):
    """No server at --server: "no server answers at" it, `xlnet-tf serve`, --retries; with retries, how many
    attempts over how long (the retries are kept: 1 + N attempts)."""
    server = f"localhost:{free_port()}"
    for retries in ("0", "2"):
        line = refused(f"query --retries {retries} with no server", ["query", "--server", server, "--model", "cls",
                                                                     "--text", "hi", "--retries", retries],
                       capsys, f"no server answers at {server}", "xlnet-tf serve", "--retries")
        if retries != "0":
            tried = re.search(r"tried (\d+) times over ([\d.]+) s", line)
            check("attempts said", tried and tried.group(1), "3 (1 + --retries 2)", tried and tried.group(1) == "3")


@pytest.mark.slow
def test_serve_on_a_port_in_use(tmp_path, capsys, monkeypatch):
    """A gRPC (or REST) port something listens on: refused before any model loads (no export needed: the base path
    holds none, and ModelManager.start is never called), naming --port (--rest-api-port)."""
    from xlnet_tf.serving.manager import ModelManager

    loads = []
    monkeypatch.setattr(ModelManager, "start", lambda self: loads.append(self))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        base = str(tmp_path / "exports" / "cls")
        refused("serve on a gRPC port in use", ["serve", "--model-base-path", base, "--port", port,
                                                "--rest-api-port", "-1"], capsys,
                f"127.0.0.1:{port} is in use", "--port")
        line = refused("serve on a REST port in use", ["serve", "--model-base-path", base, "--port", "0",
                                                       "--rest-api-port", port], capsys,
                       f"127.0.0.1:{port} is in use", "--rest-api-port")
        check("REST's message names --port alone", "--port " in line or line.endswith("--port"), "False",
              not ("--port " in line or line.endswith("--port")))
    check("models loaded before the refusal", len(loads), "0", not loads)


def test_export_folder_as_model_dir(tmp_path, capsys):
    """An export's base (numbered versions) or one version given as --model-dir to evaluate, predict or export:
    says it is an export and names `xlnet-tf predict --export-dir` with the version to give (the latest)."""
    base = tmp_path / "exports" / "cls"
    for version in ("1", "3"):
        (base / version).mkdir(parents=True)
        (base / version / "saved_model.pb").write_bytes(b"")  # the shape of an export: nothing reads it
    data = write_reviews(tmp_path / "dev.csv", "text,label")
    latest = str(base / "3")
    for label, argv in (
            ("evaluate --model-dir BASE", ["evaluate", "--model-dir", str(base), "--eval-file", str(data)]),
            ("predict --model-dir VERSION", ["predict", "--model-dir", latest, "--input", str(data), "--output",
                                             str(tmp_path / "p.jsonl")]),
            ("export --model-dir BASE", ["export", "--model-dir", str(base), "--export-base",
                                         str(tmp_path / "again")])):
        refused(label, argv, capsys, "no finetune_config.json", f"xlnet-tf predict --export-dir {latest}")


@pytest.mark.slow
def test_short_run_loss_line(tmp_path, capsys):
    """A run of one log point prints its loss once, with its step and --steps-per-loop (not "loss x -> x"); several
    points print the first and the last with their steps."""
    from conftest import tiny_spm

    from xlnet_tf.commands.common import loss_summary
    from xlnet_tf.config import XLNetConfig

    spm = tiny_spm(tmp_path, TEXTS)
    XLNetConfig(n_token=400, d_model=16, n_layer=1, n_head=2, d_head=8, d_inner=32).to_json(str(tmp_path / "c.json"))
    train = write_reviews(tmp_path / "train.csv", "text,label")
    code, out, err, seconds = run(["finetune", "--task", "classification", "--train-file", str(train), "--model-dir",
                                   str(tmp_path / "model"), "--spm-model", spm, "--config", str(tmp_path / "c.json"),
                                   "--train-steps", "1", "--steps-per-loop", "1", "--batch-size", "4",
                                   "--max-seq-len", "16", "--strategy", "one_device", "--packing", "none",
                                   "--bucket-boundaries", "none"], capsys)
    line = next((line for line in out.splitlines() if line.startswith("fine-tuned to step")), "(none)")
    say(f"finetune --train-steps 1 ({seconds:.1f} s): {line}")
    check("exit status", code, "0", code == 0)
    check("one log point's line", line, "'fine-tuned to step 1: loss X at step 1 (one log point; --steps-per-loop "
          "1)'", re.fullmatch(r"fine-tuned to step 1: loss \d+\.\d{4} at step 1 \(one log point; --steps-per-loop "
                              r"1\)", line) is not None)
    check("no 'x -> x'", "->" in line, "False", "->" not in line)
    several = loss_summary([{"step": 10, "loss": 0.6931}, {"step": 20, "loss": 0.6}, {"step": 300, "loss": 0.5645}],
                           10)
    say(f"several log points: {several}")
    check("several log points' words", several, "'loss 0.6931 at step 10 -> 0.5645 at step 300'",
          several == "loss 0.6931 at step 10 -> 0.5645 at step 300")


@pytest.mark.slow
def test_serve_start_line_once(tmp_path, capsys, monkeypatch):
    """`serve` shows "serving gRPC ..." once on the console (its stdout line; the server's own record of it goes to
    the log file only). No export is needed for the line: the base path holds no version yet. The server is
    stopped by SIGTERM once started, as a user's Ctrl-C would."""
    import os
    import signal
    import threading

    from xlnet_tf.serving.server import ModelServer

    started = ModelServer.start

    def start_then_stop(self, *args, **kwargs):
        server = started(self, *args, **kwargs)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()  # serve_main's handler stops it
        return server

    monkeypatch.setattr(ModelServer, "start", start_then_stop)
    (tmp_path / "exports" / "cls").mkdir(parents=True)
    code, out, err, seconds = run(["serve", "--model-base-path", str(tmp_path / "exports" / "cls"), "--port", "0",
                                   "--rest-api-port", "-1"], capsys)
    shown = [line for line in (out + err).splitlines() if "serving gRPC" in line]
    say(f"serve ({seconds:.1f} s): console lines with 'serving gRPC': {shown}")
    check("exit status", code, "0", code == 0)
    check("start lines on the console", len(shown), "1", len(shown) == 1)
    check("it is the stdout line scripts read", shown and shown[0].startswith("serving gRPC 127.0.0.1:"), "True",
          bool(shown) and shown[0].startswith("serving gRPC 127.0.0.1:"))
    log = tmp_path / "xlnet-tf-logs" / "serve.log"
    logged = [line for line in log.read_text().splitlines() if "serving gRPC at" in line] if log.exists() else []
    check("the server's record in serve.log", len(logged), "1", len(logged) == 1)
