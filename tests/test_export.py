"""Export for TensorFlow Serving (xlnet_tf.export): raw-text signatures with the tokenizer in the graph.

Tiny fine-tuned directories (random weights, initialiser stddev 0.3 so that outputs depend strongly on the
input) are exported; the exports are COPIED elsewhere (originals deleted) and run in separate Python
processes that import only tensorflow and tensorflow_text (an import hook makes any import of xlnet_tf
fail). Their outputs are compared with the in-Python model fed by the training path's features
(``xlnet_tf.data.finetuning``, padded to max_seq_len, where the exports pad each request to its longest row)
and, for SQuAD, ``squad_predictions``. Every checked figure is printed with its bound.
"""

import json
import os
import shutil
import stat
import subprocess
import sys

import numpy as np
import pydoc_data.topics
import pytest

TOLERANCE = 1e-5
CLS_LEN, SQUAD_LEN, RACE_LEN = 32, 48, 40
SQUAD_OPTIONS = dict(doc_stride=8, max_query_len=10)
RACE_QA_LEN = 12

UNICODE = [
    "Le café « Zoë » sert une crème brûlée, said Ōtsuka-san in 1,999 B.C.",
    "日本語のテキスト and 中文 text; ``quoted'' words.",
    "naïve résumé — “smart quotes” and 'single' ones, ﬁne ligatures",
    "emoji 🙂 and e\u0301 combining, Ελληνικά ΣΊΣΥΦΟΣ.",
    "tab\tand\nnewline   spaces  ",
]
TOPICS = pydoc_data.topics.topics
LINES = [line.strip() for _, text in sorted(TOPICS.items()) for line in text.splitlines() if line.strip()]
LONG = " ".join(LINES)[:20000]  # far longer than max_seq_len: truncated (or, for SQuAD, many windows)

# Loads the exports in a fresh interpreter: only tensorflow + tensorflow_text; xlnet_tf cannot be imported.
LOADER = r'''
import json, sys

class _NoXLNet:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "xlnet_tf":
            raise ImportError("the export must not need " + name)

sys.meta_path.insert(0, _NoXLNet())
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers SentencePiece / NormalizeUTF8)


def session_run(sessions, path, signature, inputs):
    """TensorFlow Serving's way: the SavedModel loaded into a TF1 Session (restore op + init op), run by
    SignatureDef tensor names."""
    if path not in sessions:
        session = tf.compat.v1.Session(graph=tf.Graph())
        with session.graph.as_default():
            meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        sessions[path] = (session, meta)
    session, meta = sessions[path]
    sig = meta.signature_def[signature]
    fetches = {k: t.name for k, t in sig.outputs.items()}
    return session.run(fetches, {sig.inputs[k].name: v for k, v in inputs.items()})


requests = json.load(open(sys.argv[1], encoding="utf-8"))
loaded, sessions, results = {}, {}, {}
for key, request in requests.items():
    inputs = {k: tf.constant(v, dtype=tf.string if request["dtypes"][k] == "string" else tf.int32)
              for k, v in request["inputs"].items()}
    if request.get("session"):
        outputs = session_run(sessions, request["dir"], request["signature"],
                              {k: v.numpy() for k, v in inputs.items()})
    else:
        if request["dir"] not in loaded:
            loaded[request["dir"]] = tf.saved_model.load(request["dir"])
        fn = loaded[request["dir"]].signatures[request["signature"]]
        outputs = {k: v.numpy() for k, v in fn(**inputs).items()}
    out = {}
    for name, array in outputs.items():
        if array.dtype == object:
            data, dtype = [s.decode("utf-8") for s in array.reshape(-1)], "string"
        else:
            data, dtype = array.reshape(-1).tolist(), array.dtype.name
        out[name] = {"dtype": dtype, "shape": list(array.shape), "data": data}
    results[key] = out
results["__modules__"] = sorted(m for m in sys.modules if m.split(".")[0] == "xlnet_tf")
json.dump(results, open(sys.argv[2], "w", encoding="utf-8"))
'''


def check(name, got, want, bound=TOLERANCE):
    diff = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)), initial=0.0))
    print(f"{name}: max|diff| = {diff:.2e} (bound {bound:.0e})")
    assert diff <= bound, name


def report(name, got, expected):
    shown = repr(got)
    if len(shown) > 240:
        shown = shown[:200] + f"... ({len(got)} items)"
        print(f"{name} = {shown} ({'equal to' if got == expected else 'DIFFERENT from'} the expected value)")
    else:
        print(f"{name} = {shown} (expected {expected!r})")
    assert got == expected, name


# ----------------------------------------------------------------------------------------------------
# Fixtures: tokenizer, fine-tuned directories, copied exports, the separate process's outputs


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("export")


@pytest.fixture(scope="module")
def spm_file(work):
    from xlnet_tf.tokenization import train_spm

    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(LINES + UNICODE * 3) + "\n", encoding="utf-8")
    return train_spm(corpus, work / "spm", 1000, minloglevel=2, num_threads=2)


@pytest.fixture(scope="module")
def tokenizer(spm_file):
    from xlnet_tf.tokenization import XLNetTokenizer

    return XLNetTokenizer(spm_file)


FINETUNED = {
    "cls": ("classification", dict(max_seq_len=CLS_LEN, num_labels=3, label_names=["negative", "neutral", "positive"])),
    "pair": ("classification", dict(max_seq_len=CLS_LEN, num_labels=2, label_names=["different", "same"], pairs=True)),
    "reg": ("regression", dict(max_seq_len=CLS_LEN, pairs=True)),  # trained in mixed_bfloat16 (below)
    "squad": ("squad", dict(max_seq_len=SQUAD_LEN, start_n_top=5, end_n_top=5, **SQUAD_OPTIONS)),
    "race": ("race", dict(max_seq_len=RACE_LEN, max_qa_len=RACE_QA_LEN)),
}


@pytest.fixture(scope="module")
def finetuned(work, spm_file):
    """name -> fine-tuned directory (random weights) as `xlnet-tf finetune` writes it."""
    import keras

    from xlnet_tf.config import RunOptions, XLNetConfig
    from xlnet_tf.heads import head_arguments, save_finetuned
    from xlnet_tf.tasks import build_head_model

    spm_dir = work / "spm_dir"
    spm_dir.mkdir()
    shutil.copy(spm_file, spm_dir / "spiece.model")
    config = XLNetConfig(n_token=1000, d_model=32, n_layer=2, n_head=4, d_head=8, d_inner=64)
    dirs = {}
    for i, (name, (task, extra)) in enumerate(FINETUNED.items()):
        keras.utils.set_random_seed(100 + i)
        finetune_config = {"task": task, "lower_case": False, "spm_model": "spiece.model", "doc_stride": 128,
                           "max_query_len": 64, **extra}
        model = build_head_model(task, config, RunOptions(dropout=0.0, dropatt=0.0, initializer_range=0.3),
                                 dtype="mixed_bfloat16" if name == "reg" else None, **head_arguments(finetune_config))
        dirs[name] = str(work / "finetuned" / name)
        save_finetuned(model, dirs[name], finetune_config, extra_files=[str(spm_dir / "spiece.model")])
    return dirs


@pytest.fixture(scope="module")
def references(finetuned):
    """name -> (in-Python model, finetune_config)."""
    from xlnet_tf.tasks import load_finetuned

    return {name: load_finetuned(path, dropout=0.0, dropatt=0.0) for name, path in finetuned.items()}


# Exported in a second process (the rest in the test's): {name: version directory} as its last line.
EXPORTED_BESIDE = ("reg", "squad")
RESULT = "EXPORTED "
EXPORTER = r'''
import json, sys
from xlnet_tf.export.exporter import export_model

jobs = json.loads(sys.argv[1])
print("EXPORTED " + json.dumps({name: export_model(path, base, reusable=reusable)
                                for name, path, base, reusable in jobs}), flush=True)
'''


@pytest.fixture(scope="module")
def exports(work, finetuned):
    """name -> a COPY of the export (the original version directory is deleted)."""
    from xlnet_tf.export.exporter import export_model

    every = list(finetuned.items()) + [("reusable", finetuned["cls"])]
    jobs = [(name, path, str(work / "serving" / name), name == "reusable") for name, path in every]
    # Half of them exported by the same export_model in a second process meanwhile (tracing keeps one core busy).
    beside = [job for job in jobs if job[0] in EXPORTED_BESIDE]
    output = work / "exporter_output.txt"
    with open(output, "w", encoding="utf-8") as out:
        process = subprocess.Popen([sys.executable, "-c", EXPORTER, json.dumps(beside)], stdout=out,
                                   stderr=subprocess.STDOUT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        exported = {name: export_model(path, base, reusable=reusable)
                    for name, path, base, reusable in jobs if name not in EXPORTED_BESIDE}
        process.wait(timeout=600)
    finally:
        if process.poll() is None:  # a failure above: stop it too
            process.kill()
    printed = output.read_text(encoding="utf-8", errors="replace")
    assert process.returncode == 0, printed[-4000:]
    exported.update(json.loads(next(line for line in reversed(printed.splitlines()) if line.startswith(RESULT))
                               [len(RESULT):]))
    report("exports written", sorted(exported), sorted(name for name, _ in every))
    out = {}
    for name, _ in every:
        copy = work / "copied" / name / os.path.basename(exported[name])
        shutil.copytree(exported[name], copy)
        shutil.rmtree(exported[name])
        out[name] = str(copy)
    return out


def _pairs():
    a = LINES[:40] + UNICODE + ["", LONG, "short", "Is this the same?"] + LINES[200:215]
    b = LINES[1:41] + UNICODE[::-1] + ["not empty", "", LONG, ""] + LINES[300:315]
    return a[:64], b[:64]


TEXTS = ["A positive sentence.", ""] + UNICODE + [LONG]
CLS_BATCH = (LINES[:50] + UNICODE + ["", LONG] + LINES[500:507])[:64]
ALONE = (0, 3, 50, 55, 56)  # rows sent alone too: short, accented, empty, 20k characters
SHORT = ["short", "a few words here"]  # a request far shorter than max_seq_len
QUESTIONS = ["What does the if statement do?", "Which exceptions are raised?", "Qui sert une crème brûlée ?",
             "テキストは何ですか", "", "What is a “smart quote”?", "What happens to ``quoted'' text?",
             "Where is the tab?"]
CONTEXTS = [TOPICS["if"], TOPICS["try"][:2500], UNICODE[0], UNICODE[1], UNICODE[2], UNICODE[2], UNICODE[1],
            UNICODE[4]]
CJK = ["東京は日本の首都です。人口は約千四百万人で、昔は「江戸」と呼ばれていました。",
       "北京是中国的首都，上海是最大的城市。``引用''和“引号”都在这里。",
       "日本語のテキスト and 中文 text; ``quoted'' words, then 日本語のテキスト again.",
       "中文 text 日本語のテキスト 中文 text 日本語のテキスト",
       "テキスト: 日本語のテキスト, 中文. 日本語 and 中文 text."]
BATCH64_CONTEXTS = (UNICODE + CJK * 3 + ["", LONG[:3000]] + LINES[:50])[:64]
BATCH64_QUESTIONS = (QUESTIONS * 8)[:64]
MULTI = [(f"What about {name}?", TOPICS[name][:1500]) for name in ("assert", "for", "while", "with", "lambda", "pass")]
RACE = [
    (TOPICS["pass"][:400], "What does _ do?", ["nothing", "everything", "a loop", "an error"]),
    (UNICODE[0], "Qui sert la crème ?", ["le café", "Zoë", "Ōtsuka-san", ""]),
    ("", "", ["", "", "", ""]),
    (LONG, "Why?", ["because", "it is long", "_", "none of them"]),
]


# The exports each serving process loads (about the same work in each; together: every export).
LOADER_GROUPS = (("cls", "pair", "race"), ("reg", "squad", "reusable"))


def _request(path, signature, session=False, **inputs):
    dtypes = {k: "int32" if isinstance(v, np.ndarray) and v.dtype != object else "string" for k, v in inputs.items()}
    return {"dir": path, "signature": signature, "dtypes": dtypes, "session": session,
            "inputs": {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in inputs.items()}}


@pytest.fixture(scope="module")
def features(tokenizer):
    """Numpy features (the training path, padded to max_seq_len) for the requests sent to the exports."""
    from xlnet_tf.data import finetuning as ft
    from xlnet_tf.data import readers as rd

    a, b = _pairs()
    squad_examples = [rd.SquadExample(str(i), q, c) for i, (q, c) in enumerate(zip(QUESTIONS, CONTEXTS))]
    multi_examples = [rd.SquadExample(f"m{i}", q, c) for i, (q, c) in enumerate(MULTI)]
    race_examples = [rd.RaceExample(art, q, opts) for art, q, opts in RACE]
    ids, starts, ends = (t.to_list() for t in ft.tokens_with_char_offsets(tokenizer, TEXTS))
    return {
        "cls": ft.classification_features([rd.TextExample(t) for t in CLS_BATCH], tokenizer, CLS_LEN)[0],
        "cls_texts": ft.classification_features([rd.TextExample(t) for t in TEXTS], tokenizer, CLS_LEN)[0],
        "pair": ft.classification_features([rd.TextExample(x, y) for x, y in zip(a, b)], tokenizer, CLS_LEN)[0],
        "squad": (squad_examples, ft.squad_features(squad_examples, tokenizer, SQUAD_LEN, **SQUAD_OPTIONS)[0]),
        "multi": (multi_examples, ft.squad_features(multi_examples, tokenizer, SQUAD_LEN, **SQUAD_OPTIONS)[0]),
        "race": ft.race_features(race_examples, tokenizer, RACE_LEN, max_qa_len=RACE_QA_LEN)[0],
        "tokens": [tuple(np.array(x, np.int64) for x in row) for row in zip(ids, starts, ends)],
        "short": ft.classification_features([rd.TextExample(t) for t in SHORT], tokenizer, CLS_LEN)[0],
    }


@pytest.fixture(scope="module")
def served(work, exports, features):
    """Outputs of the copied exports, computed in a process that imports only tensorflow + tensorflow_text."""
    a, b = _pairs()
    ids = {k: features["cls_texts"][k] for k in ("input_ids", "segment_ids", "padding_mask")}
    squad_rows = {k: features["squad"][1][k][:6] for k in ("input_ids", "segment_ids", "padding_mask", "p_mask",
                                                           "cls_index")}
    requests = {
        "cls/batch64": _request(exports["cls"], "serving_default", text=CLS_BATCH),
        "cls/batch1": _request(exports["cls"], "serving_default", text=[UNICODE[0]]),
        "cls/batch0": _request(exports["cls"], "serving_default", text=[]),
        "cls/encode": _request(exports["cls"], "encode", text=TEXTS),
        "cls/tokenize": _request(exports["cls"], "tokenize", text=TEXTS),
        "cls/predict_ids": _request(exports["cls"], "predict_ids", **ids),
        "pair/batch64": _request(exports["pair"], "serving_default", text_a=a, text_b=b),
        "pair/batch1": _request(exports["pair"], "serving_default", text_a=[""], text_b=[""]),
        "pair/encode": _request(exports["pair"], "encode", text_a=a[:8], text_b=b[:8]),
        "reg/batch64": _request(exports["reg"], "serving_default", text_a=a, text_b=b),
        "squad/batch": _request(exports["squad"], "serving_default", question=QUESTIONS, context=CONTEXTS),
        "squad/multi": _request(exports["squad"], "serving_default", question=[q for q, _ in MULTI],
                                context=[c for _, c in MULTI]),
        "squad/batch0": _request(exports["squad"], "serving_default", question=[], context=[]),
        "squad/batch1": _request(exports["squad"], "serving_default", question=[QUESTIONS[2]], context=[CONTEXTS[2]]),
        "squad/batch64": _request(exports["squad"], "serving_default", question=BATCH64_QUESTIONS,
                                  context=BATCH64_CONTEXTS),
        "squad/predict_ids": _request(exports["squad"], "predict_ids", **squad_rows),
        "squad/tokenize": _request(exports["squad"], "tokenize", text=TEXTS),
        "race/batch": _request(exports["race"], "serving_default", article=[r[0] for r in RACE],
                               question=[r[1] for r in RACE], options=[r[2] for r in RACE]),
        "race/batch1": _request(exports["race"], "serving_default", article=[RACE[1][0]], question=[RACE[1][1]],
                                options=[RACE[1][2]]),
        "reusable/encode": _request(exports["reusable"], "serving_default", text=TEXTS),
        "reusable/encode_short": _request(exports["reusable"], "serving_default", text=SHORT),
    }
    # Each text of a mixed-length batch alone: padded to its own length instead of the batch's.
    for i in ALONE:
        requests[f"cls/alone{i}"] = _request(exports["cls"], "serving_default", text=[CLS_BATCH[i]])
        requests[f"cls/encode_alone{i}"] = _request(exports["cls"], "encode", text=[CLS_BATCH[i]])
        requests[f"pair/alone{i}"] = _request(exports["pair"], "serving_default", text_a=[a[i]], text_b=[b[i]])
    # The same requests through a TF1 Session, as TensorFlow Serving loads a SavedModel.
    for key in ("cls/batch64", "pair/batch64", "reg/batch64", "squad/batch", "race/batch", "reusable/encode"):
        requests[key + "@session"] = dict(requests[key], session=True)
    # Two such processes side by side, each loading half of the exports (most of their time is TensorFlow
    # preparing each loaded function on its first call, one core each); every request runs in exactly one.
    script = work / "loader.py"
    script.write_text(LOADER, encoding="utf-8")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH="")
    processes = []
    for part, names in enumerate(LOADER_GROUPS):
        request_file, result_file = work / f"requests{part}.json", work / f"results{part}.json"
        request_file.write_text(json.dumps({key: request for key, request in requests.items()
                                            if key.split("/")[0] in names}), encoding="utf-8")
        processes.append((subprocess.Popen([sys.executable, str(script), str(request_file), str(result_file)],
                                           cwd=str(work), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True), result_file))
    results = {}
    for part, (process, result_file) in enumerate(processes):
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-4000:]
        loaded = json.loads(result_file.read_text(encoding="utf-8"))
        report(f"xlnet_tf modules imported by serving process {part + 1} of {len(processes)} (exports "
               f"{', '.join(LOADER_GROUPS[part])})", loaded.pop("__modules__"), [])
        results.update(loaded)
    report("requests answered by the serving processes", sorted(results), sorted(requests))

    def array(out):
        data = np.array(out["data"], dtype=object if out["dtype"] == "string" else None)
        return data.reshape(out["shape"])

    return {key: {name: array(out) for name, out in outs.items()} for key, outs in results.items()}


def _run(model, task, features):
    from xlnet_tf.training.finetune import run_model

    return run_model(model, task, features)


def _reference_answers(examples, features, outputs, max_answer_length=64):
    """squad_predictions' loop, also returning the winning window, score and character span."""
    best = {}
    k1 = outputs["start_top_index"].shape[1]
    k2 = outputs["end_top_index"].shape[1] // k1
    for row in range(len(features["input_ids"])):
        ex = int(features["example_index"][row])
        plen = int(features["paragraph_len"][row])
        for i in range(k1):
            start = int(outputs["start_top_index"][row, i])
            for j in range(k2):
                end = int(outputs["end_top_index"][row, i * k2 + j])
                if start >= plen or end >= plen or end < start or end - start + 1 > max_answer_length:
                    continue
                if not features["token_is_max_context"][row, start]:
                    continue
                score = float(outputs["start_top_log_probs"][row, i] + outputs["end_top_log_probs"][row, i * k2 + j])
                if ex not in best or score > best[ex][0]:
                    s, e = int(features["token_char_start"][row, start]), int(features["token_char_end"][row, end])
                    best[ex] = (score, int(features["window_index"][row]), s, max(s, e))
    null = {}
    for row in range(len(features["input_ids"])):
        ex = int(features["example_index"][row])
        null[ex] = min(null.get(ex, np.inf), float(outputs["cls_logits"][row]))
    return [best.get(i, (0.0, -1, -1, -1)) for i in range(len(examples))], [null[i] for i in range(len(examples))]


# ----------------------------------------------------------------------------------------------------
# Same outputs as the in-Python model, from a copied export in a process without xlnet_tf


@pytest.mark.slow
def test_classification_matches_python_model(served, references, features):
    import tensorflow as tf

    model, config = references["cls"]
    want = _run(model, "classification", features["cls"])["logits"]
    got = served["cls/batch64"]
    report("cls/batch64 logits shape", list(got["logits"].shape), [64, 3])
    check("cls/batch64 logits (64 texts: empty, 20k chars, accents, CJK)", got["logits"], want)
    check("cls/batch64 probabilities", got["probabilities"], tf.nn.softmax(want).numpy())
    report("cls/batch64 label_id == argmax", got["label_id"].tolist(), want.argmax(-1).tolist())
    report("cls/batch64 label", got["label"].tolist(), [config["label_names"][i] for i in want.argmax(-1)])
    spread = float(np.ptp(want[:, 0]))
    print(f"cls logits spread over the batch = {spread:.3f} (must exceed 1e-2 for the check to mean something)")
    assert spread > 1e-2
    report("cls/batch1 shapes", {k: list(v.shape) for k, v in served["cls/batch1"].items()},
           {"logits": [1, 3], "probabilities": [1, 3], "label_id": [1], "label": [1]})
    report("cls/batch0 (empty request) shapes", {k: list(v.shape) for k, v in served["cls/batch0"].items()},
           {"logits": [0, 3], "probabilities": [0, 3], "label_id": [0], "label": [0]})
    row = CLS_BATCH.index(UNICODE[0])
    check("cls/batch1 logits (same text inside the batch of 64)", served["cls/batch1"]["logits"][0], want[row])

    ids = {k: features["cls_texts"][k] for k in ("input_ids", "segment_ids", "padding_mask")}
    check("cls/predict_ids logits", served["cls/predict_ids"]["logits"], model(ids, training=False)["logits"])
    # encode gives the states at real tokens and zeros at padding (packed: padding is not computed)
    hidden = model.transformer(ids, training=False)["sequence_output"].numpy() * ids["padding_mask"][..., None]
    enc = served["cls/encode"]
    report("cls/encode sequence_output shape", list(enc["sequence_output"].shape), [len(TEXTS), CLS_LEN, 32])
    check("cls/encode sequence_output (real tokens; zeros at padding)", enc["sequence_output"], hidden)
    check("cls/encode pooled_output (= <cls>, last position)", enc["pooled_output"], hidden[:, -1])
    report("cls/encode input_ids", enc["input_ids"].tolist(), ids["input_ids"].tolist())
    report("cls/encode padding_mask", enc["padding_mask"].tolist(), ids["padding_mask"].tolist())
    check("reusable/serving_default sequence_output", served["reusable/encode"]["sequence_output"], hidden)


@pytest.mark.slow
def test_each_request_is_padded_to_its_own_longest_row(served, references, features):
    """A text alone (padded to its own length) gets what it gets inside a mixed-length batch of 64."""
    for i in ALONE:
        for key in ("cls", "pair"):
            check(f"{key}: text {i} alone vs in the batch of 64, logits", served[f"{key}/alone{i}"]["logits"][0],
                  served[f"{key}/batch64"]["logits"][i])
        encoded = served[f"cls/encode_alone{i}"]
        n = int(features["cls"]["length"][i])
        width = encoded["input_ids"].shape[1]
        print(f"text {i}: {n} tokens -> encode width {width} (bound: the multiple of 8 at or above {n}, at most "
              f"{CLS_LEN})")
        assert width == min(-(-n // 8) * 8, CLS_LEN)
        report(f"text {i}: encode input_ids alone == the training row's last {width} positions",
               encoded["input_ids"].tolist(), features["cls"]["input_ids"][i:i + 1, -width:].tolist())
    short = served["reusable/encode_short"]
    width = -(-int(features["short"]["length"].max()) // 8) * 8
    report(f"reusable encode of two short texts ({features['short']['length'].tolist()} tokens): shape",
           list(short["sequence_output"].shape), [2, width, 32])
    assert width < CLS_LEN
    ids = {k: features["short"][k] for k in ("input_ids", "segment_ids", "padding_mask")}
    padded = references["cls"][0].transformer(ids, training=False)["sequence_output"].numpy()[:, -width:]
    real = short["padding_mask"][..., None]
    check(f"reusable encode, short texts at width {width}: states at real positions vs padded to {CLS_LEN}",
          short["sequence_output"] * real, padded * real)


@pytest.mark.slow
def test_pair_and_regression_match_python_model(served, references, features, tokenizer):
    model, config = references["pair"]
    want = _run(model, "classification", features["pair"])["logits"]
    report("pair/batch64 logits shape", list(served["pair/batch64"]["logits"].shape), [64, 2])
    check("pair/batch64 logits (pairs incl. empty A / B, 20k-char sides)", served["pair/batch64"]["logits"], want)
    report("pair/batch64 label", served["pair/batch64"]["label"].tolist(),
           [config["label_names"][i] for i in want.argmax(-1)])
    from xlnet_tf.data import finetuning as ft
    from xlnet_tf.data.readers import TextExample

    single = ft.classification_features([TextExample("", "")], tokenizer, CLS_LEN)[0]
    check("pair/batch1 logits (empty pair)", served["pair/batch1"]["logits"],
          model({k: single[k] for k in ("input_ids", "segment_ids", "padding_mask")}, training=False)["logits"])
    ids = {k: features["pair"][k][:8] for k in ("input_ids", "segment_ids", "padding_mask")}
    check("pair/encode sequence_output (real tokens; zeros at padding)", served["pair/encode"]["sequence_output"],
          model.transformer(ids, training=False)["sequence_output"] * ids["padding_mask"][..., None])
    reg, _ = references["reg"]
    want = _run(reg, "regression", features["pair"])["predictions"]
    report("reg/batch64 prediction shape", list(served["reg/batch64"]["prediction"].shape), [64])
    check("reg/batch64 prediction", served["reg/batch64"]["prediction"], want)


@pytest.mark.slow
def test_tokenize_signature(served, features, exports):
    for key in ("cls/tokenize", "squad/tokenize"):
        out = served[key]
        width = CLS_LEN if key.startswith("cls") else SQUAD_LEN
        report(f"{key} shapes", {k: list(v.shape) for k, v in out.items()},
               {"token_ids": [len(TEXTS), width], "token_start": [len(TEXTS), width],
                "token_end": [len(TEXTS), width], "num_tokens": [len(TEXTS)]})
        # num_tokens counts the pieces the export reads: a text longer than its byte bound (LONG) is read up to it
        # (xlnet_export.json "limits"; tests/test_export_bounds.py), so it counts fewer pieces than the whole text
        with open(os.path.join(exports[key.split("/")[0]], "assets.extra", "xlnet_export.json")) as f:
            bound = json.load(f)["limits"]["text_inputs"]["text"]["bytes"]
        for i, (ids, starts, ends) in enumerate(features["tokens"]):
            n = min(len(ids), width)
            if len(TEXTS[i].encode()) <= bound:
                assert out["num_tokens"][i] == len(ids)
            else:
                print(f"{key}: text {i} ({len(TEXTS[i].encode())} bytes, bound {bound}): num_tokens "
                      f"{out['num_tokens'][i]} read of {len(ids)} (at least the width {width})")
                assert width <= out["num_tokens"][i] < len(ids)
            assert out["token_ids"][i, :n].tolist() == ids[:n].tolist() and (out["token_ids"][i, n:] == -1).all()
            assert out["token_start"][i, :n].tolist() == starts[:n].tolist()
            assert out["token_end"][i, :n].tolist() == ends[:n].tolist() and (out["token_end"][i, n:] == -1).all()
        print(f"{key}: ids and code point offsets equal the tokenizer's for {len(TEXTS)} texts (exact)")


@pytest.mark.slow
def test_squad_matches_squad_predictions(served, references, features):
    from xlnet_tf.tasks.base import TaskData
    from xlnet_tf.tasks.squad import squad_predictions

    model, _ = references["squad"]
    for key, name, questions, contexts in (("squad/batch", "squad", QUESTIONS, CONTEXTS),
                                           ("squad/multi", "multi", [q for q, _ in MULTI], [c for _, c in MULTI])):
        examples, feats = features[name]
        outputs = _run(model, "squad", feats)
        best, null = _reference_answers(examples, feats, outputs)
        official, official_null = squad_predictions(TaskData(examples, feats, {}), outputs)
        report(f"{key}: reference texts == squad_predictions", [contexts[i][s:e] if s >= 0 else ""
                                                               for i, (_, _, s, e) in enumerate(best)],
               [official[e.qas_id] for e in examples])
        got = served[key]
        report(f"{key} answer", got["answer"].tolist(), [official[e.qas_id] for e in examples])
        report(f"{key} answer_start", got["answer_start"].tolist(), [b[2] for b in best])
        report(f"{key} answer_end", got["answer_end"].tolist(), [b[3] for b in best])
        report(f"{key} window_index", got["window_index"].tolist(), [b[1] for b in best])
        check(f"{key} score", got["score"], [b[0] for b in best])
        check(f"{key} null_score (min cls_logits over windows)", got["null_score"],
              [official_null[e.qas_id] for e in examples])
        check(f"{key} no_answer_probability = sigmoid(null_score)", got["no_answer_probability"],
              1 / (1 + np.exp(-np.array(null))))
        windows = np.bincount(feats["example_index"], minlength=len(examples))
        print(f"{key}: windows per context {windows.tolist()}")
        for i, context in enumerate(contexts):
            s, e = int(got["answer_start"][i]), int(got["answer_end"][i])
            assert got["answer"][i] == (context[s:e] if s >= 0 else "")
    got = served["squad/multi"]
    later = [i for i, w in enumerate(got["window_index"]) if w >= 1]
    print(f"squad/multi: answers from a window after the first: {len(later)} of {len(MULTI)} "
          f"(windows {got['window_index'].tolist()}; at least 1 required)")
    assert later
    rows = {k: features["squad"][1][k][:6] for k in ("input_ids", "segment_ids", "padding_mask", "p_mask", "cls_index")}
    direct = model(rows, training=False)
    for name in ("start_logits", "start_top_log_probs", "end_top_log_probs", "cls_logits"):
        check(f"squad/predict_ids {name}", served["squad/predict_ids"][name], direct[name])
    for name in ("start_top_index", "end_top_index"):
        report(f"squad/predict_ids {name}", served["squad/predict_ids"][name].tolist(), direct[name].numpy().tolist())


@pytest.mark.slow
def test_squad_answers_are_exact_substrings(served):
    checked = 0
    for key, questions, contexts in (("squad/batch0", [], []), ("squad/batch", QUESTIONS, CONTEXTS),
                                     ("squad/batch1", [QUESTIONS[2]], [CONTEXTS[2]]),
                                     ("squad/batch64", BATCH64_QUESTIONS, BATCH64_CONTEXTS)):
        got = served[key]
        report(f"{key} output shapes", {k: list(v.shape) for k, v in got.items()},
               {k: [len(questions)] for k in ("answer", "answer_start", "answer_end", "score",
                                               "no_answer_probability", "null_score", "window_index")})
        for i, context in enumerate(contexts):
            s, e = int(got["answer_start"][i]), int(got["answer_end"][i])
            if s < 0:
                assert (e, got["answer"][i], float(got["score"][i])) == (-1, "", 0.0)
                continue
            assert 0 <= s <= e <= len(context), (key, i, s, e)
            assert got["answer"][i] == context[s:e], (key, i)
            assert 0 < got["no_answer_probability"][i] < 1
            checked += 1
    alone, batch = served["squad/batch1"], served["squad/batch"]
    report("squad: question 2 alone vs in its batch, answer", alone["answer"].tolist(), batch["answer"][2:3].tolist())
    for name in ("score", "null_score"):
        check(f"squad: question 2 alone vs in its batch, {name}", alone[name], batch[name][2:3])
    answers = [a for key in ("squad/batch", "squad/batch64") for a in served[key]["answer"]]
    kinds = {
        "accented": [a for a in answers if any(ch in a for ch in "éèêëïüöçåÅŌō") or "\u0301" in a],
        "quotes": [a for a in answers if any(ch in a for ch in "“”«»`'\"")],
        "CJK": [a for a in answers if any("\u3040" <= ch <= "\u9fff" for ch in a)],
    }
    print(f"answers == context[answer_start:answer_end] (code points) for {checked} answers")
    for kind, found in kinds.items():
        print(f"  {kind} answers: {len(found)} (at least 1 required), e.g. {found[:3]}")
        assert found, kind


@pytest.mark.slow
def test_race_matches_python_model(served, references, features):
    import tensorflow as tf

    model, _ = references["race"]
    want = _run(model, "race", features["race"])["logits"]
    got = served["race/batch"]
    report("race logits shape", list(got["logits"].shape), [len(RACE), 4])
    check("race logits (cloze, accents, empty article/options, 20k-char article)", got["logits"], want)
    check("race probabilities", got["probabilities"], tf.nn.softmax(want).numpy())
    report("race answer_index", got["answer_index"].tolist(), want.argmax(-1).tolist())
    check("race/batch1 logits", served["race/batch1"]["logits"], want[1:2])


@pytest.mark.slow
def test_tf1_session_loading_gives_the_same_outputs(served):
    """TensorFlow Serving restores the variables and runs the init op in a TF1 Session: the exports must
    work that way too (their functions must read the variables the checkpoint restores)."""
    for key in ("cls/batch64", "pair/batch64", "reg/batch64", "squad/batch", "race/batch", "reusable/encode"):
        session, eager = served[key + "@session"], served[key]
        report(f"{key}: outputs in a TF1 Session", sorted(session), sorted(eager))
        for name, value in eager.items():
            if value.dtype == object:
                report(f"{key}@session {name}", session[name].tolist(), value.tolist())
            else:
                check(f"{key}@session {name}", session[name], value)


# ----------------------------------------------------------------------------------------------------
# What TensorFlow Serving sees: signatures (saved_model_cli), ops, devices, no XLA, self-contained


def _expected_signatures(name):
    b = -1
    text = lambda *names: {n: ("DT_STRING", (b,)) for n in names}  # noqa: E731
    length = {"squad": SQUAD_LEN, "race": RACE_LEN}.get(name, CLS_LEN)
    inputs = {"pair": text("text_a", "text_b"), "reg": text("text_a", "text_b"),
              "squad": text("question", "context"),
              "race": {**text("article", "question"), "options": ("DT_STRING", (b, 4))}}.get(name, text("text"))
    encode_inputs = inputs if name in ("pair", "reg") else text("text")
    t = -1  # the request's own width (its longest row), at most max_seq_len
    encode = {"sequence_output": ("DT_FLOAT", (b, t, 32)), "pooled_output": ("DT_FLOAT", (b, 32)),
              "padding_mask": ("DT_INT32", (b, t)), "input_ids": ("DT_INT32", (b, t)),
              "segment_ids": ("DT_INT32", (b, t))}
    tokenize = {"token_ids": ("DT_INT32", (b, length)), "token_start": ("DT_INT64", (b, length)),
                "token_end": ("DT_INT64", (b, length)), "num_tokens": ("DT_INT64", (b,))}
    ids = {n: ("DT_INT32", (b, t)) for n in ("input_ids", "segment_ids", "padding_mask")}
    if name == "squad":
        serving = {"answer": ("DT_STRING", (b,)), "answer_start": ("DT_INT64", (b,)), "answer_end": ("DT_INT64", (b,)),
                   "score": ("DT_FLOAT", (b,)), "no_answer_probability": ("DT_FLOAT", (b,)),
                   "null_score": ("DT_FLOAT", (b,)), "window_index": ("DT_INT64", (b,))}
        ids.update(p_mask=("DT_INT32", (b, t)), cls_index=("DT_INT32", (b,)))
        raw = {"start_logits": ("DT_FLOAT", (b, t)), "start_top_log_probs": ("DT_FLOAT", (b, 5)),
               "start_top_index": ("DT_INT32", (b, 5)), "end_top_log_probs": ("DT_FLOAT", (b, 25)),
               "end_top_index": ("DT_INT32", (b, 25)), "cls_logits": ("DT_FLOAT", (b,))}
    elif name == "race":
        serving = {"logits": ("DT_FLOAT", (b, 4)), "probabilities": ("DT_FLOAT", (b, 4)),
                   "answer_index": ("DT_INT64", (b,))}
        ids = {n: ("DT_INT32", (b, 4, t)) for n in ids}
        raw = {"logits": ("DT_FLOAT", (b, 4))}
    elif name == "reg":
        serving, raw = {"prediction": ("DT_FLOAT", (b,))}, {"predictions": ("DT_FLOAT", (b,))}
    else:
        c = 2 if name == "pair" else 3
        serving = {"logits": ("DT_FLOAT", (b, c)), "probabilities": ("DT_FLOAT", (b, c)),
                   "label_id": ("DT_INT64", (b,)), "label": ("DT_STRING", (b,))}
        raw = {"logits": ("DT_FLOAT", (b, c))}
    signatures = {"serving_default": (inputs, serving), "encode": (encode_inputs, encode),
                  "tokenize": (text("text"), tokenize), "predict_ids": (ids, raw)}
    examples = text("inputs")  # serialized tf.Examples (TensorFlow Serving's Classify / Regress)
    if name == "reg":
        signatures["regression"] = (examples, {"outputs": ("DT_FLOAT", (b,))})
    elif name in ("cls", "pair"):
        signatures["classification"] = (examples, {"classes": ("DT_STRING", (b, c)), "scores": ("DT_FLOAT", (b, c))})
    return signatures


def _parse_cli(output):
    """saved_model_cli show --all -> {signature: (inputs, outputs)} with {name: (dtype, shape)}."""
    signatures, current, side, name = {}, None, None, None
    for line in output.splitlines():
        s = line.strip()
        if s.startswith("signature_def['"):
            current = s.split("'")[1]
            signatures[current] = ({}, {})
        elif "contains the following input(s)" in s:
            side = 0
        elif "contains the following output(s)" in s:
            side = 1
        elif current and (s.startswith("inputs['") or s.startswith("outputs['")):
            name = s.split("'")[1]
        elif current and s.startswith("dtype:"):
            dtype = s.split()[1]
        elif current and s.startswith("shape:") and name:
            shape = s.split(":", 1)[1].strip()
            if shape != "unknown_rank":
                shape = tuple(int(x) for x in shape.strip("()").split(",") if x.strip())
            signatures[current][side][name] = (dtype, shape)
            name = None
    signatures.pop("__saved_model_init_op", None)
    return signatures


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pair", "squad"])
def test_saved_model_cli_lists_documented_signatures(exports, name):
    cli = shutil.which("saved_model_cli") or os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    proc = subprocess.run([cli, "show", "--all", "--dir", exports[name]], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = _parse_cli(proc.stdout)
    want = {sig: (dict(i), dict(o)) for sig, (i, o) in _expected_signatures(name).items()}
    for sig in sorted(want):
        print(f"{name}/{sig}: inputs {got.get(sig, ({},))[0]} -> outputs {got.get(sig, (None, {}))[1]}")
    report(f"{name} signatures listed by saved_model_cli", got, want)


@pytest.mark.slow
def test_signatures_of_the_other_exports(exports):
    """cls / reg / race (and the reusable encoder) checked from the SavedModel's own signature defs."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    def read(path):
        saved = saved_model_pb2.SavedModel()
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            saved.ParseFromString(f.read())
        out = {}
        for sig, d in saved.meta_graphs[0].signature_def.items():
            if sig.startswith("__"):
                continue
            out[sig] = tuple({k: (types_pb2.DataType.Name(t.dtype), tuple(x.size for x in t.tensor_shape.dim))
                              for k, t in side.items()}
                             for side in (d.inputs, d.outputs))
        return out

    for name in ("cls", "reg", "race"):
        want = {sig: (dict(i), dict(o)) for sig, (i, o) in _expected_signatures(name).items()}
        report(f"{name} signature defs", read(exports[name]), want)
    cls = _expected_signatures("cls")
    report("reusable signature defs", read(exports["reusable"]),
           {"serving_default": cls["encode"], "encode": cls["encode"], "tokenize": cls["tokenize"]})


@pytest.mark.slow
def test_only_servable_ops_no_xla_tokenization_on_cpu(exports, finetuned, spm_file):
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    from xlnet_tf.export import ops

    with open(spm_file, "rb") as f:
        spm_bytes = f.read()

    for name, path in exports.items():
        counts = ops.saved_model_ops(path)
        bad, xla = ops.disallowed_ops(path), ops.xla_functions(path)
        print(f"{name}: {len(counts)} op types, {sum(counts.values())} nodes; outside the allowlist: {bad}; "
              f"XLA functions: {xla}; TF Text ops: {sorted(set(counts) & ops.TF_TEXT_OPS)}")
        assert not bad and not xla
        dtypes = tf.train.load_checkpoint(os.path.join(path, "variables", "variables")).get_variable_to_dtype_map()
        kinds = sorted({d.name for k, d in dtypes.items() if k != "_CHECKPOINTABLE_OBJECT_GRAPH"})
        print(f"{name}: {len(dtypes) - 1} variables, dtypes {kinds} (expected ['float32'])")
        assert kinds == ["float32"]
        assert {"SentencepieceOp", "SentencepieceTokenizeWithOffsetsOp", "NormalizeUTF8"} <= set(counts)
        saved = saved_model_pb2.SavedModel()
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            raw = f.read()
        saved.ParseFromString(raw)
        text_ops = [n.device for f in saved.meta_graphs[0].graph_def.library.function for n in f.node_def
                    if n.op in ("SentencepieceTokenizeWithOffsetsOp", "SentencepieceStringToIdOp", "NormalizeUTF8",
                                "UnicodeDecodeWithOffsets", "StaticRegexReplace")]
        off_cpu = [d for d in text_ops if "CPU" not in d.upper()]
        print(f"{name}: {len(text_ops)} tokenizer nodes, not pinned to the CPU: {len(off_cpu)} (bound 0)")
        assert text_ops and not off_cpu
        # Self-contained: the SentencePiece model is inside saved_model.pb, nothing points back to the
        # fine-tuned directory, and there are no asset files to carry along.
        assert spm_bytes in raw and not any(d.encode() in raw for d in finetuned.values())
        assets = os.path.join(path, "assets")
        assert not os.path.isdir(assets) or not os.listdir(assets)


def test_allowlist_flags_ops_tf_serving_cannot_run(tmp_path):
    import tensorflow as tf
    import tensorflow_text as tf_text

    from xlnet_tf.export import ops

    class PyFunc(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            return tf.py_function(lambda v: v * 2, [x], tf.float32)

    class Trimmer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)])
        def __call__(self, a, b):
            trimmed = tf_text.RoundRobinTrimmer(max_seq_length=4).trim([tf.strings.split(a), tf.strings.split(b)])
            return trimmed[0].to_tensor(), trimmed[1].to_tensor()

    flagged = {}
    for module in (PyFunc(), Trimmer()):
        path = str(tmp_path / type(module).__name__)
        tf.saved_model.save(module, path)
        flagged[type(module).__name__] = ops.disallowed_ops(path)
        print(f"{type(module).__name__}: flagged {flagged[type(module).__name__]}")
    assert "EagerPyFunc" in flagged["PyFunc"]
    assert any("RoundRobin" in op for op in flagged["Trimmer"])
    for op in ("SentencepieceOp", "SentencepieceTokenizeWithOffsetsOp", "SentencepieceStringToIdOp",
               "SentencepieceIdToStringOp", "SentencepieceDetokenizeOp", "NormalizeUTF8"):
        assert op in ops.ALLOWED_OPS


# ----------------------------------------------------------------------------------------------------
# Versions, atomic publication, warmup requests


@pytest.mark.slow
def test_versions_atomic_publication_and_warmup(work, finetuned, references, tokenizer):
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    from xlnet_tf.data import finetuning as ft
    from xlnet_tf.data.readers import TextExample
    from xlnet_tf.errors import UserError
    from xlnet_tf.export import exporter

    from xlnet_tf.export import signatures

    def stand_in(model, tokenizer, finetune_config, max_seq_len, packing_mode="auto"):  # a root, no tracing
        return tf.Module(), {}

    def broken_warmup(*args, **kwargs):
        raise RuntimeError("disk full")

    base = work / "versions" / "classifier"
    building = signatures.build_serving_module
    signatures.build_serving_module = stand_in  # version 1 only numbers the versions: no need to trace it
    try:
        first = exporter.export_model(finetuned["cls"], base)
    finally:
        signatures.build_serving_module = building
    second = exporter.export_model(finetuned["cls"], base, max_seq_len=24)
    report("versions written by default", [os.path.basename(first), os.path.basename(second)], ["1", "2"])
    before = sorted(os.listdir(base))
    with pytest.raises(UserError, match="already exists"):
        exporter.export_model(finetuned["cls"], base, version=1)
    print("an existing version is refused: UserError 'already exists'")

    # A failure after the staging directory was written: the stand-in root and a warmup writer that fails.

    patched = [(signatures, "build_serving_module", stand_in), (exporter, "write_warmup", broken_warmup)]
    originals = [(module, name, getattr(module, name)) for module, name, _ in patched]
    try:
        for module, name, value in patched:
            setattr(module, name, value)
        with pytest.raises(RuntimeError, match="disk full"):
            exporter.export_model(finetuned["cls"], base)
    finally:
        for module, name, value in originals:
            setattr(module, name, value)
    report("entries of BASE/NAME after a refused and a failed export (no temporary directory left)",
           sorted(os.listdir(base)), before)
    report("entries of BASE/NAME", before, ["1", "2"])
    mode = stat.S_IMODE(os.stat(first).st_mode)
    print(f"version directory mode {oct(mode)} (others may read and enter it)")
    assert mode & 0o005 == 0o005
    (base / "10").mkdir()
    (base / ".tmp-xlnet-export-abc").mkdir()
    report("next free version after adding 10/ and a temporary directory", exporter.next_version(base), 11)

    records = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in
               tf.data.TFRecordDataset(os.path.join(second, "assets.extra", exporter.WARMUP_FILE))]
    print(f"warmup: {len(records)} PredictionLog records")
    assert len(records) >= 2
    smaller = tf.saved_model.load(second)
    serving = smaller.signatures["serving_default"]
    for record in records:
        request = record.predict_log.request
        assert request.model_spec.signature_name == "serving_default" and request.model_spec.name == "classifier"
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        assert set(inputs) == set(serving.structured_input_signature[1])
        outputs = serving(**{k: tf.constant(v) for k, v in inputs.items()})
        assert outputs["logits"].shape == (len(inputs["text"]), 3)
    print("every warmup request runs through serving_default")

    model, _ = references["cls"]
    feats = ft.classification_features([TextExample(t) for t in TEXTS], tokenizer, 24)[0]
    want = model({k: feats[k] for k in ("input_ids", "segment_ids", "padding_mask")}, training=False)["logits"]
    got = smaller.signatures["serving_default"](text=tf.constant(TEXTS))["logits"]
    check("--max-seq-len 24 export: logits", got, want)
    import tensorflow_text  # noqa: F401

    too_wide = tf.ones([1, 32], tf.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="at most 24 positions") as error:
        smaller.signatures["predict_ids"](input_ids=too_wide, segment_ids=too_wide, padding_mask=too_wide)
    print(f"predict_ids with 32 positions on a --max-seq-len 24 export: InvalidArgumentError "
          f"({str(error.value).splitlines()[0][:120]})")
    report("--max-seq-len 24 export: tokenize width",
           smaller.signatures["tokenize"](text=tf.constant(TEXTS))["token_ids"].shape[1], 24)
    metadata = json.load(open(os.path.join(second, "assets.extra", exporter.METADATA_FILE)))
    report("metadata max_seq_len / task", (metadata["max_seq_len"], metadata["task"]), (24, "classification"))


@pytest.mark.slow
def test_reusable_encoder_fine_tunes_inside_keras(exports, references, features):
    import keras
    import tensorflow as tf

    from xlnet_tf.export.keras_layer import ReusableEncoderLayer

    layer = ReusableEncoderLayer(exports["reusable"])
    encoder = references["cls"][0].transformer
    report("trainable weights of the layer (all encoder weights but the pretraining-only mask_emb)",
           len(layer.trainable_weights), len(encoder.trainable_weights) - 1)
    ids = {k: features["cls_texts"][k] for k in ("input_ids", "segment_ids", "padding_mask")}
    check("reusable __call__ sequence_output vs the in-Python encoder",
          layer.saved_model(ids)["sequence_output"], encoder(ids, training=False)["sequence_output"])
    raw = layer.saved_model.text_inputs(tf.constant(TEXTS))
    report("reusable text_inputs == classification_features", raw["input_ids"].numpy().tolist(),
           ids["input_ids"].tolist())

    texts = CLS_BATCH[:32]
    inputs = {k: v.numpy() for k, v in layer.saved_model.text_inputs(tf.constant(texts)).items()}
    labels = np.array([len(t) % 2 for t in texts])
    keras.utils.set_random_seed(0)
    model_inputs = {k: keras.Input((None,), dtype="int32", name=k) for k in inputs}
    logits = keras.layers.Dense(2)(layer(model_inputs)["pooled_output"])
    model = keras.Model(model_inputs, logits)
    model.compile(keras.optimizers.Adam(3e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [w.numpy().copy() for w in layer.trainable_weights]
    history = model.fit(inputs, labels, epochs=12, batch_size=32, verbose=0).history["loss"]
    changed = sum(not np.array_equal(b, w.numpy()) for b, w in zip(before, layer.trainable_weights))
    print(f"reusable encoder fine-tuning loss {history[0]:.4f} -> {history[-1]:.4f} over {len(history)} steps "
          f"(must fall); encoder weights changed: {changed}/{len(before)}")
    assert history[-1] < history[0] * 0.9
    assert changed == len(before)
