"""Tests for xlnet_tf.data.token_classification (readers, word-piece labels, windows, predictions back to
words, entity spans) and xlnet_tf.metrics.token_classification_metrics (seqeval's default-mode figures).

Expected rows are built by hand from ``tokenizer.encode`` of each word; the best window of each word is
recomputed by brute force from the rows; the metrics are compared with golden figures that seqeval 1.2.2
computed (tests/fixtures/seqeval_golden.json, made by tests/fixtures/make_seqeval_golden.py), so the test
needs neither seqeval nor scikit-learn. Every checked figure is printed with its bound.
"""

import collections
import json
import math
import os

import numpy as np
import pydoc_data.topics
import pytest

from xlnet_tf.data.token_classification import (IGNORE, TokenExample, entity_offsets, entity_spans, read_conll,
                                                read_token_examples, read_token_jsonl, token_classification_features,
                                                token_label_list, word_predictions, word_values)
from test_finetuning_data import check, write  # the same file writer and printed check
from xlnet_tf.errors import UserError
from xlnet_tf.metrics import entity_chunks, token_classification_metrics

PAD, SEP, CLS = 5, 4, 3
SEG_A, SEG_CLS, SEG_PAD = 0, 2, 4
GOLDEN = os.path.join(os.path.dirname(__file__), "fixtures", "seqeval_golden.json")


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from xlnet_tf.tokenization import XLNetTokenizer, train_spm

    tmp = tmp_path_factory.mktemp("tc_spm")
    lines = [line.strip() for _, text in sorted(pydoc_data.topics.topics.items())
             for line in text.splitlines() if line.strip()]
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(lines[:1500]) + "\n", encoding="utf-8")
    return XLNetTokenizer(train_spm(corpus, tmp / "spiece", 400, minloglevel=2, num_threads=2))


def expect_error(fn, *parts):
    with pytest.raises(UserError) as info:
        fn()
    message = str(info.value)
    print(f"error: {message} (must contain {parts})")
    for part in parts:
        assert part in message


def sentences(n, words_per_sentence, seed=0):
    """Sentences of real words (CPython's documentation text) with tags from a rule that needs the neighbours:
    a capitalised word or one after "the" starts an entity, following lower-case words continue it."""
    rng = np.random.default_rng(seed)
    words = [w for text in pydoc_data.topics.topics.values() for w in text.split()][:20000]
    out = []
    for _ in range(n):
        k = int(rng.integers(0, len(words) - max(words_per_sentence)))
        ws = words[k:k + int(rng.choice(words_per_sentence))]
        tags, inside = [], None
        for i, w in enumerate(ws):
            if w[:1].isupper() or (i and ws[i - 1] == "the"):
                inside = "NAME" if w[:1].isupper() else "THING"
                tags.append("B-" + inside)
            elif inside and w.isalpha() and w.islower() and len(w) > 3:
                tags.append("I-" + inside)
            else:
                tags.append("O")
                inside = None
        out.append(TokenExample(ws, tags, f"made:{len(out)}"))
    return out


# ----------------------------------------------------------------------------------------------------
# Readers

CONLL = ("-DOCSTART- -X- -X- O\n\n"
         "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\ncall NN I-NP O\n. . O O\n\n"
         "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n"
         "-DOCSTART- -X- -X- O\n"
         "BRUSSELS NNP B-NP B-LOC\t\n1996-08-22 CD I-NP O\n\n\n\n")


def test_conll_reader_columns_docstart_crlf(tmp_path):
    path = write(tmp_path / "train.conll", CONLL)
    ex, rep = read_conll(path)
    check("sentences", [e.words for e in ex],
          [["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn"], ["BRUSSELS", "1996-08-22"]])
    check("NER tags (last column)", [e.tags for e in ex],
          [["B-ORG", "O", "B-MISC", "O", "O"], ["B-PER", "I-PER"], ["B-LOC", "O"]])
    check("sources", [e.source for e in ex], [f"{path}:3", f"{path}:9", f"{path}:13"])
    check("report", {k: rep[k] for k in ("sentences", "words", "columns", "docstarts", "labeled", "skipped")},
          {"sentences": 3, "words": 9, "columns": 4, "docstarts": 2, "labeled": True, "skipped": 0})
    check("POS tags (tag_column=1)", [e.tags for e in read_conll(path, tag_column=1)[0]][1], ["NNP", "NNP"])
    check("chunk tags (tag_column=-2)", read_conll(path, tag_column=-2)[0][0].tags[:2], ["B-NP", "B-VP"])
    unlabeled, rep = read_conll(path, tag_column=None)
    check("tag_column=None", (unlabeled[1].tags, rep["labeled"]), (None, False))
    crlf = write(tmp_path / "crlf.conll", "\ufeff" + CONLL.replace("\n", "\r\n"))
    check("CRLF + BOM equal LF", [(e.words, e.tags) for e in read_conll(crlf)[0]], [(e.words, e.tags) for e in ex])
    check("label list ('O' first, then sorted)", token_label_list(ex),
          ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"])
    words_only = write(tmp_path / "test.txt", "Peter\nBlackburn\n\nBRUSSELS\n")
    check("one-column file, tag_column=None", [e.words for e in read_conll(words_only, tag_column=None)[0]],
          [["Peter", "Blackburn"], ["BRUSSELS"]])


def test_conll_reader_errors(tmp_path):
    short = write(tmp_path / "short.conll", "EU NNP B-ORG\nrejects VBZ O\n\nGerman B-MISC\ncall NN O\n\nok X O\n")
    expect_error(lambda: read_conll(short), str(short), "line 4", "expected 3 columns (as on line 1), found 2")
    ex, rep = read_conll(short, skip_bad_rows=True)
    check("skip_bad_rows skips the sentence", ([e.words for e in ex], rep["skipped_lines"]),
          ([["EU", "rejects"], ["ok"]], [4]))
    one = write(tmp_path / "one.conll", "Peter\nBlackburn\n")
    expect_error(lambda: read_conll(one), str(one), "line 1", "one column", "tag_column=None")
    expect_error(lambda: read_conll(short, tag_column=5), str(short), "line 1", "tag_column 5 does not exist")
    expect_error(lambda: read_conll(short, tag_column=0), "both column 0")
    latin1 = write(tmp_path / "latin1.conll", b"caf\xc3\xa9 O\n\nna\xefve O\n")
    expect_error(lambda: read_conll(latin1), str(latin1), "line 3", "not valid UTF-8", "0xef")
    check("UTF-8 word kept", read_conll(latin1, skip_bad_rows=True)[0][0].words, ["café"])
    for name, content in (("empty.conll", b""), ("blank.conll", b"\n\r\n  \n")):
        expect_error(lambda: read_conll(write(tmp_path / name, content)), name, "empty")
    only_doc = write(tmp_path / "doc.conll", "-DOCSTART- -X- O\n\n")
    expect_error(lambda: read_conll(only_doc), str(only_doc), "no sentences")
    expect_error(lambda: read_conll(tmp_path / "missing.conll"), "missing.conll", "not found")


def test_jsonl_reader_and_errors(tmp_path):
    rows = [{"tokens": ["Peter", "Blackburn"], "tags": ["B-PER", "I-PER"], "id": 7},
            {"tokens": [], "tags": []}, {"tokens": ["in", "Brussels"], "tags": ["O", "S-LOC"]}]
    path = write(tmp_path / "train.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    ex, rep = read_token_jsonl(path)
    check("jsonl", [(e.words, e.tags, e.source) for e in ex],
          [(r["tokens"], r["tags"], f"{path}:{i + 1}") for i, r in enumerate(rows)])
    check("jsonl report", (rep["sentences"], rep["words"], rep["labeled"]), (3, 4, True))
    check("read_token_examples picks JSONL by extension", len(read_token_examples(path)[0]), 3)
    mismatch = write(tmp_path / "mismatch.jsonl", '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": ["a", "b"], '
                                                  '"tags": ["O"]}\n')
    expect_error(lambda: read_token_jsonl(mismatch), str(mismatch), "line 2", "2 tokens but 1 tags")
    missing = write(tmp_path / "missing.jsonl", '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": ["b"]}\n')
    expect_error(lambda: read_token_jsonl(missing), str(missing), "line 2", "missing key 'tags'")
    ints = write(tmp_path / "ints.jsonl", '{"tokens": ["a"], "tags": [3]}\n')
    expect_error(lambda: read_token_jsonl(ints), str(ints), "line 1", "tag names")
    latin1 = write(tmp_path / "latin1.jsonl",
                   b'{"tokens": ["a"], "tags": ["O"]}\n{"tokens": ["\xe9"], "tags": ["O"]}\n')
    expect_error(lambda: read_token_jsonl(latin1), str(latin1), "line 2", "not valid UTF-8")
    ex, rep = read_token_jsonl(latin1, skip_bad_rows=True)
    check("skipped jsonl lines", (len(ex), rep["skipped_lines"]), (1, [2]))
    words_only = write(tmp_path / "words.jsonl", '{"tokens": ["a", "b"]}\n')
    check("jsonl without tags", read_token_jsonl(words_only)[0][0].tags, None)
    expect_error(lambda: read_token_examples(path, "xml"), "'conll' or 'jsonl'")


def test_readers_on_ram_filesystem():
    import tensorflow as tf

    conll, jsonl = "ram://token_cls/train.conll", "ram://token_cls/dev.jsonl"
    tf.io.gfile.makedirs("ram://token_cls")
    with tf.io.gfile.GFile(conll, "wb") as f:
        f.write(CONLL.encode("utf-8"))
    with tf.io.gfile.GFile(jsonl, "wb") as f:
        f.write(b'{"tokens": ["Peter"], "tags": ["B-PER"]}\n')
    ex, rep = read_token_examples(conll)
    check("ram:// CoNLL sentences", (rep["sentences"], ex[0].source), (3, f"{conll}:3"))
    check("ram:// JSONL", read_token_examples(jsonl)[0][0].tags, ["B-PER"])
    bad = "ram://token_cls/bad.conll"
    with tf.io.gfile.GFile(bad, "wb") as f:
        f.write(b"a B-X\nb\n")
    expect_error(lambda: read_conll(bad), bad, "line 2")


# ----------------------------------------------------------------------------------------------------
# Features: pieces, labels, layout


def word_pieces(tok, words):
    return tok.encode(list(words)) if words else []


def test_first_piece_labels_left_padding_sep_cls(tok):
    words = ["The", "tokenize()", "function", "(", "sorted", "", "pieces", "ünïcode"]
    tags = ["O", "B-FN", "I-FN", "O", "B-X", "O", "I-X", "B-FN"]
    pieces = word_pieces(tok, words)
    print("pieces per word:", [tok.id_to_piece(p) for ps in pieces for p in ps], [len(p) for p in pieces])
    bare = tok.encode(["( x"])[0]
    check("'(' splits into a bare '▁' and '('", [tok.id_to_piece(p) for p in pieces[3]], ["\u2581", "("])
    check("'(' in a sentence is the same two pieces", [tok.id_to_piece(p) for p in bare[:2]], ["\u2581", "("])
    check("the empty word has no pieces of its own", pieces[5], [])
    pieces[5] = [tok.unk_id]
    labels = ["O", "B-FN", "B-X", "I-FN", "I-X"]
    ex = [TokenExample(words, tags, "hand:1"), TokenExample(["x"], ["O"], "hand:2")]
    L = 40
    feats, rep = token_classification_features(ex, tok, L, label_list=labels)
    flat = [p for ps in pieces for p in ps]
    n, pad = len(flat), L - len(flat) - 2
    check("rows", feats["input_ids"].shape, (2, L))
    check("input_ids", feats["input_ids"][0].tolist(), [PAD] * pad + flat + [SEP, CLS])
    check("segment_ids", feats["segment_ids"][0].tolist(), [SEG_PAD] * pad + [SEG_A] * (n + 1) + [SEG_CLS])
    check("padding_mask", feats["padding_mask"][0].tolist(), [0] * pad + [1] * (n + 2))
    firsts = pad + np.concatenate([[0], np.cumsum([len(p) for p in pieces])[:-1]])
    want = np.full(L, IGNORE)
    want[firsts] = [labels.index(t) for t in tags]
    check("label_ids on first pieces, IGNORE elsewhere", feats["label_ids"][0].tolist(), want.tolist())
    want_word = np.full(L, -1)
    want_word[firsts] = np.arange(len(words))
    check("word_index", feats["word_index"][0].tolist(), want_word.tolist())
    check("piece_word_index", feats["piece_word_index"][0].tolist(),
          [-1] * pad + [w for w, ps in enumerate(pieces) for _ in ps] + [-1, -1])
    check("per-row", {k: feats[k].tolist() for k in ("example_index", "window_index", "cls_index", "length")},
          {"example_index": [0, 1], "window_index": [0, 0], "cls_index": [L - 1] * 2,
           "length": [n + 2, len(tok.encode(["x"])[0]) + 2]})
    check("dtypes", sorted({str(v.dtype) for v in feats.values()}), ["int32"])
    check("report", {k: rep[k] for k in ("examples", "windows", "words", "empty_words", "truncated_words")},
          {"examples": 2, "windows": 2, "words": 9, "empty_words": 1, "truncated_words": 0})

    all_feats, _ = token_classification_features(ex, tok, L, label_list=labels, label_all_pieces=True)
    want_all = np.full(L, IGNORE)
    want_all[pad:pad + n] = [labels.index(tags[w]) for w, ps in enumerate(pieces) for _ in ps]
    check("label_all_pieces: the word's tag on every piece", all_feats["label_ids"][0].tolist(), want_all.tolist())
    check("label_all_pieces: same inputs", np.array_equal(all_feats["input_ids"], feats["input_ids"]), True)
    check("word_predictions(label_ids) gives the gold tags",
          word_predictions(all_feats, all_feats["label_ids"]), [[labels.index(t) for t in tags], [0]])

    unlabeled, rep = token_classification_features([TokenExample(words)], tok, L)
    check("unlabeled: all IGNORE", (int((unlabeled["label_ids"] != IGNORE).sum()), rep["labeled"]), (0, False))
    default_feats, rep = token_classification_features(ex, tok, L)
    check("default label list", rep["label_list"], ["O", "B-FN", "B-X", "I-FN", "I-X"])
    expect_error(lambda: token_classification_features(ex, tok, L, label_list=["O"]), "hand:1", "'B-FN'")
    expect_error(lambda: token_classification_features([TokenExample(["a"], ["O", "O"], "s:3")], tok, L),
                 "s:3", "1 words but 2 tags")
    expect_error(lambda: token_classification_features(ex, tok, 2), "at least 3")
    empty, rep = token_classification_features([TokenExample([], [], "e:1")] + ex, tok, L)
    check("an empty sentence: one row <sep> <cls>", (empty["input_ids"][0, -3:].tolist(), empty["length"][0]),
          ([PAD, SEP, CLS], 2))
    check("... and no word", word_predictions(empty, empty["label_ids"])[0], [])


def brute_force_best(feats, example):
    """Each word's best window by min(left, right) + 0.01 * window pieces, read from the rows themselves."""
    rows = np.nonzero(feats["example_index"] == example)[0]
    best = {}
    for r in rows:  # rows in window order: the earliest wins ties
        pw = feats["piece_word_index"][r]
        real = np.nonzero(pw >= 0)[0]
        for w in np.unique(pw[real]):
            pos = np.nonzero(pw == w)[0]
            score = min(pos[0] - real[0], real[-1] - pos[-1]) + 0.01 * len(real)
            if w not in best or score > best[w][0]:
                best[w] = (score, r, pos[0])
    return best


@pytest.mark.parametrize("doc_stride", [None, 1, 5, 11, 22, 100])
def test_long_sentence_windows(tok, doc_stride):
    L = 24
    ex = sentences(6, (40, 60, 8), seed=3)
    long_word = "".join(w for w in ex[0].words[:30])  # far more pieces than a window holds
    ex.append(TokenExample(ex[1].words[:5] + [long_word] + ex[1].words[:5], ["O"] * 5 + ["B-NAME"] + ["O"] * 5, "x"))
    labels = token_label_list(ex)
    feats, rep = token_classification_features(ex, tok, L, labels, doc_stride=doc_stride)
    pieces = [word_pieces(tok, e.words) for e in ex]
    span = L - 2
    n_pieces = [sum(min(len(p), span) for p in ps) for ps in pieces]
    print(f"doc_stride={doc_stride}: pieces per sentence {n_pieces} (window {span}), windows {rep['windows']}, "
          f"report {rep}")
    assert max(n_pieces) >= 3 * span
    check("truncated words", rep["truncated_words"], 1)
    gold = [[labels.index(t) for t in e.tags] for e in ex]
    bad = collections.Counter()  # check -> sentences (or rows, words) that fail it
    seen = collections.Counter()  # how much the brute-force check has to tell apart
    for i, e in enumerate(ex):
        rows = np.nonzero(feats["example_index"] == i)[0]
        bad["windows not numbered 0, 1, ... in order"] += feats["window_index"][rows].tolist() != list(range(len(rows)))
        for r in rows:
            a, b = feats["window_start"][r], feats["window_end"][r]
            want = [p for ps in pieces[i][a:b] for p in ps[:span]]
            real = feats["input_ids"][r][feats["padding_mask"][r] == 1].tolist()
            bad["rows whose pieces are not their words' + <sep> <cls>"] += real != want + [SEP, CLS]
            bad["rows of more than max_seq_len - 2 pieces"] += len(want) > span
            owners = [w for w in range(a, b) for _ in pieces[i][w][:span]]
            bad["rows whose piece_word_index is not their words'"] += (
                feats["piece_word_index"][r][feats["padding_mask"][r] == 1].tolist() != owners + [-1, -1])
        starts, ends = feats["window_start"][rows], feats["window_end"][rows]
        bad["sentences not covered from first to last word"] += (starts[0], ends[-1]) != (0, len(e.words))
        bad["windows that do not move on"] += int((np.diff(starts) <= 0).sum())
        bad["gaps between windows"] += int((starts[1:] > ends[:-1]).sum())
        if doc_stride is not None and doc_stride >= span:
            bad["overlaps although doc_stride >= window"] += int((starts[1:] != ends[:-1]).sum())
        best = brute_force_best(feats, i)
        scored = [(r, c) for r in rows for c in np.nonzero(feats["word_index"][r] >= 0)[0]]
        bad["sentences whose words are not each scored once"] += (
            sorted(int(feats["word_index"][r, c]) for r, c in scored) != list(range(len(e.words))))
        for r, c in scored:
            w = int(feats["word_index"][r, c])
            bad["words not scored in their brute-force best window"] += (best[w][1], best[w][2]) != (r, c)
            in_rows = [q for q in rows if w in feats["piece_word_index"][q]]
            seen["words in several windows"] += len(in_rows) > 1
            seen["words whose best window is not their first"] += best[w][1] != in_rows[0]
            bad["scored words with a wrong label id"] += feats["label_ids"][r, c] != labels.index(e.tags[w])
    for name in ("windows not numbered 0, 1, ... in order", "rows whose pieces are not their words' + <sep> <cls>",
                 "rows whose piece_word_index is not their words'",
                 "rows of more than max_seq_len - 2 pieces", "sentences not covered from first to last word",
                 "windows that do not move on", "gaps between windows", "overlaps although doc_stride >= window",
                 "sentences whose words are not each scored once",
                 "words not scored in their brute-force best window", "scored words with a wrong label id"):
        print(f"{name} = {bad[name]} (bound 0)")
    assert not any(bad.values())
    print(f"words = {rep['words']}: in several windows {seen['words in several windows']}, best window not the first "
          f"{seen['words whose best window is not their first']} (both > 0 when windows overlap)")
    if doc_stride is None or doc_stride < span:
        assert seen["words in several windows"] > 0 and seen["words whose best window is not their first"] > 0
    if doc_stride is None:
        every, _ = token_classification_features(ex, tok, L, labels, label_all_pieces=True)
        scored_here = np.array([np.isin(pw, wi[wi >= 0]) for pw, wi in zip(every["piece_word_index"],
                                                                             every["word_index"])])
        check("label_all_pieces in windows: labels on every piece of the words scored in that window",
              np.array_equal(every["label_ids"] >= 0, scored_here & (every["piece_word_index"] >= 0)), True)
        check("... and the same words back", word_predictions(every, every["label_ids"]) == gold, True)
    check("label_ids scored only where word_index is",
          np.array_equal(feats["label_ids"] >= 0, feats["word_index"] >= 0), True)
    check("word_predictions(label_ids) round trip", word_predictions(feats, feats["label_ids"]) == gold, True)
    logits = np.eye(len(labels), dtype=np.float32)[np.maximum(feats["label_ids"], 0)]
    check("word_predictions(one-hot logits) round trip", word_predictions(feats, logits) == gold, True)
    width = int(feats["length"].max())
    check("... on rows cropped to their longest length", word_predictions(feats, logits[:, -width:]) == gold, True)
    got = word_values(feats, np.arange(feats["label_ids"].size).reshape(feats["label_ids"].shape))
    check("word_values: one value per word", [len(v) for v in got], [len(e.words) for e in ex])
    with pytest.raises(ValueError):
        word_predictions({k: v[1:] for k, v in feats.items()}, feats["label_ids"][1:])


def test_windows_equal_one_long_window_where_it_fits(tok):
    ex = sentences(4, (30, 45), seed=5)
    labels = token_label_list(ex)
    short, rep_short = token_classification_features(ex, tok, 20, labels)
    long, rep_long = token_classification_features(ex, tok, 256, labels)
    check("windows (short rows, one long row each)", (rep_short["windows"] > len(ex), rep_long["windows"]),
          (True, len(ex)))
    check("same words and tags back", word_predictions(short, short["label_ids"]) ==
          word_predictions(long, long["label_ids"]) == [[labels.index(t) for t in e.tags] for e in ex], True)


# ----------------------------------------------------------------------------------------------------
# Entity spans


def test_entity_spans_and_offsets():
    words = ["Peter", "Blackburn", "visited", "São", "Paulo", "and", "the", "EU", "."]
    tags = ["B-PER", "I-PER", "O", "B-LOC", "E-LOC", "O", "O", "S-ORG", "O"]
    check("spans", entity_spans(words, tags), [("PER", 0, 2), ("LOC", 3, 5), ("ORG", 7, 8)])
    text = " ".join(words)
    spans = entity_offsets(words, tags)
    check("char offsets slice the text", [text[s:e] for _, s, e in spans], ["Peter Blackburn", "São Paulo", "EU"])
    data = text.encode("utf-8")
    spans = entity_offsets(words, tags, unit="bytes")
    check("byte offsets slice the UTF-8 text", [data[s:e].decode() for _, s, e in spans],
          ["Peter Blackburn", "São Paulo", "EU"])
    check("given offsets", entity_offsets(["a", "b"], ["B-X", "I-X"], [(3, 4), (10, 12)]), [("X", 3, 12)])
    check("I- without B- starts an entity", entity_spans(list("abc"), ["O", "I-PER", "I-PER"]), [("PER", 1, 3)])
    check("a type change mid-entity splits it", entity_spans(list("abc"), ["B-PER", "I-LOC", "I-LOC"]),
          [("PER", 0, 1), ("LOC", 1, 3)])
    expect_error(lambda: entity_spans(["a"], ["O", "O"]), "1 words but 2 tags")
    expect_error(lambda: entity_chunks(["O", ""]), "tag 1")


# ----------------------------------------------------------------------------------------------------
# Metrics


def test_metrics_published_and_hand_examples():
    # seqeval's README example: MISC wrong (starts one word early), PER right.
    true = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    m = token_classification_metrics(true, pred)
    check("README example: precision, recall, f1, accuracy", (m["precision"], m["recall"], m["f1"], m["accuracy"]),
          (0.5, 0.5, 0.5, 0.8))
    check("README example: per type", m["per_type"], {
        "MISC": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},
        "PER": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}})
    check("README example: macro / weighted f1", (m["macro"]["f1"], m["weighted"]["f1"]), (0.5, 0.5))
    # BIOES by hand, seqeval's default mode: S- is a one-word entity, E- ends one; B-LOC E-LOC S-LOC is two.
    true = [["S-PER", "O", "B-LOC", "I-LOC", "E-LOC", "O", "S-ORG"]]
    pred = [["S-PER", "O", "B-LOC", "E-LOC", "S-LOC", "O", "B-ORG"]]
    m = token_classification_metrics(true, pred)
    check("BIOES entities (true, predicted, correct)", (m["true_entities"], m["pred_entities"], m["correct_entities"]),
          (3, 4, 2))
    bound = 1e-15
    diffs = [abs(m["precision"] - 2 / 4), abs(m["recall"] - 2 / 3), abs(m["f1"] - 4 / 7), abs(m["accuracy"] - 4 / 7)]
    print(f"BIOES hand example: P {m['precision']} (2/4), R {m['recall']} (2/3), F1 {m['f1']} (4/7), "
          f"accuracy {m['accuracy']} (4/7): max |diff| {max(diffs):.1e} (bound {bound})")
    assert max(diffs) <= bound
    expect_error(lambda: token_classification_metrics([["O"]], [["O", "O"]]), "sentence 0")
    expect_error(lambda: token_classification_metrics([], []), "no sentences")


def test_metrics_equal_seqeval_golden():
    with open(GOLDEN, encoding="utf-8") as f:
        golden = json.load(f)
    cases = golden["cases"]
    worst, worst_case, entity_mismatch = 0.0, None, 0

    def diff(a, b, name):
        nonlocal worst, worst_case
        if isinstance(b, float) and math.isnan(b):
            assert math.isnan(a), name
            return
        d = abs(a - b)
        if d > worst:
            worst, worst_case = d, name

    for case in cases:
        m = token_classification_metrics(case["true"], case["pred"])
        for key in ("precision", "recall", "f1", "accuracy"):
            diff(m[key], case[key], f"{case['name']}.{key}")
        diff(m["macro"]["f1"], case["macro_f1"], f"{case['name']}.macro_f1")
        diff(m["weighted"]["f1"], case["weighted_f1"], f"{case['name']}.weighted_f1")
        if "per_type" in case:
            assert sorted(m["per_type"]) == sorted(case["per_type"]), case["name"]
            for type_, want in case["per_type"].items():
                got = m["per_type"][type_]
                assert got["support"] == want["support"], (case["name"], type_)
                for key in ("precision", "recall", "f1"):
                    diff(got[key], want[key], f"{case['name']}.{type_}.{key}")
            for avg in ("macro", "weighted"):
                for key in ("precision", "recall", "f1"):
                    diff(m[avg][key], case[avg][key], f"{case['name']}.{avg}.{key}")
        for side in ("true", "pred"):
            flat = [t for s in case[side] for t in s + ["O"]]
            got = [[t, s, e - 1] for t, s, e in entity_chunks(flat)]
            entity_mismatch += got != case[f"{side}_entities"]
    kinds = sorted({c["name"].split("_", 2)[-1] if c["name"].startswith("random") else "hand" for c in cases})
    print(f"seqeval {golden['seqeval']} golden cases = {len(cases)} ({kinds}); max |diff| = {worst:.3e} at "
          f"{worst_case} (bound 1e-12); entity lists differing = {entity_mismatch} (bound 0)")
    assert len(cases) >= 150
    assert worst <= 1e-12 and entity_mismatch == 0
