"""Words and entity chunks as TensorFlow graph ops, for token-classification inputs and outputs.

A served token-classification model takes raw text, splits it into words, tags each word and returns the
entities. These two steps are here, in core TensorFlow ops only (no Python loops over data, no
``py_function``, nothing outside ``export/ops.py``'s ``ALLOWED_OPS``), so they run eagerly, inside a
``tf.function`` and in an exported SavedModel, and give what the Python code gives:

* ``split_words(text)``: text ``[B]`` -> words with their UTF-8 byte offsets. A word is a maximal run of
  characters that are neither whitespace (``str.isspace``) nor punctuation (BERT's basic-tokenizer rule:
  Unicode category ``P*`` or ASCII 33-47, 58-64, 91-96, 123-126); every punctuation character is a word
  by itself; whitespace only separates words.
* ``chunk_entities(tag_ids, label_names)``: one tag id per word -> the entity chunks ``(type, start,
  end)`` exactly as ``xlnet_tf.metrics.entity_chunks`` (seqeval's default mode) reads the tags, for any
  tag scheme (BIO / IOB2 / IOBES / plain tags, malformed sequences included).

The character classes and the tag rules are turned into small constant tables in Python (once) and
looked up in the graph with ``search_sorted`` / ``tf.gather``.

Public API: ``split_words``, ``chunk_entities``.
"""

import functools
import sys
import unicodedata

import numpy as np
import tensorflow as tf

from xlnet_tf.metrics import chunk_ends, chunk_starts, tag_parts
from xlnet_tf.tokenization import element_index, row_ids, search_sorted, substrings

__all__ = ["split_words", "chunk_entities"]

# Character classes of split_words.
WORD, SPACE, PUNCT = 0, 1, 2
_ASCII_PUNCT = frozenset(list(range(33, 48)) + list(range(58, 65)) + list(range(91, 97)) + list(range(123, 127)))


# ----------------------------------------------------------------------------------------------------
# Character classes


def _char_class(cp):
    """Class (WORD / SPACE / PUNCT) of one code point (Python int)."""
    ch = chr(cp)
    if ch.isspace():
        return SPACE
    if cp in _ASCII_PUNCT or unicodedata.category(ch).startswith("P"):
        return PUNCT
    return WORD


@functools.lru_cache(maxsize=None)
def _class_table():
    """The classes as runs over all code points: ``(bounds, classes)``, two numpy int arrays ``[R]``;
    run ``r`` covers code points ``bounds[r] .. bounds[r + 1] - 1`` (the last one up to sys.maxunicode),
    all of class ``classes[r]``; ``bounds[0] == 0`` and neighbouring runs differ in class."""
    classes = np.fromiter((_char_class(cp) for cp in range(sys.maxunicode + 1)), np.int32, sys.maxunicode + 1)
    change = np.flatnonzero(np.diff(classes)) + 1
    bounds = np.concatenate([[0], change]).astype(np.int32)
    return bounds, classes[bounds]


def _classes(codepoints):
    """Class of every code point, int32 tensor ``[N]`` -> int32 ``[N]`` (one searchsorted into the runs)."""
    bounds, classes = _class_table()
    run = search_sorted(tf.constant(bounds), codepoints, side="right", out_type=tf.int32) - 1
    return tf.gather(tf.constant(classes), tf.maximum(run, 0))


# ----------------------------------------------------------------------------------------------------
# Words


def _char_byte_ends(byte_starts, byte_len):
    """Byte end (exclusive) of every character: ragged int64 ``[B, None]`` of its start offsets and int64
    ``[B]`` byte lengths -> int64 ``[N]`` (the next character's start, or the string's length)."""
    starts = byte_starts.values
    rows = row_ids(byte_starts)
    n = tf.size(starts, out_type=tf.int64)
    following = tf.concat([starts[1:], tf.zeros([1], tf.int64)], 0)[:n]
    last = tf.range(n) + 1 >= tf.gather(byte_starts.row_limits(), rows)
    return tf.where(last, tf.gather(byte_len, rows), following)


def _word_edges(classes, first, last):
    """Whether each character begins / ends a word: int32 classes ``[N]``, bool ``first`` / ``last`` ``[N]``
    (first / last character of its text) -> two bool ``[N]``."""
    n = tf.size(classes)
    prev = tf.concat([tf.fill([1], SPACE), classes[:-1]], 0)[:n]
    following = tf.concat([classes[1:], tf.fill([1], SPACE)], 0)[:n]
    solid = tf.not_equal(classes, SPACE)
    alone = tf.equal(classes, PUNCT)
    begins = solid & (alone | first | tf.not_equal(prev, WORD))
    ends = solid & (alone | last | tf.not_equal(following, WORD))
    return begins, ends


def _word_strings(text, codepoints, solid, begins, word_rows, start_bytes, end_bytes):
    """The words' strings: tf.string ``[W]``.

    Takes the texts ``[B]``, the flat code points ``[N]``, which characters are in a word (``solid``) and
    which begin one (``begins``, bool ``[N]``), and each word's text and byte offsets (int64 ``[W]``).
    A word is its code points encoded back to UTF-8 (the same bytes, for valid UTF-8, and linear in the
    text); the words with a U+FFFD, which may stand for invalid bytes, are sliced from their text instead
    (``tokenization.substrings``, linear too).
    """
    n_words = tf.size(start_bytes, out_type=tf.int64)
    word_of = tf.cumsum(tf.cast(begins, tf.int64)) - 1
    in_word = tf.reshape(tf.where(solid), [-1])
    word_cps = tf.gather(codepoints, in_word)
    word_ids = tf.gather(word_of, in_word)
    encoded = tf.strings.unicode_encode(
        tf.RaggedTensor.from_value_rowids(word_cps, word_ids, nrows=n_words, validate=False), "UTF-8")
    replaced = tf.math.unsorted_segment_max(tf.cast(tf.equal(word_cps, 0xFFFD), tf.int32), word_ids, n_words)
    redo = tf.where(replaced > 0)
    redo_flat = tf.reshape(redo, [-1])
    starts = tf.gather(start_bytes, redo_flat)
    sliced = substrings(text, tf.gather(word_rows, redo_flat), starts, tf.gather(end_bytes, redo_flat) - starts)
    return tf.tensor_scatter_nd_update(encoded, redo, sliced)


def split_words(text):
    """Split UTF-8 texts into words.

    Args:
      text: tf.string ``[B]``.
    Returns:
      ``(words, starts, ends)``: ragged ``[B, None]`` tf.string words and ragged ``[B, None]`` int64 byte
      offsets, so ``text[b][starts[b, k]:ends[b, k]]`` (bytes) is ``words[b, k]``. An empty or all-space
      text gives an empty row. Invalid UTF-8 is decoded with ``errors="replace"``: each invalid byte
      (sequence) is one U+FFFD character, a word character, so its bytes stay inside the word.
    """
    text = tf.convert_to_tensor(text, tf.string)
    codepoints, byte_starts = tf.strings.unicode_decode_with_offsets(text, "UTF-8", errors="replace")
    byte_starts = tf.cast(byte_starts, tf.int64)
    byte_len = tf.cast(tf.strings.length(text), tf.int64)
    rows = row_ids(byte_starts)
    index = element_index(rows)
    first = tf.equal(index, tf.gather(byte_starts.row_starts(), rows))
    last = tf.equal(index + 1, tf.gather(byte_starts.row_limits(), rows))
    classes = _classes(codepoints.values)
    begins, ends = _word_edges(classes, first, last)
    begin_at = tf.reshape(tf.where(begins), [-1])
    end_at = tf.reshape(tf.where(ends), [-1])
    word_rows = tf.gather(rows, begin_at)
    start_bytes = tf.gather(byte_starts.values, begin_at)
    end_bytes = tf.gather(_char_byte_ends(byte_starts, byte_len), end_at)
    words = _word_strings(text, codepoints.values, tf.not_equal(classes, SPACE), begins, word_rows,
                          start_bytes, end_bytes)
    nrows = tf.shape(text, out_type=tf.int64)[0]

    def ragged(values):
        return tf.RaggedTensor.from_value_rowids(values, word_rows, nrows=nrows, validate=False)

    return ragged(words), ragged(start_bytes), ragged(end_bytes)


# ----------------------------------------------------------------------------------------------------
# Entity chunks


@functools.lru_cache(maxsize=None)
def _chunk_tables(label_names):
    """The tag rules of ``metrics.entity_chunks`` as tables over a tuple of ``label_names`` (L labels).

    Returns ``(ends, starts, type_ids, types)``: ``ends`` / ``starts`` bool numpy ``[(L + 1) * (L + 1)]``,
    entry ``p * (L + 1) + t``: whether a chunk ends / starts between the previous label ``p`` and the label
    ``t``, where index ``L`` is the sentence boundary (as the previous label: ``entity_chunks``'s initial
    ("O", ""); as the label: its final "O"); ``type_ids`` int64 ``[L + 1]`` (the type id of each label, -1 for
    the types no chunk can have); ``types`` the list of type names (index = type id).
    """
    parts = [tag_parts(name) for name in label_names]
    prev_parts = parts + [("O", "")]
    cur_parts = parts + [tag_parts("O")]
    ends = np.array([chunk_ends(p, t, pt, tt) for p, pt in prev_parts for t, tt in cur_parts], bool)
    starts = np.array([chunk_starts(p, t, pt, tt) for p, pt in prev_parts for t, tt in cur_parts], bool)
    types = []
    for prefix, type_ in parts:  # a chunk ends only after a tag that is neither "O" nor "."
        if prefix not in ("O", ".") and type_ not in types:
            types.append(type_)
    type_ids = np.array([types.index(t) if t in types else -1 for _, t in parts] + [-1], np.int64)
    return ends, starts, type_ids, types


def _with_boundaries(tag_ids, boundary):
    """Sentences laid end to end, each followed by ``boundary``: ragged int64 ``[B, None]`` ->
    ``(labels, local, offsets, sentence)``: int64 ``[N + B]`` labels, each one's index inside its sentence,
    each sentence's first flat position ``[B]`` and each position's sentence ``[N + B]``."""
    lengths = tag_ids.row_lengths()
    padded = tf.RaggedTensor.from_row_lengths(
        tf.zeros([tf.reduce_sum(lengths + 1)], tf.int64), lengths + 1, validate=False)
    sentence = padded.value_rowids()
    offsets = padded.row_starts()
    flat = element_index(sentence)
    local = flat - tf.gather(offsets, sentence)
    values = tf.concat([tag_ids.values, tf.fill([1], tf.constant(boundary, tf.int64))], 0)
    labels = tf.where(local < tf.gather(lengths, sentence), tf.gather(values, flat - sentence),
                      tf.constant(boundary, tf.int64))
    return labels, local, offsets, sentence


def chunk_entities(tag_ids, label_names):
    """Entity chunks of tagged sentences, as ``xlnet_tf.metrics.entity_chunks`` reads them (seqeval's
    default mode), in order.

    Args:
      tag_ids: ragged int ``[B, None]`` (a ``tf.RaggedTensor``), one tag per word, indexes into
        ``label_names``.
      label_names: Python list of tag strings (e.g. ``["O", "B-LOC", "I-LOC"]``), any tag scheme.
    Returns:
      dict of ragged ``[B, None]`` int64 ``type_id``, ``start`` (first word) and ``end`` (word index,
      EXCLUSIVE), and ``types``: the Python list of type names (index = ``type_id``).
    """
    n_labels = len(label_names)
    ends_table, starts_table, type_ids, types = _chunk_tables(tuple(label_names))
    tag_ids = tf.cast(tag_ids, tf.int64)
    labels, local, offsets, sentence = _with_boundaries(tag_ids, n_labels)
    n = tf.size(labels)
    prev = tf.where(tf.equal(local, 0), tf.constant(n_labels, tf.int64),
                    tf.concat([tf.fill([1], tf.constant(n_labels, tf.int64)), labels[:-1]], 0)[:n])
    pair = prev * (n_labels + 1) + labels
    ends = tf.gather(tf.constant(ends_table), pair)
    # A chunk begins at its last start before the end, else (no start yet) at the sentence's first word.
    anchors = tf.gather(tf.constant(starts_table), pair) | tf.equal(local, 0)
    anchor_at = tf.reshape(tf.where(anchors), [-1])
    end_at = tf.reshape(tf.where(ends), [-1])
    before = tf.gather(tf.cumsum(tf.cast(anchors, tf.int64), exclusive=True), end_at)  # anchors < end
    begin_at = tf.gather(anchor_at, before - 1)
    rows = tf.gather(sentence, end_at)
    base = tf.gather(offsets, rows)
    type_id = tf.gather(tf.constant(type_ids), tf.gather(prev, end_at))
    nrows = tag_ids.nrows()

    def ragged(values):
        return tf.RaggedTensor.from_value_rowids(values, rows, nrows=nrows, validate=False)

    return {"type_id": ragged(type_id), "start": ragged(begin_at - base), "end": ragged(end_at - base),
            "types": list(types)}
