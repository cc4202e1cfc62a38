"""`make compat`: do this package's exports load and answer the same in TensorFlow 2.12's runtime?

    python -m xlnet_tf.benchmarks.compat --other-python .venv-tf212/bin/python [--work-dir DIR] [--output FILE]

TensorFlow Serving 2.12 and later link TensorFlow 2.12's runtime and TF Text 2.12. This check makes tiny models of
every export kind with the package's own commands (``xlnet-tf sample-data``, ``train-spm``,
``create-pretraining-data``, ``pretrain``, ``finetune``, ``export``; a few steps each: the weights only need to
make the outputs depend on the input), builds one fixed set of requests (real text, several rows of different
lengths) for every serving signature of every export, and runs them with ``compat_runner.py`` twice: with this
interpreter (the project's TensorFlow) and with ``--other-python`` (a virtualenv with only ``tensorflow==2.12.1``
and ``tensorflow-text==2.12.1``). The runner loads each export as TensorFlow Serving does (a TF1 Session, which runs every
signature) and as a TensorFlow 2 program does (``tf.saved_model.load``, which runs ``serving_default``). Strings and integers must be equal, and float outputs within
``BOUNDS`` of the project's runtime. It prints a table (kind, loads in the other runtime, max |diff|, bound,
verdict), writes it as JSON to ``--output`` and exits 1 when a kind fails.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import typing

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compat_runner.py")

# Bounds on max |diff| between the two runtimes, per export precision, relative: a float output may differ by the
# bound times max(1, its largest |value|). float32: the unit roundoff u is 6e-8; other kernel versions sum in other
# orders, which moved these 2-layer models' outputs by up to 5 u of their scale (9.5e-7 at 3.4); 1e-5 (170 u) leaves
# room for other CPUs' kernels and still catches any change of what is computed. bfloat16 / float16: 16 u of the
# type (u = 2^-8 / 2^-11). The exports' own error against the float32 export is 2-3 u of their type (in TensorFlow
# 2.21); TensorFlow 2.12 computes float16 less exactly on a CPU (its float16 export is 5 u from float32), so 16 u
# accepts runtimes that agree to within the precision itself, and a computation that changed is off by far more.
BOUNDS = {"float32": 1e-5, "bfloat16": 16 * 2.0 ** -8, "float16": 16 * 2.0 ** -11}

SEQ_LEN = 32  # classification, regression, multi-label, token classification, the encoder, the LM's prompt
SQUAD_LEN, RACE_LEN = 64, 64
TINY = ["--model-size", "tiny", "--train-steps", "4", "--batch-size", "8", "--learning-rate", "2e-3",
        "--warmup-steps", "1"]


def topics():
    """CPython's documentation topics (they ship with Python): the text every request is made of."""
    import pydoc_data.topics

    return pydoc_data.topics.topics


def texts():
    """Single texts of different lengths: a word, sentences, a paragraph, text longer than SEQ_LEN tokens, accents
    and CJK, and an empty one."""
    t = topics()
    return ["Return.", "The while statement repeats a suite as long as an expression is true.",
            t["if"][:400], t["try"][:3000], "Le café « Zoë » sert une crème brûlée ; 日本語のテキスト and 中文.",
            'while_stmt ::= "while" assignment_expression ":" suite', ""]


def requests_for(kind, export_dir, model_dir):
    """The requests ({key, export, signature, inputs, modes}) for every signature of the export of `kind` (made from
    `model_dir`): its SignatureDefs say which signatures and inputs, ``KINDS`` which rows, ``xlnet_export.json``
    the Examples' features and the lengths."""
    with open(os.path.join(export_dir, "assets.extra", "xlnet_export.json"), encoding="utf-8") as f:
        metadata = json.load(f)
    out = []
    for signature, specs in sorted(signature_defs(export_dir).items()):
        inputs = signature_inputs(kind, model_dir, metadata, signature, specs)
        # Every signature as TensorFlow Serving runs it; serving_default also as a TensorFlow 2 program calls it (the
        # same functions: the other signatures would only repeat the load, which runs for every export anyway).
        modes = ["session", "function"] if signature == "serving_default" else ["session"]
        out.append({"key": f"{kind}/{signature}", "export": kind, "signature": signature, "inputs": inputs,
                    "modes": modes})
    return out


def signature_defs(export_dir):
    """{signature: {input: dtype name}} from the SignatureDefs of ``saved_model.pb`` (what TensorFlow Serving
    reads), ``__saved_model_init_op`` left out."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    (meta,) = saved.meta_graphs
    return {name: {k: tf.dtypes.as_dtype(v.dtype).name for k, v in sig.inputs.items()}
            for name, sig in meta.signature_def.items() if not name.startswith("__")}


def strings(data):
    """A string input."""
    return {"dtype": "string", "data": data}


def numbers(dtype, data):
    """A numeric input."""
    return {"dtype": dtype, "data": data}


def pairs():
    """(text_a, text_b) rows: texts paired with others, lengths mixed."""
    single = texts()
    return single, single[2:] + single[:2]


def squad_rows():
    """(question, context) rows: one short context, one of several windows, accents, an empty question."""
    t = topics()
    return [("What does the if statement do?", t["if"][:600]), ("Which exceptions are raised?", t["try"][:2500]),
            ("Qui sert une crème brûlée ?", texts()[4]), ("", t["while"][:300])]


def race_rows():
    """(article, question, four options) rows."""
    t = topics()
    return [(t["pass"][:400], "What does _ do?", ["nothing", "everything", "a loop", "an error"]),
            (t["for"][:1500], "Which statement is it about?", ["for", "while", "if", "try"]),
            ("Le café « Zoë » sert une crème brûlée.", "Qui sert la crème ?", ["le café", "Zoë", "personne", ""])]


def words_rows():
    """Pre-split words [B, W], padded with ""."""
    rows = [text.split() for text in texts()[:4]]
    width = max(len(row) for row in rows)
    return [row + [""] * (width - len(row)) for row in rows]


def sentence_inputs():
    """Texts by the input names of the sentence tasks' and SQuAD's signatures."""
    a, b = pairs()
    squad = squad_rows()
    return {"text": texts(), "text_a": a, "text_b": b, "question": [q for q, _ in squad],
            "context": [c for _, c in squad], "words": words_rows()}


def prompt_inputs():
    """The language model's prompts: short, one a single character, one empty."""
    return dict(sentence_inputs(), text=["The for statement", "Exceptions are raised when", "x", ""])


def race_inputs():
    """RACE's article, question and options."""
    race = race_rows()
    return dict(sentence_inputs(), article=[r[0] for r in race], question=[r[1] for r in race],
                options=[r[2] for r in race])


# ``predict_ids``' inputs: the features the training path (``xlnet_tf.data.finetuning``) builds for the same rows,
# with the fine-tuned model's tokenizer and settings; each takes (tokenizer, max_seq_len, finetune config, export
# metadata) and returns the features.


def sentence_ids(tokenizer, length, config, metadata):
    from xlnet_tf.data import finetuning, readers

    return finetuning.classification_features([readers.TextExample(x) for x in texts()], tokenizer, length)[0]


def pair_ids(tokenizer, length, config, metadata):
    from xlnet_tf.data import finetuning, readers

    rows = [readers.TextExample(x, y) for x, y in zip(*pairs())]
    return finetuning.classification_features(rows, tokenizer, length)[0]


def squad_ids(tokenizer, length, config, metadata):
    from xlnet_tf.data import finetuning, readers

    examples = [readers.SquadExample(str(i), q, c) for i, (q, c) in enumerate(squad_rows())]
    return finetuning.squad_features(examples, tokenizer, length, doc_stride=metadata["doc_stride"],
                                     max_query_len=metadata["max_query_len"])[0]


def race_ids(tokenizer, length, config, metadata):
    from xlnet_tf.data import finetuning, readers

    qa_len = min(int(config.get("max_qa_len", 128)), length - 3)  # as the export reads it
    return finetuning.race_features([readers.RaceExample(*row) for row in race_rows()], tokenizer, length,
                                    max_qa_len=qa_len)[0]


def signature_inputs(kind, model_dir, metadata, signature, specs):
    """The inputs of one signature: text by input name (the kind's rows), tf.Examples for Classify / Regress,
    ids from the training path's features for ``predict_ids``, sampling settings for ``generate``."""
    by_name = KINDS[kind].inputs()
    if signature == "predict_ids":
        return ids_inputs(kind, model_dir, metadata, sorted(specs))
    if signature == "generate":
        return {"text": strings(by_name["text"]), "max_new_tokens": numbers("int32", [8, 3, 8, 5]),
                "temperature": numbers("float32", [0.0, 0.8, 1.0, 0.7]), "top_k": numbers("int32", [0, 40, 5, 0]),
                "top_p": numbers("float32", [1.0, 0.9, 0.5, 0.95]), "seed": numbers("int64", [7, 8, 9, 10])}
    out = {}
    for name, dtype in specs.items():
        if name == "inputs" and dtype == "string":  # serialized tf.Examples (Classify / Regress)
            features = metadata["example_features"]
            out[name] = {"dtype": "example", "data": [dict(zip(features, row)) for row in
                                                      zip(*(by_name[feature] for feature in features))]}
        elif dtype == "string" and name in by_name:
            out[name] = strings(by_name[name])
        else:
            raise ValueError(f"{kind} {signature}: no request input for {name} ({dtype}); add one to compat.py")
    return out


def ids_inputs(kind, model_dir, metadata, names):
    """``predict_ids``' inputs for the export of `kind`: its ids function's features, with the fine-tuned
    directory's tokenizer and settings."""
    from xlnet_tf.heads import FINETUNE_FILE
    from xlnet_tf.model import SPM_FILE
    from xlnet_tf.tokenization import XLNetTokenizer, tokenizer_settings

    with open(os.path.join(model_dir, FINETUNE_FILE), encoding="utf-8") as f:
        config = json.load(f)
    tokenizer = XLNetTokenizer(os.path.join(model_dir, config.get("spm_model") or SPM_FILE),
                               **tokenizer_settings(config))
    features = KINDS[kind].ids(tokenizer, metadata["max_seq_len"], config, metadata)
    return {name: numbers("int32", features[name].tolist()) for name in names}


# ----------------------------------------------------------------------------------------------------
# The models and their exports, made with the package's commands

class Kind(typing.NamedTuple):
    """One export kind: the model directory under the work folder it is exported from, its `xlnet-tf export`
    flags, its precision, its requests' texts by input name and its ``predict_ids`` features (functions above)."""

    model: str
    flags: list
    precision: str
    inputs: typing.Callable = sentence_inputs
    ids: typing.Callable = sentence_ids


KINDS = {
    "classification": Kind("classifier", [], "float32"),
    "regression": Kind("regressor", [], "float32", ids=pair_ids),  # on pairs: text_a, text_b
    "multi-label": Kind("multilabel", [], "float32"),
    "squad": Kind("squad-model", [], "float32", ids=squad_ids),
    "race": Kind("race-model", [], "float32", race_inputs, race_ids),
    "token-classification": Kind("names-model", [], "float32"),
    "encoder": Kind("classifier", ["--reusable"], "float32"),
    "lm": Kind("lm", ["--max-seq-len", str(SEQ_LEN), "--max-new-tokens", "8"], "float32", prompt_inputs),
    "classification-bfloat16": Kind("classifier", ["--precision", "bfloat16"], "bfloat16"),
    "classification-float16": Kind("classifier", ["--precision", "float16"], "float16"),
}


def write_derived_tasks(work):
    """A regression task on pairs and a multi-label task, made from the classification sample's rows (the
    sample data has neither): regression's label is text_a's share of the pair's characters, multi-label's
    which of four words a text mentions."""
    with open(os.path.join(work, "data", "train.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t")[0] for line in f][1:201]
    words = ("return", "value", "function", "the")
    with open(os.path.join(work, "data", "regression.tsv"), "w", encoding="utf-8") as f:
        f.write("text_a\ttext_b\tlabel\n")
        for a, b in zip(rows, rows[1:] + rows[:1]):
            f.write(f"{a}\t{b}\t{len(a) / (len(a) + len(b)):.3f}\n")
    with open(os.path.join(work, "data", "multilabel.tsv"), "w", encoding="utf-8") as f:
        f.write("text\tlabel\n")
        for text in rows:
            f.write(f"{text}\t{','.join(w for w in words if w in text.lower().split())}\n")


def steps(work):
    """The commands that make every model, in three waves (each wave's commands are independent)."""
    w = lambda *parts: os.path.join(work, *parts)  # noqa: E731
    spm = ["--spm-model", w("spiece.model")]
    data = [["sample-data", "--task", task, "--output-dir", w(folder)]
            for task, folder in (("corpus", "data"), ("classification", "data"), ("squad", "squad"), ("race", "race"),
                                 ("token-classification", "names"))]
    tokenizer = [["train-spm", "--input", w("data", "corpus.txt"), "--model-prefix", w("spiece"),
                  "--vocab-size", "1000"]]
    lm = [["create-pretraining-data", "--input", w("data", "corpus.txt"), *spm, "--output-dir", w("pretraining"),
           "--seq-len", str(SEQ_LEN), "--reuse-len", str(SEQ_LEN // 2), "--num-shards", "1", "--seed", "0"],
          ["pretrain", "--data-dir", w("pretraining"), "--model-dir", w("lm"), "--model-size", "tiny",
           "--train-steps", "4", "--batch-size", "4", "--learning-rate", "1e-3", "--warmup-steps", "1"]]
    finetune = [
        ["--task", "classification", "--train-file", w("data", "train.tsv"), "--model-dir", w("classifier"),
         "--max-seq-len", str(SEQ_LEN)],
        ["--task", "regression", "--train-file", w("data", "regression.tsv"), "--model-dir", w("regressor"),
         "--max-seq-len", str(SEQ_LEN)],
        ["--task", "multi-label", "--train-file", w("data", "multilabel.tsv"), "--model-dir", w("multilabel"),
         "--max-seq-len", str(SEQ_LEN)],
        ["--task", "squad", "--train-file", w("squad", "train.json"), "--model-dir", w("squad-model"),
         "--max-seq-len", str(SQUAD_LEN), "--max-query-len", "16", "--doc-stride", "24"],
        ["--task", "race", "--train-file", w("race", "train"), "--model-dir", w("race-model"),
         "--max-seq-len", str(RACE_LEN)],
        ["--task", "token-classification", "--train-file", w("names", "train.txt"), "--model-dir", w("names-model"),
         "--max-seq-len", str(SEQ_LEN)],
    ]
    models = [lm] + [[["finetune", *argv, *spm, *TINY]] for argv in finetune]
    return data + tokenizer, models


def run_command(argv, log):
    """One `xlnet-tf` command (the console script beside this interpreter), its output to `log`; raises on
    failure with the log's end."""
    command = [os.path.join(os.path.dirname(sys.executable), "xlnet-tf"), *argv]
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if done.returncode != 0:
        with open(log, encoding="utf-8", errors="replace") as f:
            raise RuntimeError(f"`xlnet-tf {' '.join(argv)}` failed ({done.returncode}):\n{f.read()[-3000:]}")
    return time.perf_counter() - start


def log_name(argv):
    """A command's log file name: the command, its task and the folder it writes."""
    named = [argv[0]] + [os.path.basename(argv[argv.index(flag) + 1]) for flag in
                         ("--task", "--export-base", "--model-dir", "--output-dir", "--model-prefix") if flag in argv]
    return "-".join(named) + ".log"


def run_chains(chains, work, jobs):
    """Runs chains of commands (each chain in order, chains side by side, `jobs` at a time); a command that
succeeded before in this work folder (its log's ``.done`` marker) is not run again."""
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)

    def chain(commands):
        for argv in commands:
            log = os.path.join(work, "logs", log_name(argv))
            if os.path.exists(log + ".done"):  # a --work-dir used before: made already
                print(f"  (done before)  {log_name(argv)[:-4]}", flush=True)
                continue
            seconds = run_command(argv, log)
            with open(log + ".done", "w", encoding="utf-8") as f:
                f.write(f"{seconds:.1f}\n")
            print(f"  {seconds:6.1f} s  {log_name(argv)[:-4]}", flush=True)

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for future in [pool.submit(chain, c) for c in chains]:
            future.result()


def make_exports(work, jobs):
    """Every model, then every kind's export -> {kind: export version directory}."""
    first, models = steps(work)
    print("data and tokenizer:", flush=True)
    run_chains([[argv] for argv in first[:-1]], work, jobs)
    run_chains([first[-1:]], work, 1)
    write_derived_tasks(work)
    print("models:", flush=True)
    run_chains(models, work, jobs)
    print("exports:", flush=True)
    exports = {kind: os.path.join(work, "exports", kind) for kind in KINDS}
    run_chains([[["export", "--model-dir", os.path.join(work, k.model), "--export-base", exports[kind], "--version",
                  "1", *k.flags]] for kind, k in KINDS.items()], work, jobs)
    return {kind: os.path.join(path, "1") for kind, path in exports.items()}


# ----------------------------------------------------------------------------------------------------
# Both runtimes, and the comparison


def run_runtimes(work, exports, requests, other_python):
    """``compat_runner.py`` with this interpreter and with `other_python`, side by side -> (here, other) results."""
    job = os.path.join(work, "requests.json")
    with open(job, "w", encoding="utf-8") as f:
        json.dump({"exports": exports, "requests": requests}, f)
    processes = {}
    for name, python in (("here", sys.executable), ("other", other_python)):
        log = open(os.path.join(work, "logs", f"runner-{name}.log"), "w", encoding="utf-8")  # noqa: SIM115
        processes[name] = (subprocess.Popen([python, RUNNER, job, os.path.join(work, f"results-{name}.json")],
                                            stdout=log, stderr=subprocess.STDOUT,
                                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")), log)
    results = {}
    for name, (process, log) in processes.items():
        status = process.wait()
        log.close()
        if status != 0:
            with open(log.name, encoding="utf-8", errors="replace") as f:
                raise RuntimeError(f"the runner ({name}) failed ({status}):\n{f.read()[-3000:]}")
        with open(os.path.join(work, f"results-{name}.json"), encoding="utf-8") as f:
            results[name] = json.load(f)
        if results[name]["modules"]:
            raise RuntimeError(f"the runner ({name}) imported {results[name]['modules']}: it must not need xlnet_tf")
    return results["here"], results["other"]


def first_line(error):
    """An error's first line (what the table shows)."""
    return error.strip().splitlines()[0] if error else ""


def compare_outputs(where, mine, theirs, relative, row):
    """Compares one request's outputs in both runtimes into `row` (worst float diff, mismatches)."""
    import numpy as np

    if set(mine) != set(theirs):
        row["mismatches"].append(f"{where}: outputs {sorted(mine)} vs {sorted(theirs)}")
        return
    for name in sorted(mine):
        a, b = mine[name], theirs[name]
        label = f"{where}:{name}"
        if a["shape"] != b["shape"] or a["dtype"] != b["dtype"]:
            row["mismatches"].append(f"{label}: {a['dtype']}{a['shape']} vs {b['dtype']}{b['shape']}")
        elif a["dtype"].startswith("float"):
            x, y = np.asarray(a["data"], np.float64), np.asarray(b["data"], np.float64)
            same_nan = np.array_equal(np.isnan(x), np.isnan(y))
            finite = ~np.isnan(x)
            diff = float(np.max(np.abs(x[finite] - y[finite]), initial=0.0)) if same_nan else math.inf
            bound = relative * max(1.0, float(np.max(np.abs(x[finite]), initial=0.0)))
            row["outputs_compared"] += 1
            if row["worst"] is None or diff / bound > row["worst"]["diff"] / row["worst"]["bound"]:
                row["worst"] = {"output": label, "diff": diff, "bound": bound}
            if diff > bound:
                row["mismatches"].append(f"{label}: max |diff| {diff:.2e} > bound {bound:.2e}")
        else:
            row["outputs_compared"] += 1
            unequal = sum(1 for p, q in zip(a["data"], b["data"]) if p != q)
            if unequal:
                row["mismatches"].append(f"{label}: {unequal} of {len(a['data'])} values differ")


def compare(kind, requests, here, other, precision):
    """One kind's row of the table: loads (both TensorFlow Serving's Session way and tf.saved_model.load), the
    worst float difference against its bound, strings and integers equal."""
    row = {"kind": kind, "precision": precision, "relative_bound": BOUNDS[precision], "signatures": [],
           "requests": 0, "outputs_compared": 0, "worst": None, "mismatches": [],
           "load_errors": {mode: error for mode, error in other["loads"][kind].items() if error},
           "load_errors_here": {mode: error for mode, error in here["loads"][kind].items() if error},
           "load_seconds": other["load_seconds"][kind]}
    for request in requests:
        if request["export"] != kind:
            continue
        row["signatures"].append(request["signature"])
        row["requests"] += 1
        for mode, mine in here["outputs"][request["key"]].items():
            theirs = other["outputs"][request["key"]][mode]
            where = f"{request['signature']}@{mode}"
            if "error" in mine:
                row["mismatches"].append(f"{where}: fails in this runtime: {first_line(mine['error'])}")
            elif "error" in theirs:
                row["mismatches"].append(f"{where}: fails in the other runtime: {first_line(theirs['error'])}")
            else:
                compare_outputs(where, mine, theirs, BOUNDS[precision], row)
    row["loads"] = not row["load_errors"]
    row["ok"] = row["loads"] and not row["load_errors_here"] and not row["mismatches"] and row["requests"] > 0
    return row


def cpu_flags():
    """The CPU's model name and which of avx2 / avx512f / avx512_bf16 / amx_bf16 it has (Linux /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info = f.read()
    except OSError:
        return {"model": "unknown", "flags": []}
    fields = {key.strip(): value.strip() for key, value in
              (line.split(":", 1) for line in info.split("\n\n")[0].splitlines() if ":" in line)}
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name", "unknown"),
            "flags": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]}


def table(rows, here, other):
    """The printed table."""
    lines = [f"runtimes: this one tensorflow {here['tensorflow']} / tensorflow-text {here['tensorflow_text']}, "
             f"the other tensorflow {other['tensorflow']} / tensorflow-text {other['tensorflow_text']}",
             "", f"| kind | loads in {other['tensorflow']} | max abs diff | bound | requests | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        loads = "yes" if row["loads"] else "no: " + first_line(next(iter(row["load_errors"].values())))
        worst = row["worst"]
        diff, bound = (f"{worst['diff']:.1e}", f"{worst['bound']:.1e}") if worst else ("-", "-")
        lines.append(f"| {row['kind']} | {loads} | {diff} | {bound} | {row['requests']} | "
                     f"{'ok' if row['ok'] else 'FAILED'} |")
    for row in rows:
        for problem in row["mismatches"][:5] + [f"{mode} (this runtime): {first_line(error)}"
                                                for mode, error in row["load_errors_here"].items()]:
            lines.append(f"  {row['kind']}: {problem}")
    return "\n".join(lines)


def main(argv=None):
    """Builds the exports, runs both runtimes, prints and writes the table; 0 when every kind passes."""
    parser = argparse.ArgumentParser(prog="python -m xlnet_tf.benchmarks.compat", description=__doc__.splitlines()[0])
    parser.add_argument("--other-python", required=True,
                        help="the interpreter of the other runtime's virtualenv (tensorflow + tensorflow-text only)")
    parser.add_argument("--work-dir", help="where the models and exports go (default: a temporary folder, removed "
                                           "afterwards); kept, and a second run skips the commands that succeeded")
    parser.add_argument("--output", default="compat_results.json", help="the table as JSON")
    parser.add_argument("--jobs", type=int, default=2, help="commands run side by side while making the models")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # this process reads signatures and tokenizes: quietly
    import logging

    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    start = time.perf_counter()
    work = os.path.abspath(args.work_dir or tempfile.mkdtemp(prefix="xlnet-compat-"))
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    try:
        exports = make_exports(work, args.jobs)
        built = time.perf_counter() - start
        requests = [r for kind, k in KINDS.items()
                    for r in requests_for(kind, exports[kind], os.path.join(work, k.model))]
        print(f"running {len(requests)} requests on {len(exports)} exports in both runtimes", flush=True)
        here, other = run_runtimes(work, exports, requests, args.other_python)
        rows = [compare(kind, requests, here, other, k.precision) for kind, k in KINDS.items()]
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    seconds = time.perf_counter() - start
    print(table(rows, here["runtime"], other["runtime"]))
    cpu = cpu_flags()
    print(f"cpu: {cpu['model']} ({', '.join(cpu['flags']) or 'none of avx2 / avx512 / amx'}); "
          f"{seconds:.0f} s ({built:.0f} s making the models and exports)")
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump({"runtimes": {"here": here["runtime"], "other": other["runtime"]}, "cpu": cpu,
                   "bounds": BOUNDS, "seconds": round(seconds, 1), "rows": rows}, f, indent=2)
    failed = [row["kind"] for row in rows if not row["ok"]]
    print(f"{len(rows) - len(failed)} of {len(rows)} export kinds load and answer the same"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
