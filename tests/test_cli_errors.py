"""A user's mistakes on the command line: exit status 2, one message naming the flag, file or line, no traceback,
and every option a message suggests is a flag of that command (a Python caller's message names arguments).

Covers: bad TSV / CSV / JSONL rows and columns (--skip-bad-rows, --text-a-column ...: recorded for evaluate and
predict), train-spm's input and vocabulary size, paths that do not exist, and argparse (no abbreviations, the
command's own short usage, "did you mean"). Every checked figure is printed with its bound (run with -s).
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from xlnet_tf.cli import build_parser, main

TEXTS = ["the movie was great", "what a terrible film", "it was fine I guess", "a wonderful story", "so boring",
         "not bad at all", "awful acting", "an average day"]
LABELS = ["positive", "negative", "neutral", "positive", "negative", "positive", "negative", "neutral"]
_FLAG = re.compile(r"(?<![\w-])--[A-Za-z][A-Za-z0-9_-]*")


def say(text):
    """Prints past capsys (whose capture each command's run reads and empties)."""
    print(text, file=sys.__stdout__, flush=True)


def check(label, value, bound, ok):
    say(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


def command_flags(argv):
    """The flags of the (sub-)command `argv` runs."""
    import argparse

    parser, words = build_parser(), list(argv)
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or not words or words[0] not in sub.choices:
            return {name for action in parser._actions for name in action.option_strings}
        parser = sub.choices[words.pop(0)]


def run(argv, capsys):
    """(exit status, stderr, stdout) of `xlnet-tf ARGV` run in this process (argparse's exit is a status too)."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, err, out


def refused(label, argv, capsys, *expected):
    """Runs a command that must fail as a user's mistake: status 2, `expected` words in its message, no traceback,
    and each flag the message names (other than those the user typed) a flag of that command."""
    code, err, _ = run(argv, capsys)
    typed = {word.split("=")[0] for word in argv if word.startswith("--")}
    suggested = sorted(set(_FLAG.findall(err)) - typed)
    missing = [flag for flag in suggested if flag not in command_flags(argv)]
    say(f"{label}: {err.strip().splitlines()[-1] if err.strip() else '(nothing)'}")
    check(f"{label}: exit status", code, "2", code == 2)
    check(f"{label}: traceback lines", err.count("Traceback"), "0", "Traceback" not in err)
    check(f"{label}: words named", [w for w in expected if w not in err], "none missing of "
          f"{list(expected)}", all(w in err for w in expected))
    check(f"{label}: suggested flags the command lacks", missing, f"none of {suggested}", not missing)
    return err


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path, monkeypatch):
    """The commands' $TMPDIR/xlnet-tf-logs files under this test's folder."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny fine-tuned classifier, its SentencePiece model and an architecture file for `finetune --config`."""
    from conftest import tiny_finetuned_classifier
    from xlnet_tf.config import XLNetConfig

    work = tmp_path_factory.mktemp("cli_errors")
    config = XLNetConfig(n_token=400, d_model=16, n_layer=1, n_head=2, d_head=8, d_inner=32)
    model_dir = tiny_finetuned_classifier(work, TEXTS, config, 24, 5)
    config.to_json(str(work / "xlnet_config.json"))
    return {"dir": model_dir, "spm": str(work / "spm" / "spiece.model"), "config": str(work / "xlnet_config.json")}


def finetune_argv(model, train, out, *extra):
    return ["finetune", "--task", "classification", "--train-file", str(train), "--model-dir", str(out),
            "--spm-model", model["spm"], "--config", model["config"], "--train-steps", "1", "--batch-size", "4",
            "--max-seq-len", "24", "--strategy", "one_device", "--steps-per-loop", "1", *extra]


def test_bad_rows_and_columns_name_flags(model, tmp_path, capsys):
    """A row missing a column: --skip-bad-rows (on finetune, evaluate, predict); a header without text_a:
    --text-a-column on finetune, and no suggestion on predict (which reads the columns finetune recorded); the
    Python reader's message names skip_bad_rows=True and no flag."""
    from xlnet_tf.data.readers import read_examples
    from xlnet_tf.errors import UserError

    short = tmp_path / "short.tsv"
    short.write_text("text_a\tlabel\na wonderful story\tpositive\nno label here\n")
    for command in ("finetune", "evaluate", "predict"):
        argv = {"finetune": finetune_argv(model, short, tmp_path / "ft"),
                "evaluate": ["evaluate", "--model-dir", model["dir"], "--eval-file", str(short)],
                "predict": ["predict", "--model-dir", model["dir"], "--input", str(short), "--output",
                            str(tmp_path / "p.jsonl")]}[command]
        refused(f"{command}: a row missing a column", argv, capsys, f"{short}, line 3", "expected 2 columns",
                "--skip-bad-rows")
    with pytest.raises(UserError) as error:
        read_examples(short)
    say(f"read_examples: {error.value}")
    check("read_examples' message: flags", _FLAG.findall(str(error.value)), "none",
          "skip_bad_rows=True" in str(error.value) and not _FLAG.findall(str(error.value)))

    body = tmp_path / "body.tsv"
    body.write_text("body\tlabel\na wonderful story\tpositive\n")
    with pytest.raises(UserError) as error:
        read_examples(body)
    say(f"read_examples: {error.value}")
    check("read_examples' message on columns: flags", _FLAG.findall(str(error.value)), "none",
          "text_a=" in str(error.value) and not _FLAG.findall(str(error.value)))
    refused("finetune: no text column", finetune_argv(model, body, tmp_path / "ft2"), capsys, f"{body}, line 1",
            "--text-a-column")
    err = refused("predict: no text column", ["predict", "--model-dir", model["dir"], "--input", str(body),
                                              "--output", str(tmp_path / "p.jsonl")], capsys, f"{body}, line 1")
    check("predict: column flags suggested", "--text-a-column" in err, "False (predict has none)",
          "--text-a-column" not in err)
    jsonl = tmp_path / "body.jsonl"
    jsonl.write_text(json.dumps({"body": "so boring"}) + "\n")
    refused("finetune: JSONL without a text key", finetune_argv(model, jsonl, tmp_path / "ft3"), capsys,
            f"{jsonl}, line 1", "--text-a-column", "--skip-bad-rows")


@pytest.mark.slow
def test_text_columns_without_flags_and_recorded_columns(model, tmp_path, capsys):
    """A TSV headed `sentence` and a JSONL of {"text": ...} (the export's input name) are read without flags;
    --skip-bad-rows skips and names the bad line; --text-a-column / --label-column are recorded in
    finetune_config.json, and evaluate and predict read their files by them."""
    sentence = tmp_path / "sentence.tsv"
    sentence.write_text("sentence\n" + "".join(t + "\n" for t in TEXTS))
    text = tmp_path / "text.jsonl"
    text.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    for path in (sentence, text):
        output = tmp_path / (path.stem + ".predictions.jsonl")
        code, err, _ = run(["predict", "--model-dir", model["dir"], "--input", str(path), "--output", str(output),
                            "--strategy", "one_device"], capsys)
        rows = output.read_text().splitlines() if output.exists() else []
        check(f"predict {path.name}: status, rows", (code, len(rows)), f"(0, {len(TEXTS)})",
              code == 0 and len(rows) == len(TEXTS))

    train = tmp_path / "reviews.tsv"
    train.write_text("id\tbody\tstars\n" + "".join(f"{i}\t{t}\t{lab}\n" for i, (t, lab) in
                                                   enumerate(zip(TEXTS, LABELS))) + "99\tbroken row\n")
    out = tmp_path / "finetuned"
    code, err, _ = run(finetune_argv(model, train, out, "--text-a-column", "body", "--label-column", "stars",
                                     "--skip-bad-rows"), capsys)
    check("finetune --skip-bad-rows: status", code, "0", code == 0)
    check("finetune --skip-bad-rows: the skipped line named", "skipped 1 bad rows: lines 10" in err, "True",
          "skipped 1 bad rows: lines 10" in err)
    recorded = json.loads((out / "finetune_config.json").read_text()).get("columns")
    check("finetune_config.json columns", recorded, "{'text_a': 'body', 'label': 'stars'}",
          recorded == {"text_a": "body", "label": "stars"})
    code, err, printed = run(["evaluate", "--model-dir", str(out), "--eval-file", str(train), "--skip-bad-rows",
                              "--strategy", "one_device"], capsys)
    examples = json.loads(printed[printed.index("{\n"):])["examples"] if code == 0 else None
    check("evaluate by the recorded columns: status, examples", (code, examples), f"(0, {len(TEXTS)})",
          code == 0 and examples == len(TEXTS))
    unlabeled = tmp_path / "unlabeled.tsv"
    unlabeled.write_text("body\n" + "".join(t + "\n" for t in TEXTS[:3]))
    code, err, _ = run(["predict", "--model-dir", str(out), "--input", str(unlabeled), "--output",
                        str(tmp_path / "u.jsonl"), "--strategy", "one_device"], capsys)
    rows = (tmp_path / "u.jsonl").read_text().splitlines() if code == 0 else []
    check("predict by the recorded text column, no label column: status, rows", (code, len(rows)), "(0, 3)",
          code == 0 and len(rows) == 3)
    squad = [word if word != "classification" else "squad" for word in
             finetune_argv(model, train, tmp_path / "sq", "--text-a-column", "body")]
    refused("finetune --task squad --text-a-column", squad, capsys, "--text-a-column", "--task")


def test_train_spm_reports_its_limits(tmp_path, capsys):
    """train-spm: a vocabulary above what the corpus allows names the largest, one below the symbols and
    characters names the smallest, a byte that is not UTF-8 is named with its line; no traceback."""
    import pydoc_data.topics

    lines = [line.strip() for _, text in sorted(pydoc_data.topics.topics.items()) for line in text.splitlines()
             if line.strip()]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines[:300]) + "\n", encoding="utf-8")
    prefix = str(tmp_path / "spm")
    high = refused("train-spm --vocab-size 8000", ["train-spm", "--input", str(corpus), "--model-prefix", prefix,
                                                   "--vocab-size", "8000"], capsys, "--vocab-size 8000", str(corpus))
    largest = int(re.search(r"give --vocab-size (\d+) or less", high).group(1))
    low = refused("train-spm --vocab-size 20", ["train-spm", "--input", str(corpus), "--model-prefix", prefix,
                                                "--vocab-size", "20"], capsys, "--vocab-size 20", "at least")
    smallest = int(re.search(r"give --vocab-size (\d+) or more", low).group(1))
    check("the smallest and the largest vocabulary", (smallest, largest), "17 < smallest < largest < 8000",
          17 < smallest < largest < 8000)
    for size in (smallest, largest):  # the bounds the messages give do train
        code, _, _ = run(["train-spm", "--input", str(corpus), "--model-prefix", f"{prefix}{size}", "--vocab-size",
                          str(size)], capsys)
        check(f"train-spm --vocab-size {size} (a bound the message gave): status", code, "0", code == 0)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"a first line\nun caf\xe9 noir\n")
    refused("train-spm: a line that is not UTF-8", ["train-spm", "--input", str(bad), "--model-prefix", prefix,
                                                    "--vocab-size", "30"], capsys, f"{bad}, line 2", "byte 0xe9")


def test_paths_that_do_not_exist_say_so(model, tmp_path, capsys):
    """A path that does not exist is reported first, naming the flag and the path."""
    missing = str(tmp_path / "nowhere" / "model")
    cases = {
        "evaluate": ["evaluate", "--model-dir", missing, "--eval-file", str(tmp_path / "x.tsv")],
        "predict": ["predict", "--model-dir", missing, "--input", str(tmp_path / "x.tsv"), "--output",
                    str(tmp_path / "p.jsonl")],
        "export": ["export", "--model-dir", missing, "--export-base", str(tmp_path / "exports" / "m")],
        "generate": ["generate", "--model-dir", missing, "--prompt", "hello"],
        "finetune --init-checkpoint": ["finetune", "--task", "classification", "--train-file", model["spm"],
                                       "--model-dir", str(tmp_path / "ft"), "--init-checkpoint", missing,
                                       "--train-steps", "1"],
        "plot-attention": ["plot-attention", "--model-dir", missing, "--text", "a", "--output",
                           str(tmp_path / "a.png")],
        "serve --model-config-file": ["serve", "--model-config-file", missing],
    }
    for label, argv in cases.items():
        flag = next(word for word in argv if word.startswith("--") and argv[argv.index(word) + 1] == missing)
        refused(label, argv, capsys, f"{flag}: {missing} does not exist")
    refused("evaluate: a missing --eval-file", ["evaluate", "--model-dir", model["dir"], "--eval-file",
                                                str(tmp_path / "dev.tsv")], capsys, "--eval-file:", "does not exist")
    refused("train-spm: a missing --input", ["train-spm", "--input", str(tmp_path / "c.txt"), "--model-prefix",
                                             str(tmp_path / "s"), "--vocab-size", "30"], capsys, "--input:")


@pytest.mark.slow
def test_serve_says_once_that_a_base_path_is_missing(tmp_path):
    """serve on a base path that does not exist: one line at start that says so and that it keeps looking, as
    TensorFlow Serving does; then it serves (the model waits for a version)."""
    import os
    import signal
    import subprocess
    import sys

    base = tmp_path / "not-yet" / "cls"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    server = subprocess.Popen([sys.executable, "-m", "xlnet_tf.cli", "serve", "--model-base-path", str(base),
                               "--port", "0", "--rest-api-port", "-1"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    try:
        for line in server.stdout:
            lines.append(line)
            if line.startswith("serving gRPC"):
                break
    finally:
        server.send_signal(signal.SIGTERM)
        lines += server.communicate(timeout=60)[0].splitlines(keepends=True)
    console = "".join(lines)
    said = [line.strip() for line in lines if str(base) in line]
    print("".join(said))
    check("lines naming the base path", len(said), "1", len(said) == 1)
    check("it says the path does not exist and that it keeps looking", said[0] if said else None,
          "'does not exist' and 'looking for it every 1s, as TensorFlow Serving does'",
          bool(said) and "does not exist" in said[0] and "looking for it every 1s, as TensorFlow Serving does"
          in said[0])
    check("serve's exit status after SIGTERM", server.returncode, "0", server.returncode == 0)
    check("tracebacks", console.count("Traceback"), "0", "Traceback" not in console)


def test_argparse_mistakes(capsys):
    """No abbreviations; a mistyped flag or choice gets the command's short usage and one line with a "did you
    mean"; TensorFlow Serving's underscore flags still parse in their --name=value form."""
    err = refused("finetune --train-step 5", ["finetune", "--task", "classification", "--train-file", "t.tsv",
                                              "--model-dir", "m", "--train-step", "5"], capsys,
                  "usage: xlnet-tf finetune", "unrecognized arguments: --train-step", "did you mean --train-steps?")
    check("usage and error lines", len(err.strip().splitlines()), "<= 2", len(err.strip().splitlines()) <= 2)
    for typed, meant in (("ner", "token-classification"), ("clasification", "classification"), ("qa", "squad"),
                         ("multilabel", "multi-label")):
        err = refused(f"finetune --task {typed}", ["finetune", "--task", typed, "--train-file", "t.tsv",
                                                   "--model-dir", "m", "--train-steps", "1"], capsys,
                      "usage: xlnet-tf finetune", f"invalid choice: '{typed}'", f"did you mean '{meant}'?")
        check(f"--task {typed}: lines", len(err.strip().splitlines()), "<= 2", len(err.strip().splitlines()) <= 2)
    refused("xlnet-tf fintune", ["fintune"], capsys, "did you mean 'finetune'?")
    refused("serve --model_base=...", ["serve", "--model_base=/models/m"], capsys, "usage: xlnet-tf serve",
            "did you mean --model_base_path?")
    args = build_parser().parse_args(["serve", "--model_base_path=/models/m", "--model_name=m", "--port=8500",
                                      "--enable_batching=true"])
    parsed = (args.tfs_model_base_path, args.tfs_model_name, args.port, args.tfs_enable_batching)
    check("serve's --name=value flags", parsed, "('/models/m', 'm', 8500, True)",
          parsed == ("/models/m", "m", 8500, True))
    commands = build_parser()._subparsers._group_actions[0].choices
    unabbreviated = [name for name, sub in commands.items() if sub.allow_abbrev]
    check("commands that take abbreviated flags", unabbreviated, "none", not unabbreviated)
    leaves = [[name] for name in commands] + [["convert", source] for source in ("huggingface", "official")]
    quiet = [" ".join(leaf) for leaf in leaves if "--verbose" not in command_flags(leaf)]
    check("commands without --verbose", quiet, f"none of {len(leaves)}", not quiet)


def test_a_message_that_lost_its_parts_is_respelled():
    """A UserError that crossed a process as text (a Beam worker's) still names flags on the command line."""
    from xlnet_tf.data.readers import read_examples  # noqa: F401 (its hints, as the command that reads has them)
    from xlnet_tf.errors import UserError

    text = "data.tsv, line 7: expected 2 columns, found 1 (skip_bad_rows=True skips such rows)."
    shown = UserError(text).for_command(command_flags(["predict"]))
    say(f"predict: {shown}")
    check("re-spelled for predict", shown, "names --skip-bad-rows, not skip_bad_rows=",
          "(--skip-bad-rows skips such rows)" in shown and "skip_bad_rows" not in shown)
    shown = UserError(text).for_command(command_flags(["export"]))
    check("for a command without the flag", shown, "no hint", shown == "data.tsv, line 7: expected 2 columns, "
          "found 1.")
