"""xlnet_tf.data.graph_words: split_words against a plain-Python splitter with the same rule, chunk_entities
against xlnet_tf.metrics.entity_chunks, both eagerly, inside a tf.function and in a SavedModel whose ops are
all in export/ops.py's allowlist."""

import random
import sys
import unicodedata

import numpy as np
import pydoc_data.topics
import tensorflow as tf

from xlnet_tf.data import graph_words as gw
from xlnet_tf.data.graph_features import pad_to_longest  # not RaggedTensor.to_tensor: its op is not allowlisted
from xlnet_tf.metrics import entity_chunks

# ----------------------------------------------------------------------------------------------------
# The plain-Python reference of split_words's rule

_ASCII_PUNCT = set(range(33, 48)) | set(range(58, 65)) | set(range(91, 97)) | set(range(123, 127))


def _is_punct(ch):
    """BERT's basic-tokenizer punctuation: Unicode category P*, or the ASCII symbol ranges."""
    return ord(ch) in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def reference_words(text):
    """Words of one ``str``: a list of ``(word, byte_start, byte_end)`` (UTF-8 byte offsets)."""
    words, current, start, pos = [], [], 0, 0
    for ch in text + " ":
        size = len(ch.encode("utf-8"))
        if ch.isspace() or _is_punct(ch):
            if current:
                words.append(("".join(current), start, pos))
                current = []
            if _is_punct(ch):
                words.append((ch, pos, pos + size))
        else:
            if not current:
                start = pos
            current.append(ch)
        pos += size
    return words


def graph_words(texts, fn=gw.split_words):
    """``split_words`` (or ``fn``) over a list of str -> per text a list of ``(word, byte_start, byte_end)``."""
    words, starts, ends = fn(tf.constant([t.encode("utf-8") for t in texts], tf.string))
    return [[(w.decode("utf-8"), s, e) for w, s, e in zip(ws, ss, es)]
            for ws, ss, es in zip(words.to_list(), starts.to_list(), ends.to_list())]


def check(name, value, bound):
    """Print one checked figure with its bound; return whether it holds."""
    print(f"{name}: {value} (bound {bound})")
    return value == bound


# ----------------------------------------------------------------------------------------------------
# Texts

_SPACES = ["\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u1680",
           *[chr(c) for c in range(0x2000, 0x200B)], "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]

_HANDWRITTEN = [
    "Hello, world! It's 3.5 km.",
    "", " ", "   ", "\t\n", "a", ".", "...", "a.b", "  leading", "trailing  ", "multiple    spaces  here",
    "e-mail: someone@example.com (maybe?) [x] {y} <z> ~!#$%^&*_+=|\\/`",
    "Café naïve façade — “quoted” ‘single’ «guillemets» ¿qué? ¡sí!",
    "東京は日本の首都です。「こんにちは」、世界！",
    "emoji 🙂👍🏽 and 👨‍👩‍👧 families 🇫🇷",
    "combining e\u0301 a\u0308 n\u0303 and \u0915\u093f\u0928\u094d\u0926\u0940",
    "Arabic: مرحبا، كيف حالك؟ Hebrew: שלום׃",
    "math ∑ x² ≤ 10 € $ £ ¥ ° ± × ÷",
    "tabs\tand\nnewlines\r\nand\x0bvertical\x0cfeeds",
    "separators\x1cfile\x1dgroup\x1erecord\x1funit",
    "nel\x85nbsp\xa0ogham\u1680em\u2003thin\u2009line\u2028para\u2029nnbsp\u202fmath\u205fideo\u3000end",
    "zero width\u200bspace\u200cnon\u200djoiner\ufeffbom",
    "".join(_SPACES),
    "x".join(_SPACES),
    "a" * 300 + " " + "b",
]


def _topic_texts():
    """CPython's pydoc topics: every topic and its paragraphs (a few hundred texts)."""
    topics = list(pydoc_data.topics.topics.values())
    paragraphs = [p for t in topics for p in t.split("\n\n") if p.strip()]
    return topics + paragraphs[:400]


def _random_texts(n, seed=0):
    """``n`` random strings drawn from letters, digits, punctuation, spaces and non-ASCII characters."""
    pool = list("abcXYZ019.,;:!?'\"()-_/@#") + _SPACES + [" "] * 6 + list("éß漢字🙂\u0301\u0308¿«»—、。")
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randrange(0, 40))) for _ in range(n)]


# ----------------------------------------------------------------------------------------------------
# split_words


def test_character_classes_match_python_on_every_code_point():
    codepoints = np.arange(sys.maxunicode + 1, dtype=np.int32)
    got = gw._classes(tf.constant(codepoints)).numpy()
    want = np.array([gw.SPACE if chr(c).isspace() else gw.PUNCT if _is_punct(chr(c)) else gw.WORD
                     for c in codepoints], np.int32)
    bounds, _ = gw._class_table()
    print(f"class table: {len(bounds)} runs; {int((want == gw.SPACE).sum())} space, "
          f"{int((want == gw.PUNCT).sum())} punctuation code points")
    assert check(f"classes identical on {len(codepoints)} code points", bool((got == want).all()), True)


def test_split_words_matches_reference():
    groups = {"handwritten": _HANDWRITTEN, "pydoc topics": _topic_texts(), "random": _random_texts(2000),
              "whitespace": list(_SPACES) + [f"{s}a{s}{s}b{s}" for s in _SPACES]}
    ok = True
    for name, texts in groups.items():
        got, want = graph_words(texts), [reference_words(t) for t in texts]
        n_words = sum(len(w) for w in want)
        same = sum(g == w for g, w in zip(got, want))
        ok &= check(f"{name}: words, starts, ends identical on {same} of {len(texts)} texts ({n_words} words)",
                    same, len(texts))
    assert ok


def test_split_words_examples_and_batch_of_mixed_lengths():
    got = graph_words(["Hello, world! It's 3.5 km.", "", "  ", " ab  c "])
    want = [[("Hello", 0, 5), (",", 5, 6), ("world", 7, 12), ("!", 12, 13), ("It", 14, 16), ("'", 16, 17),
             ("s", 17, 18), ("3", 19, 20), (".", 20, 21), ("5", 21, 22), ("km", 23, 25), (".", 25, 26)],
            [], [], [("ab", 1, 3), ("c", 5, 6)]]
    assert check("hand-checked example identical", got == want, True)
    words, starts, ends = gw.split_words(tf.constant([], tf.string))
    assert check("empty batch: rows", int(words.nrows()), 0)
    assert starts.dtype == tf.int64 and ends.dtype == tf.int64 and words.dtype == tf.string


def test_split_words_in_tf_function():
    fn = tf.function(gw.split_words, input_signature=[tf.TensorSpec([None], tf.string)])
    texts = _HANDWRITTEN + _random_texts(300, seed=1)
    same = sum(g == w for g, w in zip(graph_words(texts, fn), [reference_words(t) for t in texts]))
    assert check(f"tf.function: identical on {same} of {len(texts)} texts", same, len(texts))


def test_split_words_invalid_utf8():
    """Invalid bytes decode as U+FFFD (a word character): they stay inside their word, offsets are bytes."""
    words, starts, ends = gw.split_words(tf.constant([b"ab\xffcd ef", b"\xff", b"x \xe4\xb8", b"\xc3(a)"]))
    print("invalid UTF-8:", words.to_list(), starts.to_list(), ends.to_list())
    assert check("b'ab\\xffcd ef' words", words.to_list()[0], [b"ab\xffcd", b"ef"])
    assert check("b'ab\\xffcd ef' starts, ends", (starts.to_list()[0], ends.to_list()[0]), ([0, 6], [5, 8]))
    assert check("b'\\xff' words", words.to_list()[1], [b"\xff"])
    assert check("b'x \\xe4\\xb8' (truncated) words", words.to_list()[2], [b"x", b"\xe4\xb8"])
    assert check("b'\\xc3(a)' words", words.to_list()[3], [b"\xc3", b"(", b"a", b")"])
    raw = [b"ab\xffcd ef", b"\xc0\x80 x\xed\xa0\x80y", "a\ufffdb c\ufffd".encode(), b"\xff\xfe, \x80z", b"ok \xe2\x82"]
    words, starts, ends = gw.split_words(tf.constant(raw))
    sliced = all(w == t[s:e] for t, ws, ss, es in zip(raw, words.to_list(), starts.to_list(), ends.to_list())
                 for w, s, e in zip(ws, ss, es))
    print("invalid UTF-8 and U+FFFD:", words.to_list())
    assert check(f"every word is text[start:end] (bytes) on {len(raw)} texts with invalid bytes", sliced, True)
    assert check("words of b'\\xff\\xfe, \\x80z'", words.to_list()[3], [b"\xff\xfe", b",", b"\x80z"])


# ----------------------------------------------------------------------------------------------------
# chunk_entities

_LABEL_SETS = {
    "BIO": ["O", "B-LOC", "I-LOC", "B-PER", "I-PER", "B-MISC", "I-MISC"],
    "IOBES": ["O", "B-LOC", "I-LOC", "E-LOC", "S-LOC", "B-PER", "I-PER", "E-PER", "S-PER"],
    "malformed": ["O", "I-LOC", "B-PER", "E-LOC", "I-PER", "S-X", "B", "I", "E-PER", "PER", "."],
}


def _random_tags(n_labels, n, rng):
    """``n`` random tag-id sequences of lengths 0-12 (list of lists of int)."""
    return [rng.integers(0, n_labels, size=rng.integers(0, 13)).tolist() for _ in range(n)]


def _graph_chunks(out):
    """chunk_entities's output -> per sentence a list of ``(type, start, end)``."""
    types = out["types"]
    return [[(types[t], s, e) for t, s, e in zip(ts, ss, es)]
            for ts, ss, es in zip(out["type_id"].to_list(), out["start"].to_list(), out["end"].to_list())]


def test_chunk_entities_matches_entity_chunks():
    rng = np.random.default_rng(7)
    ok = True
    for name, labels in _LABEL_SETS.items():
        seqs = _random_tags(len(labels), 2000, rng)
        want = [entity_chunks([labels[i] for i in s]) for s in seqs]
        fn = tf.function(lambda t, labels=labels: {k: v for k, v in gw.chunk_entities(t, labels).items()
                                                   if k != "types"},
                         input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)])
        same_eager = same_fn = 0
        for lo in range(0, len(seqs), 500):
            batch = tf.ragged.constant(seqs[lo:lo + 500], tf.int64, ragged_rank=1)
            eager = gw.chunk_entities(batch, labels)
            traced = dict(fn(batch), types=eager["types"])
            same_eager += sum(g == w for g, w in zip(_graph_chunks(eager), want[lo:lo + 500]))
            same_fn += sum(g == w for g, w in zip(_graph_chunks(traced), want[lo:lo + 500]))
        n_ent = sum(len(w) for w in want)
        n_empty = sum(not s for s in seqs)
        print(f"{name}: {len(seqs)} sequences ({n_empty} empty), {n_ent} entities")
        ok &= check(f"{name}: eager chunks identical on sequences", same_eager, len(seqs))
        ok &= check(f"{name}: tf.function chunks identical on sequences", same_fn, len(seqs))
    assert ok


def test_chunk_entities_examples():
    labels = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
    out = gw.chunk_entities(tf.ragged.constant([[1, 3, 0, 2], [], [4, 4], [0]]), labels)
    assert check("types", out["types"], ["LOC", "PER"])
    assert check("chunks", _graph_chunks(out), [[("LOC", 0, 2), ("PER", 3, 4)], [], [("PER", 0, 2)], []])
    out = gw.chunk_entities(tf.ragged.constant([[0, 1]], tf.int32, ragged_rank=1), [".", "I"])
    assert check("'.', 'I' (a chunk with no start: it begins at the sentence's first word)",
                 _graph_chunks(out), [entity_chunks([".", "I"])])
    out = gw.chunk_entities(tf.ragged.constant([[], []], tf.int64, ragged_rank=1), labels)
    assert check("all-empty batch", _graph_chunks(out), [[], []])


# ----------------------------------------------------------------------------------------------------
# SavedModel


_LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER", "E-PER", "S-LOC"]


class _Entities(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, text):
        words, starts, ends = gw.split_words(text)
        tags = words.with_flat_values(tf.cast(tf.strings.length(words.flat_values), tf.int64) % len(_LABELS))
        chunks = gw.chunk_entities(tags, _LABELS)
        out = {"words": pad_to_longest(words, ""), "starts": pad_to_longest(starts, -1),
               "ends": pad_to_longest(ends, -1),
               "n_words": words.row_lengths(), "n_chunks": chunks["type_id"].row_lengths()}
        out.update({k: pad_to_longest(chunks[k], -1) for k in ("type_id", "start", "end")})
        return out


def _eager(text):
    words, starts, ends = gw.split_words(text)
    tags = [[len(w) % len(_LABELS) for w in row] for row in words.to_list()]
    chunks = gw.chunk_entities(tf.ragged.constant(tags, tf.int64, ragged_rank=1), _LABELS)
    return words, starts, ends, tags, chunks


def test_saved_model_ops_allowed_and_results(tmp_path):
    from xlnet_tf.export import ops

    path = str(tmp_path / "words")
    tf.saved_model.save(_Entities(), path)
    bad = ops.disallowed_ops(path)
    print("SavedModel ops:", sorted(ops.saved_model_ops(path)))
    assert check("disallowed ops", bad, [])
    loaded = tf.saved_model.load(path)
    texts = _HANDWRITTEN + _random_texts(200, seed=2)
    text = tf.constant([t.encode("utf-8") for t in texts])
    served = {k: v.numpy() for k, v in loaded(text).items()}
    words, starts, ends, tags, chunks = _eager(text)
    same_words = same_chunks = 0
    for b in range(len(texts)):
        n, m = served["n_words"][b], served["n_chunks"][b]
        same_words += (served["words"][b, :n].tolist() == words[b].numpy().tolist()
                       and served["starts"][b, :n].tolist() == starts[b].numpy().tolist()
                       and served["ends"][b, :n].tolist() == ends[b].numpy().tolist())
        want = entity_chunks([_LABELS[t] for t in tags[b]])
        got = [(chunks["types"][t], s, e) for t, s, e in
               zip(served["type_id"][b, :m], served["start"][b, :m], served["end"][b, :m])]
        same_chunks += got == want
    n_ent = sum(len(r) for r in chunks["type_id"].to_list())
    assert check("SavedModel words identical to eager on texts", same_words, len(texts))
    assert check(f"SavedModel chunks identical to entity_chunks on texts ({n_ent} entities)", same_chunks,
                 len(texts))
