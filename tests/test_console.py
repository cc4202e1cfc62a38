"""What commands print: their own lines on the console, other libraries' logs in a log file (--verbose: both)."""

import logging

import pytest

from xlnet_tf import console
from xlnet_tf.console import LOG_FILE


def test_train_spm_keeps_the_trainer_log_off_the_console(tmp_path, capfd):
    """SentencePiece's trainer writes its configuration and progress to file descriptor 2: into PREFIX.log,
    and on the console only with --verbose."""
    from test_pretraining import corpus_lines

    from xlnet_tf.cli import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(list(corpus_lines())[:400]), encoding="utf-8")
    seen = {}
    for verbose in ((), ("--verbose",)):
        prefix = tmp_path / ("verbose" if verbose else "quiet") / "spm"
        assert main(["train-spm", "--input", str(corpus), "--model-prefix", str(prefix), "--vocab-size", "300",
                     *verbose]) == 0
        out, err = capfd.readouterr()
        log = prefix.with_suffix(".log")
        seen[bool(verbose)] = (out + err, log.read_text() if log.exists() else "")
    with capfd.disabled():
        for verbose, (shown, log) in seen.items():
            print(f"train-spm{' --verbose' if verbose else ''}: trainer lines on the console "
                  f"{shown.count('trainer_interface.cc')}, in spm.log {log.count('trainer_interface.cc')}")
    quiet_console, quiet_log = seen[False]
    assert "trainer_interface.cc" not in quiet_console and "trainer_interface.cc" in quiet_log
    assert "wrote " in quiet_console  # the command's own line stays
    assert "trainer_interface.cc" in seen[True][0]  # the check can see them


def test_log_records_are_sorted_between_console_and_file(tmp_path, capfd):
    log_file = tmp_path / "work" / console.LOG_FILE
    try:
        for verbose in (False, True):
            console.configure(str(log_file), verbose=verbose)
            logging.getLogger("xlnet_tf.training").info("own progress %s", verbose)
            # Another library's INFO (absl's own logger may be configured by other tests in this process).
            logging.getLogger("other_library.io").info("Sharding callback duration: 35 microseconds %s", verbose)
            logging.getLogger("tensorflow").warning("a warning from TensorFlow %s", verbose)
    finally:
        console.configure()  # back to the console only (the handlers are replaced, not added)
    err = capfd.readouterr().err
    log = log_file.read_text()
    with capfd.disabled():
        print("console:", err.strip().splitlines())
        print("file lines:", len(log.splitlines()), "(bound 6)")
    assert "own progress False" in err and "a warning from TensorFlow False" in err
    assert "Sharding callback duration: 35 microseconds False" not in err  # quiet: third-party INFO off the console
    assert "Sharding callback duration: 35 microseconds True" in err  # --verbose shows it
    assert len(log.splitlines()) == 6 and "microseconds False" in log
    handlers = [h for h in logging.getLogger().handlers if h in console._installed]
    assert len(handlers) == 1  # one console handler left: configure never stacks them


def test_the_console_is_whatever_stderr_is_when_a_record_comes(tmp_path, monkeypatch):
    """The console handler writes to the current sys.stderr: a stream that replaced it after `configure` gets
    the lines, and the one it replaced (closed meanwhile, as a finished test's capture is) is not written to."""
    import io

    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    console.configure()
    monkeypatch.setattr("sys.stderr", second)
    first.close()
    logging.getLogger("xlnet_tf.check").info("after the swap")
    shown = second.getvalue()
    print(f"the new stderr got {shown.strip()!r} (bound: the record); the closed one was not written to")
    assert "INFO xlnet_tf.check: after the swap" in shown and "Logging error" not in shown
    console.configure()  # back to this test's own stderr


# The shapes of what TensorFlow's and absl's C++ code writes to stderr (start-up and run time).
NATIVE_LINES = {
    "absl/glog line (I0000 ..., E0000 ...)": r"^[IWEF]\d{4} ",
    "absl's pre-InitializeLog warning": r"^WARNING: All log messages before absl",
    "cuInit": r"cuInit",
    "oneDNN": r"oneDNN",
    "cudart_stub": r"cudart_stub",
    "CPU instructions notice": r"To enable the following instructions",
}
TEXTS = ["the movie was great", "what a terrible film", "it was fine I guess", "a wonderful story", "so boring",
         "not bad at all", "awful acting", "an average day"]


def native_lines(text):
    """The lines of `text` that have one of NATIVE_LINES' shapes."""
    import re

    patterns = [re.compile(p) for p in NATIVE_LINES.values()]
    return [line for line in text.splitlines() if any(p.search(line) for p in patterns)]


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    """A tiny fine-tuned classifier, its training file and config, and `run(args)` / `start(args)`: the xlnet-tf
    command line in its own process, as a user runs it (no TF_CPP_MIN_LOG_LEVEL; temporary logs under the work
    folder)."""
    import os
    import subprocess
    import sys

    from conftest import tiny_finetuned_classifier
    from xlnet_tf.config import XLNetConfig

    work = tmp_path_factory.mktemp("console")
    config = XLNetConfig(n_token=400, d_model=16, n_layer=1, n_head=2, d_head=8, d_inner=32)
    model_dir = tiny_finetuned_classifier(work, TEXTS, config, 24, 11)
    config.to_json(str(work / "xlnet_config.json"))
    labels = ["positive", "negative", "neutral", "positive", "negative", "positive", "negative", "neutral"]
    (work / "train.tsv").write_text("text_a\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in zip(TEXTS, labels)))
    (work / "tmp").mkdir()
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    env["TMPDIR"] = str(work / "tmp")

    def start(args):
        return subprocess.Popen([sys.executable, "-m", "xlnet_tf.cli", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env, cwd=work)

    return work, model_dir, start


@pytest.mark.slow
def test_no_tensorflow_cpp_lines_on_the_console(commands):
    """predict, export, finetune, serve and query show no TensorFlow / absl C++ line without --verbose (they go to
    the command's log file); with --verbose they do (the check can see them)."""
    import signal
    import threading

    work, model_dir, start = commands
    runs = {
        "predict": ["predict", "--model-dir", model_dir, "--input", str(work / "train.tsv"), "--output",
                    str(work / "predictions.jsonl"), "--strategy", "one_device"],
        "export": ["export", "--model-dir", model_dir, "--export-base", str(work / "exports" / "cls")],
        "finetune": ["finetune", "--task", "classification", "--train-file", str(work / "train.tsv"),
                     "--model-dir", str(work / "finetuned-again"), "--spm-model", str(work / "spm" / "spiece.model"),
                     "--config", str(work / "xlnet_config.json"), "--train-steps", "2", "--batch-size", "4",
                     "--max-seq-len", "24", "--strategy", "one_device", "--steps-per-loop", "1"],
    }
    processes = {name: start(args) for name, args in runs.items()}  # side by side: each mostly starts up
    consoles = {}
    for name, process in processes.items():
        consoles[name] = process.communicate(timeout=300)[0]
        assert process.returncode == 0, consoles[name][-3000:]
    server = start(["serve", "--model-base-path", str(work / "exports" / "cls"), "--port", "0", "--rest-api-port",
                    "-1"])
    lines, ready = [], threading.Event()

    def read():
        for line in server.stdout:
            lines.append(line)
            if line.startswith("serving gRPC"):
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(180) and server.poll() is None, "".join(lines)[-3000:]
        target = next(line for line in lines if line.startswith("serving gRPC")).split()[2]
        for name, extra in (("query", ()), ("query --verbose", ("--verbose",))):
            query = start(["query", "--server", target, "--model", "cls", "--text", "a wonderful story", *extra])
            consoles[name] = query.communicate(timeout=120)[0]
            assert query.returncode == 0 and "cls version 1" in consoles[name], consoles[name][-3000:]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        reader.join(10)
    consoles["serve"] = "".join(lines)
    assert server.returncode == 0 and "stopped (SIGTERM)" in consoles["serve"], consoles["serve"][-3000:]
    logs = {"predict": work / "predictions.jsonl.log", "export": work / "finetuned" / "cls" / LOG_FILE,
            "finetune": work / "finetuned-again" / LOG_FILE, "serve": work / "tmp" / "xlnet-tf-logs" / "serve.log",
            "query": work / "tmp" / "xlnet-tf-logs" / "query.log"}
    with_verbose = native_lines(consoles.pop("query --verbose"))
    for name, console_text in consoles.items():
        found = native_lines(console_text)
        logged = native_lines(logs[name].read_text(errors="replace")) if logs[name].exists() else []
        print(f"{name}: {len(found)} TensorFlow / absl C++ lines on the console (bound 0){found[:3]}; "
              f"{len(logged)} in {logs[name].name} (bound > 0); console {len(console_text.splitlines())} lines")
        assert not found and logged, name
    print(f"query --verbose: {len(with_verbose)} such lines on the console (bound > 0: the check sees them)")
    assert with_verbose
