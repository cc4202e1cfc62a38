"""Exports bound their own cost (issue 50): every text input is cut to a byte bound before it is tokenized, and id
inputs wider than the export's rows are refused before the encoder runs.

Tiny models with random weights, one export of each kind: classification (one text, pairs, a long-document model
with memory), SQuAD, RACE, token classification, the reusable encoder and a language model. "Today's" answer is the
same signatures built in this process with the cut disabled (``signatures.text_pieces`` patched so that every text
input is read whole: 2**31 // piece_bytes pieces, more bytes than any text here); the bounded answers come from the
exports saved by ``export_model`` and loaded back. The worst requests (10 MB texts, ids of width 100,000) run in a
separate process that imports only tensorflow and tensorflow_text, as TensorFlow Serving would load the exports.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pydoc_data.topics
import pytest

from conftest import tiny_config, tiny_finetuned, tiny_spm

CLS_LEN, SQUAD_LEN, RACE_LEN, NER_LEN, DOC_LEN, DOC_MAX, LM_PROMPT = 32, 48, 40, 32, 16, 48, 24
NER_TAGS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
LINES = [line.strip() for _, text in sorted(pydoc_data.topics.topics.items())
         for line in text.splitlines() if line.strip()]
PROSE = " ".join(LINES)  # ordinary text: about 3 bytes a piece
# without runs of one character repeated ("****", "===="): every segmentation of such a run scores the same, and
# SentencePiece breaks that tie by the float32 rounding of the score of everything before it, which a cut that keeps
# the end of a text changes (keeping the start, what comes before is the same)
PLAIN = " ".join(line for line in LINES if not re.search(r"(.)\1\1", line))
CJK = "東京は日本の首都です。人口は約千四百万人で、昔は「江戸」と呼ばれていました。"
UNICODE = ["Le café « Zoë » sert une crème brûlée.", CJK, "emoji 🙂 and e\u0301 combining, Ελληνικά ΣΊΣΥΦΟΣ.",
           "tab\tand\nnewline   spaces  "]
TEN_MB = 10_000_000
WIDE = 100_000


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


# ----------------------------------------------------------------------------------------------------
# Texts up to and across a bound


def _bytes_long(text, size, keep):
    """`text` repeated and cut to exactly `size` UTF-8 bytes, whole characters (`keep` "first": its start; "last":
    its end), padded with spaces if a character does not fit."""
    data = (text * (size // max(len(text.encode()), 1) + 2)).encode()
    data = data[:size] if keep == "first" else data[-size:]
    cut = data.decode("utf-8", errors="ignore")
    return cut + " " * (size - len(cut.encode())) if keep == "first" else " " * (size - len(cut.encode())) + cut


def family(bound, keep):
    """(name, text) of the text families for a text input of `bound` bytes read from its `keep` end: a short text,
    ordinary text ending just before, at and after the bound and far beyond it, multi-byte characters (CJK, emoji,
    combining accents, Greek) where the bound falls inside a character at each of its bytes, long whitespace runs
    (inside the bound, and one the bound falls in), CJK without spaces and one long word across the bound. Read
    from the end, the text is PLAIN (see there)."""
    def side(text, extra):  # the kept side (ordinary words), then `extra` beyond it (or before it, keeping the end)
        return text + extra if keep == "first" else extra + text

    prose = PROSE if keep == "first" else PLAIN
    head = _bytes_long(prose, bound // 2, keep).strip()
    out = [("short", "A short sentence."), ("empty", "")]
    out += [(f"prose {n:+d}", _bytes_long(prose, bound + n, keep)) for n in (-1, 0, 1, 3 * bound)]
    for name, unit in (("CJK", "日本語"), ("emoji", "😀"), ("accents", "e\u0301a\u0300"), ("Greek", "Ωμέγα")):
        run = unit * (bound // len(unit.encode()) + 2)  # reaches past the bound
        for j in range(len(unit.encode())):  # j more bytes before the run: the bound falls at each byte of a unit
            out.append((f"{name} run across the bound, shifted {j}", side("x" * j + " " + head, " " + run)
                        if keep == "first" else side(head + " " + "x" * j, run + " ")))
    out.append(("whitespace runs inside", _bytes_long("word\t \n   other  \u3000 words ", bound + 100, keep)))
    out.append(("whitespace run across", side(head, " " * (2 * bound) + " beyond the bound")))
    out.append(("CJK without spaces", _bytes_long(CJK, 2 * bound, keep)))
    out.append(("one long word", _bytes_long("".join(prose.split()), 2 * bound, keep)))
    return out


def single_piece_words(tokenizer, count):
    """`count` words (cycling over distinct ones) that the tokenizer encodes to one piece each."""
    words = sorted({w for w in PROSE.lower().split() if w.isalpha()})
    ones = [w for w, ids in zip(words, tokenizer.encode(words)) if len(ids) == 1][:40]
    assert len(ones) >= 10, ones
    return [ones[i % len(ones)] for i in range(count)]


# ----------------------------------------------------------------------------------------------------
# Fixtures: the fine-tuned directories, their exports, and the same signatures with the cut disabled

KINDS = ("cls", "pair", "doc", "squad", "race", "ner", "reusable", "lm")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("bounds")


@pytest.fixture(scope="module")
def model_dirs(work):
    """kind -> its model directory (one SentencePiece model of 400 pieces; random weights)."""
    from xlnet_tf.config import RunOptions
    from xlnet_tf.model import XLNetPretrainer

    spm = tiny_spm(work, UNICODE)
    config = tiny_config(n_token=400)
    labels = {"num_labels": 3, "label_names": ["negative", "neutral", "positive"]}
    configs = {
        "cls": {"task": "classification", "max_seq_len": CLS_LEN, **labels},
        "pair": {"task": "classification", "max_seq_len": CLS_LEN, "pairs": True, **labels},
        "doc": {"task": "classification", "max_seq_len": DOC_LEN, "long_doc": "memory", "max_doc_len": DOC_MAX,
                "mem_len": 2 * DOC_LEN, **labels},
        "squad": {"task": "squad", "max_seq_len": SQUAD_LEN, "doc_stride": 8, "max_query_len": 10,
                  "start_n_top": 5, "end_n_top": 5},
        "race": {"task": "race", "max_seq_len": RACE_LEN, "max_qa_len": 12, "num_choices": 4},
        "ner": {"task": "token-classification", "max_seq_len": NER_LEN, "doc_stride": 15,
                "num_labels": len(NER_TAGS), "label_names": NER_TAGS},
    }
    dirs = {kind: tiny_finetuned(work, kind, cfg, config, 11 + i, spm) for i, (kind, cfg) in enumerate(configs.items())}
    dirs["reusable"] = dirs["cls"]
    lm = XLNetPretrainer(config, RunOptions(dropout=0.0, dropatt=0.0, initializer_range=0.3))
    dirs["lm"] = str(work / "lm")
    lm.save_pretrained(dirs["lm"], extra_files=[spm])
    return dirs


EXPORT_OPTIONS = {"reusable": dict(reusable=True), "lm": dict(max_seq_len=LM_PROMPT, max_new_tokens=4)}
EXPORTED = "EXPORTED "
EXPORTER = r'''
import json, sys
from xlnet_tf.export.exporter import export_model

jobs = json.loads(sys.argv[1])
print("EXPORTED " + json.dumps({kind: export_model(path, base, **options) for kind, path, base, options in jobs}))
'''


@pytest.fixture(scope="module")
def exporting(work, model_dirs):
    """`export_model` of every kind, running in a second process (while `whole` is built in this one)."""
    jobs = [(kind, model_dirs[kind], str(work / "exports" / kind), EXPORT_OPTIONS.get(kind, {})) for kind in KINDS]
    with open(work / "exporter.txt", "w", encoding="utf-8") as out:
        process = subprocess.Popen([sys.executable, "-c", EXPORTER, json.dumps(jobs)], stdout=out,
                                   stderr=subprocess.STDOUT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    yield process
    if process.poll() is None:  # a failure before `exports` waited for it
        process.kill()


@pytest.fixture(scope="module")
def exports(work, exporting):
    """kind -> its export (version directory); the tests ask for `whole` first, built while the exports are
    written."""
    exporting.wait(timeout=900)
    printed = (work / "exporter.txt").read_text(encoding="utf-8", errors="replace")
    assert exporting.returncode == 0, printed[-4000:]
    return json.loads(next(line for line in reversed(printed.splitlines()) if line.startswith(EXPORTED))
                      [len(EXPORTED):])


@pytest.fixture(scope="module")
def limits(exports):
    """kind -> xlnet_export.json's "limits"."""
    return {kind: json.load(open(os.path.join(path, "assets.extra", "xlnet_export.json")))["limits"]
            for kind, path in exports.items()}


@pytest.fixture(scope="module")
def tokenizer(model_dirs):
    from xlnet_tf.tokenization import XLNetTokenizer

    return XLNetTokenizer(os.path.join(model_dirs["cls"], "spiece.model"))


@pytest.fixture(scope="module")
def bounded(exports):
    """kind -> the export's signatures, loaded from its SavedModel."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    return {kind: tf.saved_model.load(path).signatures for kind, path in exports.items()}


@pytest.fixture(scope="module")
def whole(exporting, model_dirs, tokenizer):
    """kind -> the same signatures built in this process with every text read whole ("today's" answers)."""
    from xlnet_tf import generation, tasks
    from xlnet_tf.export import signatures
    from xlnet_tf.tasks.graphs import piece_bytes
    from xlnet_tf.tokenization import XLNetTokenizer, tokenizer_settings

    pieces = (2 ** 31 - 1) // piece_bytes(tokenizer)
    built = {}
    with pytest.MonkeyPatch.context() as patch:
        read = signatures.text_pieces
        patch.setattr(signatures, "text_pieces", lambda *args, **kwargs: {
            name: (pieces, end) for name, (_, end) in read(*args, **kwargs).items()})
        for kind in KINDS:
            if kind == "lm":
                model, tok = generation.load_generator(model_dirs[kind])
                _, built[kind] = signatures.build_generation_module(model, tok, LM_PROMPT, 4)
                continue
            model, config = tasks.load_finetuned(model_dirs[kind], dropout=0.0, dropatt=0.0)
            tok = XLNetTokenizer(os.path.join(model_dirs[kind], "spiece.model"), **tokenizer_settings(config))
            if kind == "reusable":
                _, built[kind] = signatures.build_reusable_module(model, tok, CLS_LEN)
            else:
                _, built[kind] = signatures.build_serving_module(model, tok, config, config["max_seq_len"])
    return built


# ----------------------------------------------------------------------------------------------------
# Comparing answers


def _run(fn, **inputs):
    import tensorflow as tf

    return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in inputs.items()}).items()}


class Same:
    """Tallies bounded vs today's answers of one signature: float outputs' max |diff| (bound 0: the same bits),
    the other outputs equal; prints the figures with their bounds when `done`."""

    def __init__(self, label):
        self.label, self.diff, self.equal, self.rows, self.different = label, 0.0, 0, 0, []

    def add(self, names, got, want, skip=()):
        for key, value in want.items():
            if key in skip:
                continue
            other = got[key]
            if value.dtype.kind == "f":
                diff = float(np.max(np.abs(other.astype(np.float64) - value), initial=0.0)) if (
                    other.shape == value.shape) else np.inf
                self.diff = max(self.diff, diff)
                bad = diff > 0
            else:
                bad = other.shape != value.shape or not np.array_equal(other, value)
                self.equal += not bad
            if bad:
                self.different.append((key, names))
        self.rows += len(names)

    def done(self):
        check(f"{self.label}: float outputs max |diff| over {self.rows} texts", f"{self.diff:.1e}", "0 (the same bits)",
              self.diff == 0)
        check(f"{self.label}: id / label / string outputs equal", f"{self.equal} equal, different: {self.different}",
              "none different", not self.different)


def _outputs(kind, signature, bounded, whole, same, names, skip=(), **inputs):
    got, want = _run(bounded[kind][signature], **inputs), _run(whole[kind][signature], **inputs)
    same.add(names, got, want, skip)
    return got, want


def _longer(texts, bound):
    return sum(len(t.encode()) > bound for t in texts)


# ----------------------------------------------------------------------------------------------------
# Tests


def test_cut_text_keeps_whole_characters_and_texts_within_the_bound():
    """`cut_text` on texts of 1 to 12 bytes around bounds of 4 to 9: a text within the bound is returned as it is;
    a longer one is cut to at most the bound, at most 3 bytes short of it, never inside a character (valid UTF-8, a
    prefix / suffix of the text), for ASCII, 2-, 3- and 4-byte characters and invalid bytes."""
    import tensorflow as tf

    from xlnet_tf.tasks.graphs import cut_text

    units = ["a", "é", "日", "😀", "e\u0301", "a日😀é"]
    texts = [(u * 12).encode()[:n] for u in units for n in range(13)] + [b"\xff\xfe" * 6, b"\x80" * 9, b"a\xe6\x97"]
    worst = 0
    for bound in range(4, 10):
        for keep_last in (False, True):
            got = cut_text(tf.constant(texts), bound, keep_last=keep_last).numpy().tolist()
            for text, cut in zip(texts, got):
                if len(text) <= bound:
                    assert cut == text, (text, bound)
                    continue
                assert (text.endswith(cut) if keep_last else text.startswith(cut)), (text, cut)
                assert bound - 3 <= len(cut) <= bound, (text, bound, cut)
                worst = max(worst, bound - len(cut))
                try:
                    text.decode("utf-8")
                except UnicodeDecodeError:
                    continue  # invalid bytes: only the valid characters must stay whole
                cut.decode("utf-8")  # raises if a character was split
    check("texts cut at a character boundary (valid UTF-8, prefix or suffix), bytes short of the bound at most",
          worst, "<= 3", worst <= 3)


@pytest.mark.slow
def test_limits_are_recorded_in_xlnet_export_json(whole, limits, tokenizer):
    """xlnet_export.json's "limits": piece_bytes = 4 x the longest piece's characters, each text input's bytes =
    its pieces x piece_bytes and the end it keeps, the widest predict_ids input."""
    per_piece = 4 * tokenizer.longest_piece
    check("piece_bytes (4 x the longest piece, in characters)", {k: v["piece_bytes"] for k, v in limits.items()},
          f"{per_piece} everywhere", all(v["piece_bytes"] == per_piece for v in limits.values()))
    want = {
        "cls": ({"text": (CLS_LEN, "first")}, CLS_LEN),
        "pair": ({"text": (CLS_LEN, "first"), "text_a": (CLS_LEN - 2, "first"), "text_b": (CLS_LEN - 3, "first")},
                 CLS_LEN),
        "doc": ({"text": (DOC_MAX, "first")}, DOC_MAX),
        "squad": ({"text": (SQUAD_LEN, "first"), "question": (10, "first"), "context": (32 * SQUAD_LEN, "first")},
                  SQUAD_LEN),
        "race": ({"text": (RACE_LEN, "first"), "article": (RACE_LEN - 3, "first"), "question": (13, "last"),
                  "options": (13, "last")}, RACE_LEN),
        "ner": ({"text": (32 * NER_LEN, "first"), "words": (NER_LEN - 2, "first")}, NER_LEN),
        "reusable": ({"text": (CLS_LEN, "first")}, None),
        "lm": ({"text": (LM_PROMPT, "last")}, None),
    }
    for kind, (inputs, width) in want.items():
        got = limits[kind]
        print(f"  {kind}: {json.dumps(got['text_inputs'])}, ids_width {got['ids_width']}")
        expected = {name: {"bytes": n * per_piece, "keep": end, "pieces": n} for name, (n, end) in inputs.items()}
        check(f"{kind}: text inputs' bounds and the widest id input", (got["text_inputs"], got["ids_width"]),
              (expected, width), got["text_inputs"] == expected and got["ids_width"] == width)


@pytest.mark.slow
def test_one_text_answers_as_today_up_to_and_across_the_bound(whole, limits, bounded, tokenizer):
    """Classification (one text; serving_default, encode, tokenize, the tf.Example signature), the long-document
    model (memory over segments) and the reusable encoder: every text family, bounded == today's to the bit;
    tokenize's num_tokens counts the pieces of what was read (fewer for the texts beyond the bound)."""
    import tensorflow as tf

    for kind in ("cls", "doc", "reusable"):
        bound = limits[kind]["text_inputs"]["text"]["bytes"]
        names, texts = zip(*family(bound, "first"))
        longer = [t for t in texts if len(t.encode()) > bound]
        _, _, ends = tokenizer.tokenize_with_offsets(tf.constant(longer))
        kept = max(row[min(len(row), limits[kind]["text_inputs"]["text"]["pieces"]) - 1] for row in ends.to_list())
        check(f"{kind}: {len(texts)} texts, {len(longer)} longer than the bound; where the kept pieces of those end",
              f"byte {kept}", f"< the bound, {bound}", kept < bound)
        signatures = ("serving_default", "encode", "tokenize") if kind != "reusable" else ("serving_default",
                                                                                         "tokenize")
        for signature in signatures:
            same = Same(f"{kind} {signature}")
            got, want = _outputs(kind, signature, bounded, whole, same, names,
                                 skip=("num_tokens",) if signature == "tokenize" else (), text=list(texts))
            same.done()
            if signature == "tokenize":
                count = {k: [int(v) for v in out["num_tokens"]] for k, out in (("got", got), ("want", want))}
                within = [len(t.encode()) <= bound for t in texts]
                check(f"{kind} tokenize num_tokens of the texts within the bound", "as today", "as today",
                      all(g == w for g, w, inside in zip(count["got"], count["want"], within) if inside))
                far = [i for i, t in enumerate(texts) if len(t.encode()) > 2 * bound]
                check(f"{kind} tokenize num_tokens (pieces read) of the {len(far)} texts beyond twice the bound",
                      [count["got"][i] for i in far], f"fewer than today's {[count['want'][i] for i in far]}, at "
                      f"least the row's {got['token_ids'].shape[1]}",
                      all(got["token_ids"].shape[1] <= count["got"][i] < count["want"][i] for i in far))
        if kind == "cls":
            examples = [tf.train.Example(features=tf.train.Features(feature={"text": tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[t.encode()]))})).SerializeToString() for t in texts]
            same = Same("cls classification (tf.Examples)")
            _outputs(kind, "classification", bounded, whole, same, names, inputs=examples)
            same.done()


@pytest.mark.slow
def test_pairs_answer_as_today_up_to_and_across_the_bound(limits, bounded, whole):
    """Pairs: text_a and text_b of every family, each side within and across its own bound (text_a keeps up to
    max_seq_len - 2 pieces, text_b max_seq_len - 3): serving_default and encode as today, to the bit."""
    bounds = {name: limits["pair"]["text_inputs"][name]["bytes"] for name in ("text_a", "text_b")}
    a_names, a_texts = zip(*family(bounds["text_a"], "first"))
    b_names, b_texts = zip(*family(bounds["text_b"], "first"))
    a = list(a_texts) + list(a_texts[::-1])
    b = (list(b_texts) * 2)[:len(a)]
    names = [f"A {x} / B {y}" for x, y in zip(a_names + a_names[::-1], (b_names * 2)[:len(a)])]
    print(f"pairs: {len(a)}; A longer than {bounds['text_a']} bytes: {_longer(a, bounds['text_a'])}, B longer than "
          f"{bounds['text_b']}: {_longer(b, bounds['text_b'])}")
    for signature in ("serving_default", "encode"):
        same = Same(f"pair {signature}")
        _outputs("pair", signature, bounded, whole, same, names, text_a=a, text_b=b)
        same.done()


@pytest.mark.slow
def test_squad_answers_as_today_up_to_and_across_the_bound(limits, bounded, whole, tokenizer):
    """SQuAD: questions of every family (the first max_query_len pieces kept) with short contexts: as today. A
    context read up to 32 x max_seq_len pieces: one within (as today) and ones far across its byte bound, made of
    one-piece words, answered as today answers its first 32 x max_seq_len words; answers are substrings of the
    context."""
    bound_q = limits["squad"]["text_inputs"]["question"]["bytes"]
    context_limit = limits["squad"]["text_inputs"]["context"]
    q_names, questions = zip(*family(bound_q, "first"))
    contexts = [LINES[i % len(LINES)] + " " + LINES[(i + 7) % len(LINES)] for i in range(len(questions))]
    same = Same("squad serving_default, questions of every family")
    _outputs("squad", "serving_default", bounded, whole, same, q_names, question=list(questions), context=contexts)
    same.done()

    words = single_piece_words(tokenizer, context_limit["bytes"] // 3)
    read = context_limit["pieces"]  # one piece a word
    long_contexts = [" ".join(words[i:]) for i in range(3)]
    print(f"contexts of {[len(c.encode()) for c in long_contexts]} bytes (bound {context_limit['bytes']}), "
          f"{len(words)} one-piece words; read: their first {read}")
    check("long contexts are longer than the bound", min(len(c.encode()) for c in long_contexts),
          f"> {context_limit['bytes']}", min(len(c.encode()) for c in long_contexts) > context_limit["bytes"])
    short_context = " ".join(words[:read - 20])
    questions = ["What is it?", "", LINES[3], "Which one?"]
    got = _run(bounded["squad"]["serving_default"], question=questions, context=long_contexts + [short_context])
    want = _run(whole["squad"]["serving_default"], question=questions,
                context=[" ".join(words[i:i + read]) for i in range(3)] + [short_context])
    same = Same("squad serving_default, contexts across the bound vs today's on their first words read")
    same.add(["across 0", "across 1", "across 2", "within"], got, want)
    same.done()
    today = _run(whole["squad"]["serving_default"], question=questions[:1], context=long_contexts[:1])
    print(f"today's windows of the first long context answer from window {int(today['window_index'][0])}, bounded "
          f"from window {int(got['window_index'][0])}")
    answers = [c[int(s):int(e)] if s >= 0 else "" for c, s, e in
               zip(long_contexts + [short_context], got["answer_start"], got["answer_end"])]
    check("answers == context[answer_start:answer_end]", [a.decode() for a in got["answer"]], answers,
          [a.decode() for a in got["answer"]] == answers)
    same = Same("squad tokenize / encode")
    names, texts = zip(*family(limits["squad"]["text_inputs"]["text"]["bytes"], "first"))
    _outputs("squad", "tokenize", bounded, whole, same, names, skip=("num_tokens",), text=list(texts))
    _outputs("squad", "encode", bounded, whole, same, names, text=list(texts))
    same.done()


@pytest.mark.slow
def test_race_answers_as_today_up_to_and_across_the_bound(limits, bounded, whole):
    """RACE: articles of every family (the first max_seq_len - 3 pieces at most), questions and options of every
    family read from their end (question + option keeps its last max_qa_len pieces), clozes with many blanks and
    long options: as today, to the bit."""
    text_limits = limits["race"]["text_inputs"]
    a_names, articles = zip(*family(text_limits["article"]["bytes"], "first"))
    q_names, questions = zip(*family(text_limits["question"]["bytes"], "last"))
    o_names, options = zip(*family(text_limits["options"]["bytes"], "last"))
    n = max(len(articles), len(questions))
    rows = [(articles[i % len(articles)], questions[i % len(questions)],
             [options[(i + k) % len(options)] for k in range(4)]) for i in range(n)]
    blanks = "_ " * 300 + "Which _ is it?"
    long_option = _bytes_long(PLAIN, 5 * text_limits["options"]["bytes"], "last")
    rows += [(LINES[0], blanks, [long_option, "a", "", "an option"]), (LINES[2], "_" * 200, ["x y", "", "_", "z"])]
    names = [f"article {a_names[i % len(a_names)]} / question {q_names[i % len(q_names)]}" for i in range(n)]
    names += ["300 blanks, a long option", "200 blanks in a row"]
    inputs = {"article": [r[0] for r in rows], "question": [r[1] for r in rows],
              "options": [o for r in rows for o in r[2]]}
    longer = {name: _longer(texts, text_limits[name]["bytes"]) for name, texts in inputs.items()}
    print(f"race: {len(rows)} rows; texts longer than their bound: {longer}")
    same = Same("race serving_default")
    _outputs("race", "serving_default", bounded, whole, same, names, article=[r[0] for r in rows],
             question=[r[1] for r in rows], options=[r[2] for r in rows])
    same.done()


@pytest.mark.slow
def test_token_classification_answers_as_today_on_what_it_reads(limits, bounded, whole):
    """Token classification reads a text up to 32 x max_seq_len pieces: every family, and ordinary text far beyond,
    answered exactly as today answers the part read (the text up to the end of the last word returned); texts within
    the bound as today. `words`: words of every family across their bound (max_seq_len - 2 pieces kept)."""
    text_limit = limits["ner"]["text_inputs"]["text"]
    names, texts = zip(*family(text_limit["bytes"], "first"))
    got = _run(bounded["ner"]["serving_default"], text=list(texts))
    read = [t.encode()[:int(got["word_end"][i, n - 1]) if n else 0].decode()
            for i, (t, n) in enumerate(zip(texts, got["num_words"]))]
    want = _run(whole["ner"]["serving_default"], text=read)
    same = Same("ner serving_default vs today's on the part read")
    same.add(names, got, want)
    same.done()
    today = _run(whole["ner"]["serving_default"], text=[texts[names.index("prose +0")]])
    fewer = int(got["num_words"][names.index("prose +0")])
    check(f"words of a text of {text_limit['bytes']} bytes, past {text_limit['pieces']} pieces", fewer,
          f"< today's {int(today['num_words'][0])}", fewer < int(today["num_words"][0]))
    short = [t for t in texts if len(t.encode()) < 2000] + UNICODE
    same = Same("ner serving_default, short texts")
    _outputs("ner", "serving_default", bounded, whole, same, list(range(len(short))), text=short)
    same.done()
    w_names, words = zip(*family(limits["ner"]["text_inputs"]["words"]["bytes"], "first"))
    rows = [[w for w in words if w.strip()][i::3] for i in range(3)]
    width = max(map(len, rows))
    same = Same("ner words, words of every family")
    _outputs("ner", "words", bounded, whole, same, w_names, words=[r + [""] * (width - len(r)) for r in rows])
    same.done()


@pytest.mark.slow
def test_generation_prompts_are_read_from_their_end(limits, bounded, whole):
    """A language model keeps a prompt's last max_seq_len pieces: prompts of every family read from their end
    (the bound falling inside characters, whitespace runs, a long word) generate as today (tokens, log-probs,
    text); `tokenize` gives the tokens of the end read, their offsets into the whole text, today's last pieces."""
    bound = limits["lm"]["text_inputs"]["text"]["bytes"]
    names, texts = zip(*family(bound, "last"))
    print(f"lm: {len(texts)} prompts, {_longer(texts, bound)} longer than the bound of {bound} bytes")
    same = Same("lm serving_default")
    _outputs("lm", "serving_default", bounded, whole, same, names, text=list(texts))
    same.done()
    settings = dict(max_new_tokens=np.full(len(texts), 4, np.int32), temperature=np.full(len(texts), 2.0, np.float32),
                    top_k=np.zeros(len(texts), np.int32), top_p=np.full(len(texts), 0.9, np.float32),
                    seed=np.arange(len(texts), dtype=np.int64))
    same = Same("lm generate (sampled, seeds per row)")
    _outputs("lm", "generate", bounded, whole, same, names, text=list(texts), **settings)
    same.done()
    got, want = _run(bounded["lm"]["tokenize"], text=list(texts)), _run(whole["lm"]["tokenize"], text=list(texts))
    last = {k: [] for k in ("token_ids", "token_start", "token_end")}
    for i in range(len(texts)):
        g, w = int(got["num_tokens"][i]), int(want["num_tokens"][i])
        for k in last:  # the last max_seq_len tokens: what a prompt reads
            last[k].append(got[k][i, max(g - LM_PROMPT, 0):g].tolist() == want[k][i, max(w - LM_PROMPT, 0):w].tolist())
    check("lm tokenize: the last max_seq_len tokens and their byte offsets into the whole text, as today",
          {k: f"{sum(v)} of {len(v)}" for k, v in last.items()}, "all", all(all(v) for v in last.values()))


# ----------------------------------------------------------------------------------------------------
# The worst requests, in a process of their own

WORST = r'''
import json, os, sys, threading, time
import tensorflow as tf
import tensorflow_text  # noqa: F401

TEN_MB, WIDE, CEILING_MB = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def status(field):
    return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1]) // 1024


def watchdog(start_mb):
    while True:  # a request that grows the process past the ceiling ends it: the test fails, the machine is spared
        if status("VmRSS:") - start_mb > CEILING_MB:
            print(json.dumps({"ceiling": CEILING_MB}), flush=True)
            os._exit(3)
        time.sleep(0.02)


def text(kind):
    unit = {"word": "x", "words": "the cat sat on a mat ", "CJK": "日本語のテキスト"}[kind]
    return (unit * (TEN_MB // len(unit.encode()) + 1)).encode()[:TEN_MB].decode("utf-8", errors="ignore")


def example(value):
    return tf.train.Example(features=tf.train.Features(feature={"text": tf.train.Feature(
        bytes_list=tf.train.BytesList(value=[value.encode()]))})).SerializeToString()


def inputs(spec, small):
    """A request's inputs (small: a short one of the same signature, to warm it up)."""
    out = {}
    for name, (what, shape) in spec.items():
        if what == "ids":
            width = 16 if small else WIDE  # 16: whole segments of the long-document model
            out[name] = tf.ones(shape[:-1] + [width], tf.int32)
        elif what == "example":
            out[name] = tf.constant([example("short" if small else text("words"))])
        elif what in ("int", "float"):
            out[name] = tf.constant([4 if what == "int" else 0.5], tf.int32 if what == "int" else tf.float32)
        elif what == "seed":
            out[name] = tf.constant([1], tf.int64)
        else:
            value = "short text" if small else text(what)
            out[name] = tf.constant([[value] * shape[1]] if len(shape) == 2 else [value])
    return out


def session_function(path, signature):
    """TensorFlow Serving's way: the SavedModel loaded into a TF1 Session, the signature run by tensor names."""
    session = tf.compat.v1.Session(graph=tf.Graph())
    with session.graph.as_default():
        sig = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def[signature]
    fetches = {k: t.name for k, t in sig.outputs.items()}
    return lambda **feed: session.run(fetches, {sig.inputs[k].name: v.numpy() for k, v in feed.items()})


requests = json.load(open(sys.argv[1]))
loaded = {path: tf.saved_model.load(path) for path in dict.fromkeys(path for path, _, _, _ in requests)}
print(json.dumps({"loaded_rss_mb": status("VmRSS:")}), flush=True)
threading.Thread(target=watchdog, args=(status("VmRSS:"),), daemon=True).start()
for path, signature, spec, label in requests:
    fn = session_function(path, signature) if label.endswith("TF1 Session") else loaded[path].signatures[signature]
    fn(**inputs(spec, small=True))
    request = inputs(spec, small=False)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM: the peak below is this request's
    before, start = status("VmRSS:"), time.perf_counter()
    try:
        fn(**request)
        answer = "OK"
    except tf.errors.InvalidArgumentError as error:
        message = " ".join(error.message.split())
        answer = "INVALID_ARGUMENT: " + message[message.find("assertion failed"):][:120]
    seconds = time.perf_counter() - start
    print(json.dumps({"label": label, "answer": answer, "seconds": seconds, "peak_mb": status("VmHWM:") - before}),
          flush=True)
print(json.dumps({"rss_mb": status("VmRSS:")}))
'''
# Per request, over the RSS before it (the input tensors already made) and its time, on a loaded 2-core machine.
# Before this change, one 10 MB text to the classifier took 11 s and +3.7 GB here, and predict_ids [1, 30000] 66 s
# and +21 GB ([1, 4096]: 0.6 s, +2 GB).
PEAK_MB, SECONDS, CEILING_MB = 256, 5.0, 3000


def _worst_requests(exports):
    """(export path, signature, {input: (what, shape)}, label) of every text and id signature of every export."""
    text = lambda name, what="word": {name: (what, [1])}  # noqa: E731
    texts = {
        "cls": {"serving_default": text("text"), "encode": text("text"), "tokenize": text("text"),
                "classification": {"inputs": ("example", [1])}},
        "pair": {"serving_default": {**text("text_a"), **text("text_b", "words")},
                 "encode": {**text("text_a", "words"), **text("text_b")}},
        "doc": {"serving_default": text("text", "words"), "encode": text("text", "CJK"), "tokenize": text("text")},
        "squad": {"serving_default": {**text("question", "CJK"), **text("context", "words")},
                  "encode": text("text"), "tokenize": text("text", "words")},
        "race": {"serving_default": {**text("article", "words"), **text("question", "CJK"),
                                     "options": ("words", [1, 4])},
                 "encode": text("text"), "tokenize": text("text")},
        "ner": {"serving_default": text("text", "words"), "words": {"words": ("word", [1, 1])},
                "encode": text("text", "CJK"), "tokenize": text("text")},
        "reusable": {"serving_default": text("text", "words"), "tokenize": text("text")},
        "lm": {"serving_default": text("text", "words"),
               "generate": {**text("text", "CJK"), "max_new_tokens": ("int", [1]), "temperature": ("float", [1]),
                            "top_k": ("int", [1]), "top_p": ("float", [1]), "seed": ("seed", [1])},
               "tokenize": text("text")},
    }
    out = []
    for kind, signatures in texts.items():
        for signature, spec in signatures.items():
            sizes = ", ".join(f"{k} {v[0]} {TEN_MB // 10**6} MB" + (" x4" if v[1] == [1, 4] else "")
                              for k, v in spec.items() if v[0] in ("word", "words", "CJK", "example"))
            out.append((exports[kind], signature, spec, f"{kind} {signature} ({sizes})"))
    for kind in ("cls", "pair", "doc", "squad", "race", "ner"):
        spec = {name: ("ids", [1, 4, 1] if kind == "race" else [1, 1]) for name in
                ("input_ids", "segment_ids", "padding_mask") + (("p_mask",) if kind == "squad" else ())}
        if kind == "squad":
            spec["cls_index"] = ("int", [1])
        out.append((exports[kind], "predict_ids", spec, f"{kind} predict_ids ([1{', 4' if kind == 'race' else ''}, "
                                                          f"{WIDE}] ids)"))
    out += [(path, signature, spec, label + ", in a TF1 Session") for path, signature, spec, label in out
            if label.startswith(("cls serving_default", "cls predict_ids"))]
    return out


@pytest.mark.slow
def test_ten_megabyte_texts_and_wide_ids_cost_little(work, exports):
    """Every text signature of every export given 10 MB texts (one word, many words, CJK; RACE's four options
    too) answers, and every predict_ids given ids of width 100,000 is refused with INVALID_ARGUMENT, each within
    PEAK_MB of memory and SECONDS, in a process that loads the exports as TensorFlow Serving would."""
    requests = _worst_requests(exports)
    spec_file = work / "worst.json"
    spec_file.write_text(json.dumps(requests), encoding="utf-8")
    script = work / "worst.py"
    script.write_text(WORST, encoding="utf-8")
    process = subprocess.run([sys.executable, str(script), str(spec_file), str(TEN_MB), str(WIDE), str(CEILING_MB)],
                             capture_output=True, text=True, timeout=900,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=""))
    lines = [json.loads(line) for line in process.stdout.splitlines() if line.startswith("{")]
    results = [r for r in lines if "label" in r]
    check("the process answered every request (exit status; no memory ceiling reached)",
          f"exit {process.returncode}, {len(results)} of {len(requests)}"
          + ("" if len(results) == len(requests) else f", stopped at {requests[len(results)][3]}: "
             f"{lines[-1:]} {process.stderr[-2000:]}"),
          f"exit 0, all; ceiling {CEILING_MB} MB", process.returncode == 0 and len(results) == len(requests))
    for result in results:
        refused = "predict_ids" in result["label"]
        wanted = "INVALID_ARGUMENT" if refused else "OK"
        check(f"{result['label']}: {result['answer'][:110]}; {result['seconds']:.2f} s, peak +{result['peak_mb']} MB",
              (result["answer"].split(":")[0], round(result["seconds"], 2), result["peak_mb"]),
              f"{wanted}, <= {SECONDS} s, <= {PEAK_MB} MB",
              result["answer"].split(":")[0] == wanted and result["seconds"] <= SECONDS
              and result["peak_mb"] <= PEAK_MB and (not refused or "at most" in result["answer"]))
    print(f"  the process's RSS: {lines[0]['loaded_rss_mb']} MB with the {len(exports)} exports loaded, "
          f"{lines[-1]['rss_mb']} MB after every request (each first run of a signature prepares its functions)")
