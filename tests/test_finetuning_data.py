"""Tests for xlnet_tf.data.readers and xlnet_tf.data.finetuning (the graph feature builders run over files):
readers, layouts, padding sides, truncation and bad input.

Expected layouts are built by hand from ``tokenizer.encode`` of each piece of text, following the
original XLNet scripts (classifier_utils.convert_single_example, run_squad.convert_examples_to_features,
run_race.convert_single_example). Every checked figure is printed with its bound.
"""

import json

import pydoc_data.topics
import pytest

from xlnet_tf.data.finetuning import classification_features, race_features, squad_features
from xlnet_tf.data.readers import GLUE_TASKS, TextExample, read_examples, read_race, read_squad
from xlnet_tf.data.truncation import truncated_pair_lengths
from xlnet_tf.errors import UserError
from xlnet_tf.tokenization import XLNetTokenizer, train_spm

PAD, SEP, CLS = 5, 4, 3
EXTRA_LINES = [
    "Le café « Zoë » sert une crème brûlée, said Ōtsuka-san in 1,999 B.C.",
    "日本語のテキスト and 中文 text; ``quoted'' words.",
    "Tom has two cats and a dog. The cats are black. What color are the cats?",
    "The purple elephant sang a song about the moon and the stars.",
] * 3


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ft_spm")
    lines = [line for text in pydoc_data.topics.topics.values() for line in text.splitlines() if line.strip()]
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(lines + EXTRA_LINES) + "\n", encoding="utf-8")
    model = train_spm(corpus, tmp / "spm", 1000, minloglevel=2, num_threads=2)
    return XLNetTokenizer(model)


def enc(tok, text):
    return tok.encode([text])[0]


def race_qa_text(question, option):
    """graph_features.race_qa_text for one (question, option)."""
    import tensorflow as tf

    from xlnet_tf.data.graph_features import race_qa_text as graph_qa_text

    return graph_qa_text(tf.constant([question]), tf.constant([[option]]))[0, 0].numpy().decode("utf-8")


def write(path, text):
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def check(name, got, expected):
    print(f"{name} = {got!r} (expected {expected!r})")
    assert got == expected


# ----------------------------------------------------------------------------------------------------
# Classification layout and truncation


def original_pop_loop(len_a, len_b, max_len):
    """classifier_utils._truncate_seq_pair re-stated: pop from the longer one (B on a tie)."""
    while len_a + len_b > max_len:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_pair_truncation_matches_original_pop_loop():
    cases = [(a, b, m) for a in range(30) for b in range(30) for m in range(25)]
    wrong = [c for c in cases if truncated_pair_lengths(*c) != original_pop_loop(*c)]
    print(f"pair-truncation cases checked = {len(cases)}, mismatches = {len(wrong)} (bound 0)")
    assert not wrong


def test_classification_layout_left_padded(tok):
    texts = ("The cat sat on the mat.", "A dog ran in the park.", "Hello world")
    ex = [TextExample(texts[0], texts[1], "1"), TextExample(texts[2], None, "0"),
          TextExample("", None, "0"), TextExample(texts[2], "", "1"), TextExample("", texts[1], "0")]
    L = 32
    f, rep = classification_features(ex, tok, L)
    a, b, h = (enc(tok, t) for t in texts)
    pad0 = L - len(a) - len(b) - 3
    check("pair input_ids", f["input_ids"][0].tolist(), [PAD] * pad0 + a + [SEP] + b + [SEP, CLS])
    check("pair segment_ids", f["segment_ids"][0].tolist(),
          [4] * pad0 + [0] * (len(a) + 1) + [1] * (len(b) + 1) + [2])
    check("pair padding_mask", f["padding_mask"][0].tolist(), [0] * pad0 + [1] * (L - pad0))
    pad1 = L - len(h) - 2
    check("single input_ids", f["input_ids"][1].tolist(), [PAD] * pad1 + h + [SEP, CLS])
    check("single segment_ids", f["segment_ids"][1].tolist(), [4] * pad1 + [0] * (len(h) + 1) + [2])
    check("empty text_a", f["input_ids"][2].tolist(), [PAD] * (L - 2) + [SEP, CLS])
    check("empty text_b -> single layout", f["input_ids"][3].tolist(), f["input_ids"][1].tolist())
    check("empty A with B", f["input_ids"][4].tolist(), [PAD] * (L - len(b) - 3) + [SEP] + b + [SEP, CLS])
    check("cls_index", f["cls_index"].tolist(), [L - 1] * 5)
    check("id at cls_index", f["input_ids"][:, L - 1].tolist(), [CLS] * 5)
    check("label_ids", f["label_ids"].tolist(), [1, 0, 0, 1, 0])
    check("label_list", rep["label_list"], ["0", "1"])
    check("pairs", rep["pairs"], 2)
    check("truncated", rep["truncated"], 0)


def test_classification_truncation_policy(tok):
    long_a = "The quick brown fox jumps over the lazy dog while the cat watches from the window sill."
    long_b = "A second long sentence follows here with many more words than needed for this test case."
    short = "Yes."
    la, lb, ls = len(enc(tok, long_a)), len(enc(tok, long_b)), len(enc(tok, short))
    print(f"token lengths: A={la} B={lb} short={ls} (need A, B >= 12 and short <= 5)")
    assert la >= 12 and lb >= 12 and ls <= 5
    a, b, s = enc(tok, long_a), enc(tok, long_b), enc(tok, short)
    # Longer A, short B: only A loses its LAST tokens.
    L = 3 + 8 + ls
    f, rep = classification_features([TextExample(long_a, short, "x")], tok, L)
    check("long A + short B", f["input_ids"][0].tolist(), a[:8] + [SEP] + s + [SEP, CLS])
    check("truncated", rep["truncated"], 1)
    # Both long: equal lengths then alternate, B first -> A = ceil(m/2), B = floor(m/2).
    for m in (10, 11):
        f, _ = classification_features([TextExample(long_a, long_b, "x")], tok, m + 3)
        ka, kb = (m + 1) // 2, m // 2
        check(f"both long, A+B budget {m}", f["input_ids"][0].tolist(), a[:ka] + [SEP] + b[:kb] + [SEP, CLS])
    # Single sentence: first max_seq_len - 2 tokens.
    f, rep = classification_features([TextExample(long_a, None, "x"), TextExample(short, None, "y")], tok, 8)
    check("single long", f["input_ids"][0].tolist(), a[:6] + [SEP, CLS])
    check("short one untouched", f["input_ids"][1].tolist(), [PAD] * (6 - ls) + s + [SEP, CLS])
    check("truncated count", (rep["truncated"], rep["truncated_indices"]), (1, [0]))


# ----------------------------------------------------------------------------------------------------
# Readers


def test_tsv_csv_jsonl_with_headers(tok, tmp_path):
    tsv = write(tmp_path / "train.tsv", 'text_a\ttext_b\tlabel\r\nA "quoted" one\tsecond\tpos\r\n\r\nplain\t\tneg\n')
    ex, rep = read_examples(tsv)
    check("tsv texts", [(e.text_a, e.text_b, e.label) for e in ex],
          [('A "quoted" one', "second", "pos"), ("plain", "", "neg")])
    check("tsv sources", [e.source for e in ex], [f"{tsv}:2", f"{tsv}:4"])
    check("tsv report", (rep["examples"], rep["header"], rep["labeled"], rep["layout"]), (2, True, True, "columns"))

    csv_path = write(tmp_path / "train.csv", 'label,text_a\n1,"comma, and\na newline"\n0,second row\n')
    ex, rep = read_examples(csv_path)
    check("csv texts", [(e.text_a, e.text_b, e.label) for e in ex],
          [("comma, and\na newline", None, "1"), ("second row", None, "0")])
    check("csv lines (quoted field spans 2-3)", [e.source.rsplit(":", 1)[1] for e in ex], ["2", "4"])

    jsonl = write(tmp_path / "train.jsonl", '{"text_a": "x y", "text_b": "z", "label": 1}\n\n'
                                            '{"text_a": "", "text_b": null, "label": "0"}\n')
    ex, rep = read_examples(jsonl)
    check("jsonl", [(e.text_a, e.text_b, e.label) for e in ex], [("x y", "z", "1"), ("", None, "0")])

    named = write(tmp_path / "reviews.csv", "stars,review,other\n5,great,x\n1,bad,y\n")
    ex, rep = read_examples(named, text_a="review", label="stars")
    check("user-named columns", [(e.text_a, e.label) for e in ex], [("great", "5"), ("bad", "1")])
    f, frep = classification_features(ex, tok, 8)
    check("numeric label sort", (frep["label_list"], f["label_ids"].tolist()), (["1", "5"], [1, 0]))

    headerless = write(tmp_path / "nohead.tsv", "0\tfirst text\n1\tsecond text\n")
    ex, rep = read_examples(headerless, text_a=1, label=0)
    check("columns by number", [(e.text_a, e.label) for e in ex], [("first text", "0"), ("second text", "1")])


def test_glue_layouts(tok, tmp_path):
    sst = write(tmp_path / "sst_train.tsv", "sentence\tlabel\nit 's a \"charming\" film \t1\nbad\t0\n")
    ex, rep = read_examples(sst)
    check("SST-2 by header", ([(e.text_a, e.label) for e in ex], rep["layout"], rep["label_list"]),
          ([('it \'s a "charming" film ', "1"), ("bad", "0")], "glue:sst-2", ["0", "1"]))

    mrpc = write(tmp_path / "mrpc.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                                        "1\t702876\t702977\tHe said hi .\tHe greeted .\n")
    ex, rep = read_examples(mrpc)
    check("MRPC by header", ([(e.text_a, e.text_b, e.label) for e in ex], rep["layout"]),
          ([("He said hi .", "He greeted .", "1")], "glue:mrpc"))

    cola_rows = "gj04\t1\t\tOur friends won't buy this analysis.\nclc95\t0\t*\tThe more you eat, the less.\n"
    cola = write(tmp_path / "cola.tsv", cola_rows)
    ex, rep = read_examples(cola, glue_task="cola")
    check("CoLA headerless", ([(e.text_a, e.label) for e in ex], rep["header"]),
          ([("Our friends won't buy this analysis.", "1"), ("The more you eat, the less.", "0")], False))
    with pytest.raises(UserError) as err:
        read_examples(cola)
    print("CoLA without glue_task ->", err.value)
    assert str(cola) in str(err.value) and "glue_task" in str(err.value)

    head = "\t".join(GLUE_TASKS["sts-b"].headers[0])
    stsb = write(tmp_path / "stsb.tsv", head + "\n0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\t"
                                               "A plane is taking off.\tAn air plane is taking off.\t5.000\n")
    ex, rep = read_examples(stsb, task="regression")
    check("STS-B regression", [(e.text_a, e.text_b, e.label) for e in ex],
          [("A plane is taking off.", "An air plane is taking off.", 5.0)])
    f, frep = classification_features(ex, tok, 32)
    check("regression label_ids", (f["label_ids"].dtype.name, f["label_ids"].tolist(), frep["task"]),
          ("float32", [5.0], "regression"))

    # Test files without labels: prediction, label None -> label_ids -1.
    sst_test = write(tmp_path / "sst_test.tsv", "index\tsentence\n0\tsome film\n1\tanother\n")
    ex, rep = read_examples(sst_test)
    check("SST-2 test file", ([(e.text_a, e.label) for e in ex], rep["labeled"]),
          ([("some film", None), ("another", None)], False))
    f, frep = classification_features(ex, tok, 16)
    check("unlabeled label_ids", (f["label_ids"].tolist(), frep["task"]), ([-1, -1], "unlabeled"))
    mrpc_test = write(tmp_path / "mrpc_test.tsv", "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                                                  "0\t1\t2\tOne .\tTwo .\n")
    ex, rep = read_examples(mrpc_test, glue_task="mrpc")
    check("MRPC test file", [(e.text_a, e.text_b, e.label) for e in ex], [("One .", "Two .", None)])
    cola_test = write(tmp_path / "cola_test.tsv", "index\tsentence\n0\tA sentence.\n")
    ex, rep = read_examples(cola_test, glue_task="cola")
    check("CoLA test file", [(e.text_a, e.label) for e in ex], [("A sentence.", None)])


# ----------------------------------------------------------------------------------------------------
# Bad input


def expect_error(fn, *must_contain):
    with pytest.raises(UserError) as err:
        fn()
    print(f"error: {err.value}  (must name {must_contain})")
    for s in must_contain:
        assert s in str(err.value)


def test_bad_rows_empty_files_and_non_utf8(tok, tmp_path):
    bad_cols = write(tmp_path / "bad_cols.tsv", "text_a\tlabel\ngood\t1\nno label column here\ngood too\t0\n")
    expect_error(lambda: read_examples(bad_cols), str(bad_cols), "line 3", "expected 2 columns, found 1")
    ex, rep = read_examples(bad_cols, skip_bad_rows=True)
    check("skipped wrong column count", (rep["examples"], rep["skipped"], rep["skipped_lines"]), (2, 1, [3]))

    bad_json = write(tmp_path / "bad.jsonl", '{"text_a": "ok", "label": "1"}\n{"text_a": "oops",\n'
                                             '["not", "an", "object"]\n{"label": "1"}\n')
    expect_error(lambda: read_examples(bad_json), str(bad_json), "line 2", "invalid JSON")
    ex, rep = read_examples(bad_json, skip_bad_rows=True)
    check("skipped JSON rows", (rep["examples"], rep["skipped_lines"]), (1, [2, 3, 4]))

    reg = write(tmp_path / "reg.csv", "text_a,label\na,0.5\nb,1e-1\nc,\nd,high\ne,nan\n")
    expect_error(lambda: read_examples(reg, task="regression"), str(reg), "line 4", "empty")
    ex, rep = read_examples(reg, task="regression", skip_bad_rows=True)
    check("regression labels", ([e.label for e in ex], rep["skipped_lines"]), ([0.5, 0.1], [4, 5, 6]))

    for name, content in (("empty.tsv", b""), ("blank.jsonl", b"\n \n"), ("empty.csv", b"\xef\xbb\xbf")):
        path = write(tmp_path / name, content)
        expect_error(lambda: read_examples(path), str(path), "empty")
    header_only = write(tmp_path / "header_only.tsv", "text_a\tlabel\n")
    expect_error(lambda: read_examples(header_only), str(header_only), "no examples")

    latin1 = write(tmp_path / "latin1.tsv", b"text_a\tlabel\nfine\t1\ncaf\xe9 au lait\t0\nok\t1\n")
    expect_error(lambda: read_examples(latin1), str(latin1), "line 3", "UTF-8", "0xe9")
    ex, rep = read_examples(latin1, skip_bad_rows=True)
    check("skipped non-UTF-8 row", ([e.text_a for e in ex], rep["skipped_lines"]), (["fine", "ok"], [3]))
    latin1_jsonl = write(tmp_path / "latin1.jsonl", b'{"text_a": "a", "label": "1"}\n{"text_a": "\xe9"}\n')
    expect_error(lambda: read_examples(latin1_jsonl), str(latin1_jsonl), "line 2", "UTF-8")

    unknown = write(tmp_path / "unknown.tsv", "text_a\tlabel\nx\tmaybe\n")
    ex, _ = read_examples(unknown)
    expect_error(lambda: classification_features(ex, tok, 8, label_list=["0", "1"]), f"{unknown}:2", "maybe")
    expect_error(lambda: read_examples(tmp_path / "data.xlsx"), "data.xlsx", "unknown file type")
    expect_error(lambda: read_examples(tmp_path / "missing.tsv"), "missing.tsv", "not found")


# ----------------------------------------------------------------------------------------------------
# SQuAD

CONTEXT = ("Le café « Zoë » sert une crème brûlée. The ``best'' dish — said Ōtsuka-san — is 日本語 ramen, "
           "since 1,999 B.C. Nobody knows why.")
QUESTIONS = [("q1", "Who said it?", "Ōtsuka-san"), ("q2", "What does the café serve?", "crème brûlée"),
             ("q3", "Which dish?", "日本語 ramen"), ("q4", "What quote?", "``best''"),
             ("q5", "Since when?", "1,999"), ("q6", "What is served?", "café « Zoë »")]


def squad_file(tmp_path, context, questions, impossible=()):
    qas = [{"id": i, "question": q, "answers": [{"text": a, "answer_start": context.index(a)}],
            "is_impossible": False} for i, q, a in questions]
    qas += [{"id": i, "question": q, "answers": [], "is_impossible": True,
             "plausible_answers": [{"text": a, "answer_start": context.index(a)}]} for i, q, a in impossible]
    data = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}
    return write(tmp_path / "squad.json", json.dumps(data, ensure_ascii=False))


def test_squad_layout_answers_and_impossible(tok, tmp_path):
    path = squad_file(tmp_path, CONTEXT, QUESTIONS, impossible=[("q7", "Who owns the moon?", "Zoë")])
    examples, rep = read_squad(path)
    check("read_squad", (rep["examples"], rep["impossible"]), (7, 1))
    L = 128
    f, frep = squad_features(examples, tok, max_seq_len=L, doc_stride=32, max_query_len=16, is_training=True)
    check("windows (one per question)", frep["windows"], 7)
    doc = enc(tok, CONTEXT)
    plen = len(doc)
    for i, (qid, question, answer) in enumerate(QUESTIONS):
        s, e = f["start_position"][i], f["end_position"][i]
        got = CONTEXT[f["token_char_start"][i, s]:f["token_char_end"][i, e]]
        check(f"{qid} answer substring via token_char_start/end [{s}, {e}]", got, answer)
        assert f["is_impossible"][i] == 0
    # Exact layout of one window: paragraph first, question after, <cls> last, padding on the RIGHT.
    q = enc(tok, QUESTIONS[0][1])
    n = plen + len(q) + 3
    check("squad input_ids", f["input_ids"][0].tolist(), doc + [SEP] + q + [SEP, CLS] + [PAD] * (L - n))
    check("squad segment_ids", f["segment_ids"][0].tolist(),
          [0] * (plen + 1) + [1] * (len(q) + 1) + [2] + [3] * (L - n))
    check("squad p_mask", f["p_mask"][0].tolist(), [0] * plen + [1] * (len(q) + 2) + [0] + [1] * (L - n))
    check("squad padding_mask", f["padding_mask"][0].tolist(), [1] * n + [0] * (L - n))
    check("cls_index", int(f["cls_index"][0]), n - 1)
    check("paragraph_len", int(f["paragraph_len"][0]), plen)
    check("char offsets -1 outside paragraph", set(f["token_char_start"][0, plen:].tolist()), {-1})
    spans = list(zip(f["token_char_start"][0, :plen].tolist(), f["token_char_end"][0, :plen].tolist()))
    ordered = all(a <= b for a, b in spans) and all(x[0] <= y[0] for x, y in zip(spans, spans[1:]))
    check("paragraph token spans ordered and inside the context",
          (ordered, spans[-1][1] <= len(CONTEXT), spans[0][0] >= 0), (True, True, True))
    # Impossible question: start = end = cls_index, which p_mask leaves selectable.
    k = 6
    cls_k = int(f["cls_index"][k])
    check("impossible positions", (int(f["start_position"][k]), int(f["end_position"][k]),
                                   int(f["is_impossible"][k])), (cls_k, cls_k, 1))
    check("p_mask at cls", int(f["p_mask"][k, cls_k]), 0)


def test_squad_long_paragraph_windows(tok, tmp_path):
    sentences = [f"Part {i} of the story is about the moon and the stars." for i in range(12)]
    sentences[9] = "Then the purple elephant sang a song."
    context = " ".join(sentences)
    question = "Who sang a song about the moon and the stars in the part of the story?"
    answer = "the purple elephant"
    examples, _ = read_squad(squad_file(tmp_path, context, [("long", question, answer)]))
    L, Q, stride = 64, 8, 20
    q = enc(tok, question)
    doc = enc(tok, context)
    print(f"question tokens = {len(q)} (> max_query_len {Q}), paragraph tokens = {len(doc)} (> 3 windows)")
    assert len(q) > Q and len(doc) > 3 * (L - Q - 3)
    f, rep = squad_features(examples, tok, max_seq_len=L, doc_stride=stride, max_query_len=Q, is_training=True)
    # The original's windows, re-stated: length L - Q - 3, step min(length, stride), stop at the end.
    max_doc, starts, start = L - Q - 3, [], 0
    while True:
        starts.append(start)
        if start + max_doc >= len(doc):
            break
        start += stride
    check("window count", rep["windows"], len(starts))
    check("window_index", f["window_index"].tolist(), list(range(len(starts))))
    check("questions_truncated", rep["questions_truncated"], 1)
    full, _ = squad_features(examples, tok, max_seq_len=len(doc) + Q + 3, max_query_len=Q, is_training=True)
    s0, e0 = int(full["start_position"][0]), int(full["end_position"][0])
    check("answer in the single full window", context[full["token_char_start"][0, s0]:full["token_char_end"][0, e0]],
          answer)
    holding = 0
    for w, st in enumerate(starts):
        plen = min(max_doc, len(doc) - st)
        check(f"window {w} paragraph ids doc[{st}:{st + plen}]", f["input_ids"][w, :plen].tolist(),
              doc[st:st + plen])
        check(f"window {w} tail", f["input_ids"][w, plen:plen + Q + 3].tolist(), [SEP] + q[:Q] + [SEP, CLS])
        if st <= s0 and e0 < st + plen:
            holding += 1
            s, e = int(f["start_position"][w]), int(f["end_position"][w])
            check(f"window {w} answer positions", (s, e, int(f["is_impossible"][w])), (s0 - st, e0 - st, 0))
            check(f"window {w} answer text", context[f["token_char_start"][w, s]:f["token_char_end"][w, e]], answer)
        else:
            cls_w = int(f["cls_index"][w])
            check(f"window {w} without the answer", (int(f["start_position"][w]), int(f["is_impossible"][w])),
                  (cls_w, 1))
    print(f"windows holding the answer = {holding} (bound >= 1)")
    assert holding >= 1
    check("token_is_max_context: one window per paragraph token", int(f["token_is_max_context"].sum()), len(doc))
    check("multi_window_examples", rep["multi_window_examples"], 1)


def test_squad_prediction_file_without_answers(tok, tmp_path):
    data = {"data": [{"paragraphs": [{"context": "Tom has two cats.", "qas": [
        {"id": "p1", "question": "What does Tom have?"}]}]}]}
    path = write(tmp_path / "predict.json", json.dumps(data))
    ex, rep = read_squad(path)
    check("unanswered questions", rep["unanswered"], 1)
    f, _ = squad_features(ex, tok, max_seq_len=64, max_query_len=16, is_training=False)
    check("prediction positions", (int(f["start_position"][0]), int(f["end_position"][0]),
                                   int(f["is_impossible"][0])), (-1, -1, 0))
    expect_error(lambda: squad_features(ex, tok, max_seq_len=64, max_query_len=16, is_training=True),
                 str(path), "'p1'", "needs an answer")


def test_squad_bad_answer(tmp_path):
    data = {"data": [{"paragraphs": [{"context": "abc def", "qas": [
        {"id": "bad", "question": "?", "answers": [{"text": "xyz", "answer_start": 0}]},
        {"id": "ok", "question": "?", "answers": [{"text": "def", "answer_start": 4}]}]}]}]}
    path = write(tmp_path / "bad_squad.json", json.dumps(data))
    expect_error(lambda: read_squad(path), str(path), "'bad'", "xyz")
    ex, rep = read_squad(path, skip_bad_rows=True)
    check("skipped bad question", (rep["examples"], rep["skipped"]), (1, 1))
    broken = write(tmp_path / "broken.json", '{"data": [\n{"paragraphs": ]}')
    expect_error(lambda: read_squad(broken), str(broken), "line 2", "invalid JSON")


# ----------------------------------------------------------------------------------------------------
# RACE


def test_race_layout_and_truncation(tok, tmp_path):
    article = "Tom has two cats and a dog. The cats are black."
    data = {"id": "high1.txt", "article": article,
            "questions": ["Tom has _ cats.", "What color are the cats?"],
            "options": [["one", "two", "three", "four"], ["black", "white", "red", "blue"]],
            "answers": ["B", "A"]}
    root = tmp_path / "RACE" / "train" / "high"
    root.mkdir(parents=True)
    write(root / "1.txt", json.dumps(data))
    examples, rep = read_race(tmp_path / "RACE")
    check("read_race", (rep["files"], rep["examples"], rep["cloze"]), (1, 2, 1))
    single, _ = read_race(root / "1.txt")
    check("read_race on one file", [(e.example_id, e.label) for e in single], [("high1.txt-0", 1), ("high1.txt-1", 0)])
    check("qa texts", [race_qa_text(e.question, o) for e in examples for o in e.options[:2]],
          ["Tom has one cats.", "Tom has two cats.", "What color are the cats? black",
           "What color are the cats? white"])
    L = 64
    f, frep = race_features(examples, tok, max_seq_len=L, max_qa_len=24)
    check("shapes", (f["input_ids"].shape, f["segment_ids"].shape, f["padding_mask"].shape, f["label_ids"].shape),
          ((2, 4, L), (2, 4, L), (2, 4, L), (2,)))
    art = enc(tok, article)
    for i, e in enumerate(examples):
        for j, option in enumerate(e.options):
            qa = enc(tok, race_qa_text(e.question, option))
            pad = L - len(art) - len(qa) - 3
            assert pad >= 0
            check(f"q{i} option {j} input_ids", f["input_ids"][i, j].tolist(),
                  [PAD] * pad + art + [SEP] + qa + [SEP, CLS])
            check(f"q{i} option {j} segment_ids", f["segment_ids"][i, j].tolist(),
                  [4] * pad + [0] * (len(art) + 1) + [1] * (len(qa) + 1) + [2])
    check("label_ids", f["label_ids"].tolist(), [1, 0])
    check("no truncation", (frep["articles_truncated"], frep["qa_truncated"]), (0, 0))
    # Truncation: qa keeps its LAST max_qa_len tokens, the article its FIRST L - 3 - len(qa).
    L2, Q2 = 14, 5
    f, frep = race_features(examples[1:], tok, max_seq_len=L2, max_qa_len=Q2)
    qa = enc(tok, race_qa_text(examples[1].question, "black"))
    assert len(qa) > Q2 and len(art) > L2 - 3 - Q2
    check("truncated row", f["input_ids"][0, 0].tolist(), art[:L2 - 3 - Q2] + [SEP] + qa[-Q2:] + [SEP, CLS])
    check("truncated counts (per option row)", (frep["articles_truncated"], frep["qa_truncated"]), (4, 4))


def test_race_bad_answer(tmp_path):
    data = {"article": "a", "questions": ["q?"], "options": [["1", "2", "3", "4"]], "answers": ["E"]}
    path = write(tmp_path / "bad.json", json.dumps(data))
    expect_error(lambda: read_race(path), str(path), "question 1", "'E'")
    empty = write(tmp_path / "empty.txt", "")
    expect_error(lambda: read_race(empty), str(empty), "empty")


def test_concat_rows_equals_ragged_concat():
    """`graph_features.concat_rows` (index arithmetic) gives what TensorFlow's ragged `tf.concat(parts, 1)` gives:
    rows of random lengths with empty ones, an empty batch, eager and traced with unknown shapes."""
    import numpy as np
    import tensorflow as tf

    from xlnet_tf.data.graph_features import concat_rows

    rng = np.random.default_rng(7)
    checked = []
    for batch in (5, 1, 0):
        parts = []
        for _ in range(4):
            lengths = rng.integers(0, 4, batch)
            parts.append(tf.RaggedTensor.from_row_lengths(
                rng.integers(0, 100, int(lengths.sum())).astype(np.int32), lengths.astype(np.int64)))
        want = tf.concat(parts, 1)
        spec = [tf.RaggedTensorSpec([None, None], tf.int32, row_splits_dtype=tf.int64)] * len(parts)
        traced = tf.function(lambda *p: concat_rows(list(p)), input_signature=spec)
        for got in (concat_rows(parts), traced(*parts)):
            checked.append(got.to_list() == want.to_list() and got.row_splits.numpy().tolist()
                           == want.row_splits.numpy().tolist())
    print(f"concat_rows == tf.concat(parts, 1) for batches of 5, 1 and 0, eager and traced: {checked} (bound all)")
    assert all(checked)


def test_graph_builders_trace_once_for_chunks_of_every_size():
    """`chunked.one_trace_per_structure` (the feature builders' and inference's calls): chunks of any number of
    examples run one trace per structure of the arguments, with what the function gives eagerly."""
    import numpy as np
    import tensorflow as tf

    from xlnet_tf.data import chunked

    def lengths_and_sums(ids, weights=None):
        out = {"lengths": ids.row_lengths()}
        if weights is not None:
            out["sums"] = tf.reduce_sum(weights, -1)
        return out

    function = tf.function(lengths_and_sums, autograph=False)
    call = chunked.one_trace_per_structure(function, chunked.any_count)
    rng = np.random.default_rng(0)
    for n in (5, 2, 7, 0):
        lengths = rng.integers(0, 4, n)
        ids = tf.RaggedTensor.from_row_lengths(tf.range(int(lengths.sum()), dtype=tf.int32), lengths)
        weights = rng.normal(size=(n, 3)).astype(np.float32)
        got, want = call(ids, weights=weights), lengths_and_sums(ids, weights)
        assert got["lengths"].numpy().tolist() == lengths.tolist()
        np.testing.assert_allclose(got["sums"].numpy(), want["sums"].numpy(), rtol=1e-6)
    with_weights = function.experimental_get_tracing_count()
    for n in (4, 1):
        assert call(tf.ragged.constant([[1, 2]] * n, dtype=tf.int32))["lengths"].numpy().tolist() == [2] * n
    print(f"traces: {with_weights} for chunks of 5, 2, 7 and 0 examples with weights (bound 1), "
          f"{function.experimental_get_tracing_count()} after chunks of 4 and 1 without (bound 2)")
    assert with_weights == 1 and function.experimental_get_tracing_count() == 2
