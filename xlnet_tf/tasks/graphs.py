"""The traced pieces that every task's export signatures share: text -> features on the CPU, the model, the
signature helpers (`signature_function`, input specs, batch and width checks), tf.Example parsing, and the bounds
a request's text is cut to before it is tokenized.

Imported by the tasks' `serving_signatures` and by `xlnet_tf.export.signatures` (never by training: it
imports TensorFlow). Every ``tf.function`` is traced with ``jit_compile=False`` (no XLA in served functions).

Bounded requests. An export is served without a server of ours in front of it (TensorFlow Serving), so its
signatures bound what one request costs themselves:

* every text input is cut to ``pieces x piece_bytes`` bytes (`cut_text`) before it is tokenized: ``pieces`` the
  most pieces a signature keeps of that input (`ExportTask.text_pieces`), from its start, or from its end where the
  last pieces are kept (a language model's prompt, RACE's question + option); ``piece_bytes`` the most bytes of
  ordinary text one piece is read from (`piece_bytes`). A text within its bound is not changed. A longer text is
  answered exactly as before whenever the whitespace-separated words holding its kept pieces lie inside the
  bound: SentencePiece's pieces never span whitespace and the preprocessing of a word does not look past the
  whitespace around it, so the cut changes nothing before the word it falls in (after it, keeping the end). Not
  covered: a kept piece inside the word the cut falls in, the same only where SentencePiece segments the beginning
  (the end) of that word as it segments the whole word (ordinary long words; not always runs of one repeated
  character, whose best segmentation depends on the run's length); and, keeping the end, segmentation ties in the
  part kept (runs of one repeated character again), which SentencePiece breaks by the float32 rounding of the
  score of everything before them, which the cut changes;
* the id signatures refuse inputs wider than the export's rows (`checked_ids`) before the model reads them.
"""

import tensorflow as tf

from xlnet_tf import heads
from xlnet_tf.data import graph_features as gf
from xlnet_tf.data import packing
from xlnet_tf.data.buckets import PAD_MULTIPLE
from xlnet_tf.tasks.base import ENCODER_INPUTS

JIT = False  # no XLA in served functions
UTF8_MAX_BYTES = 4  # the most bytes one character takes in UTF-8


def signature_function(signature):
    """A decorator: a served ``tf.function`` of `signature` (a list of TensorSpecs)."""
    return tf.function(input_signature=signature, jit_compile=JIT, autograph=False)


def text_spec(name):
    """A text input: string ``[B]``."""
    return tf.TensorSpec([None], tf.string, name=name)


def ids_spec(names, choices=None):
    """``predict_ids`` inputs: int32 ``[B, T]`` (``[B, C, T]``), any T up to the export's max_seq_len."""
    shape = [None, None] if choices is None else [None, choices, None]
    return [tf.TensorSpec(shape, tf.int32, name=n) for n in names]


def char_to_byte_offsets(strings, char_offsets):
    """Code point offsets ``[B]`` (one per string; -1 = none) -> UTF-8 byte offsets ``[B]`` int64.

    An offset equal to the string's length in characters maps to its byte length; -1 maps to 0.
    """
    _, starts = tf.strings.unicode_decode_with_offsets(strings, "UTF-8", errors="replace")
    n_chars = starts.row_lengths()
    char_offsets = tf.cast(char_offsets, tf.int64)
    inside = (char_offsets >= 0) & (char_offsets < n_chars)
    index = tf.where(inside, starts.row_starts() + char_offsets, tf.size(starts.values, out_type=tf.int64))
    at = tf.gather(tf.concat([starts.values, [0]], 0), index)  # the appended 0 serves the rows left out
    byte_len = tf.cast(tf.strings.length(strings), tf.int64)
    return tf.where(inside, at, tf.where(char_offsets >= n_chars, byte_len, tf.zeros_like(byte_len)))


def same_batch(*tensors):
    """Fail (InvalidArgument) when the inputs of one request do not have the same batch size; returns the checks."""
    n = tf.shape(tensors[0])[0]
    return [tf.debugging.assert_equal(tf.shape(t)[0], n, message="all inputs of a request need the same batch size")
            for t in tensors[1:]]


def checked_ids(ids, length, segment_len=None):
    """The id inputs ``ids`` (a list of int tensors ``[B, ..., T]``), each passed on only once every check has passed:
    they have the same batch size and the same width T, T is at most ``length`` (the export's max_seq_len, or its
    document width) and, for long documents, whole segments of ``segment_len``. A failed check fails the request
    (InvalidArgument) before anything that reads the returned tensors runs: the model never sees a row wider than
    the export's."""
    width = tf.shape(ids[0])[-1]
    checks = same_batch(*ids) + [
        tf.debugging.assert_less_equal(width, length, message=f"input_ids may have at most {length} positions")]
    if segment_len:
        checks.append(tf.debugging.assert_equal(
            width % segment_len, 0,
            message=f"input_ids of a long-document model need whole segments of {segment_len} positions (left-padded)"))
    checks += [tf.debugging.assert_equal(tf.shape(t)[-1], width,
                                         message="all id inputs need the same number of positions") for t in ids[1:]]
    with tf.control_dependencies(checks):
        return [tf.identity(t) for t in ids]


def piece_bytes(tokenizer):
    """The most bytes of ordinary text one piece is read from: 4 (the most bytes of a character in UTF-8) x the
    characters of the tokenizer's longest piece (``XLNetTokenizer.longest_piece``; at most 16 in a vocabulary
    trained with SentencePiece's defaults).

    Each character of a piece comes from its own character of the text: the preprocessing maps a character to zero
    or more characters (NFKD and case mapping expand, never join) and a piece's leading ``▁`` stands for the one
    space the whitespace before it became. Text read beyond that is what makes a text not "ordinary": a whitespace
    run (one ``▁``), combining marks (dropped: read with the character before them), characters that
    SentencePiece's NFKC joins (Hangul jamo), and runs of characters outside the vocabulary (one ``<unk>`` piece)."""
    return UTF8_MAX_BYTES * tokenizer.longest_piece


def _continuation_bytes(windows):
    """Which bytes of ``windows`` (string ``[N]``, at most 4 bytes each) are UTF-8 continuation bytes (10xxxxxx):
    bool ``[N, 4]``, False past a window's end."""
    values = tf.strings.unicode_decode(windows, "ISO-8859-1")  # one code point per byte: its value
    dense = gf.pad_rows(values, UTF8_MAX_BYTES, 0)
    return (dense >= 0x80) & (dense < 0xC0)


def cut_text(text, max_bytes, keep_last=False):
    """Each string of ``text`` (string, any shape -> the same shape) cut to at most ``max_bytes`` bytes (a Python int
    >= 4) at a character boundary: its first bytes, up to the last boundary at or before ``max_bytes``, or with
    ``keep_last`` its last bytes, from the first boundary at or after ``len - max_bytes``. A boundary is a byte that
    is not a UTF-8 continuation byte: no character is split, and the cut text decodes to the characters the whole
    text has there (an invalid byte is one U+FFFD either way). A string of at most ``max_bytes`` bytes is returned as
    it is. Reads 4 bytes of a longer string besides those it keeps."""
    if max_bytes < UTF8_MAX_BYTES:
        raise ValueError(f"max_bytes must be at least {UTF8_MAX_BYTES}, got {max_bytes}")
    flat = tf.reshape(text, [-1])
    length = tf.strings.length(flat)
    over = length > max_bytes
    # the 4 bytes where the cut falls: from len - max_bytes on (keep_last), or up to max_bytes
    edge = tf.maximum(length - max_bytes, 0) if keep_last else tf.minimum(length, max_bytes - UTF8_MAX_BYTES + 1)
    boundary = ~_continuation_bytes(tf.strings.substr(flat, edge, tf.fill(tf.shape(edge), UTF8_MAX_BYTES)))
    at = tf.range(UTF8_MAX_BYTES)
    last = UTF8_MAX_BYTES - 1
    if keep_last:  # four continuation bytes: the last one is past any character that reaches into the window
        start = tf.where(over, edge + last - tf.reduce_max(tf.where(boundary, last - at, 0), axis=1), 0)
        cut = tf.strings.substr(flat, start, length - start)
    else:  # four continuation bytes: the one at max_bytes is in no character
        found = tf.reduce_max(tf.where(boundary, at, -1), axis=1)
        end = tf.where(over, edge + tf.where(found < 0, last, found), length)
        cut = tf.strings.substr(flat, tf.zeros_like(end), end)
    return tf.reshape(cut, tf.shape(text))


def limits_record(text_pieces, tokenizer, ids_width=None):
    """xlnet_export.json's ``limits``: ``piece_bytes``, ``text_inputs`` {input: {``bytes`` the most a signature
    tokenizes, ``keep`` "first" / "last" (which end of a longer text is read), ``pieces`` the most pieces kept}} from
    ``text_pieces`` ({input: (pieces, "first" or "last")}, ``ExportTask.text_pieces``), and ``ids_width``: the widest
    input ``predict_ids`` takes (None: no id signature)."""
    per_piece = piece_bytes(tokenizer)
    return {"piece_bytes": per_piece, "ids_width": ids_width,
            "text_inputs": {name: {"bytes": pieces * per_piece, "keep": end, "pieces": pieces}
                            for name, (pieces, end) in sorted(text_pieces.items())}}


def parse_text_examples(serialized, feature_names, read):
    """Serialized tf.Examples ``[B]`` -> one string ``[B]`` per name of ``feature_names``: what ``read(text, name)``
    (``Graphs.cut``) reads of each Example's bytes feature of that name, one value of UTF-8 text. A missing feature,
    another type or count, or text read that is not UTF-8 fails the request (InvalidArgument naming the feature)."""
    with tf.device("/cpu:0"):
        parsed = tf.io.parse_example(serialized, {name: tf.io.FixedLenFeature([], tf.string)
                                                  for name in feature_names})
        parsed = {name: read(parsed[name], name) for name in feature_names}
        for name in feature_names:
            text = parsed[name]
            roundtrip = tf.strings.unicode_encode(tf.strings.unicode_decode(text, "UTF-8", errors="replace"),
                                                  "UTF-8")
            bad = tf.where(tf.not_equal(roundtrip, text))[:, 0]
            tf.debugging.Assert(tf.equal(tf.size(bad), 0),
                                [f"feature '{name}' is not valid UTF-8 text in the Examples at indices", bad])
        return [parsed[name] for name in feature_names]


class Graphs:
    """Traced pieces shared by the signatures of one export: `model` (the head model), `tokenizer`, `length`
    (max_seq_len, the segment length for long documents), `doc_len` (max_doc_len or None), `width` (the
    widest row), `text_pieces` ({text input: (pieces, "first" or "last")}, `ExportTask.text_pieces`: what
    `cut` reads of each text input) and `piece_bytes` (`piece_bytes`)."""

    def __init__(self, model, tokenizer, max_seq_len, max_doc_len=None, text_pieces=None):
        self.model, self.tokenizer, self.length = model, tokenizer, max_seq_len
        self.doc_len = max_doc_len  # long documents read with memory: segments of max_seq_len
        self.width = gf.document_width(max_seq_len, max_doc_len)
        self.text_pieces = dict(text_pieces or {})
        self.piece_bytes = piece_bytes(tokenizer)
        spec = [tf.TensorSpec([None], tf.string)]

        # Tokenization is traced ONCE per export as two library functions that every signature calls
        # (a smaller graph that loads faster than one inlined copy per use).
        @signature_function(spec)
        def token_ids(text):
            """string [B] -> ragged int32 [B, None] ids."""
            with tf.device("/cpu:0"):
                return tokenizer.tokenize(text)

        @signature_function(spec)
        def tokens_with_offsets(text):
            """string [B] -> ragged ids, and code point start / end offsets into ``text`` (int64)."""
            with tf.device("/cpu:0"):
                ids, starts, ends = tokenizer.tokenize_with_offsets(text)
                return ids, gf.byte_to_char_offsets(text, starts), gf.byte_to_char_offsets(text, ends)

        self._token_ids, self._tokens_with_offsets = token_ids, tokens_with_offsets

        # So are the pieces that several signatures run on the same inputs: a sentence task's features (its
        # serving_default and encode), and the packing of a merged request's rows (its head and encode).
        @signature_function(spec)
        def text_features(text):
            """string [B] -> the encoder inputs of text input ``text`` (`classification_inputs`)."""
            with tf.device("/cpu:0"):
                return self._classification_inputs(self.token_ids(text, "text"), None)

        @signature_function(spec * 2)
        def pair_features(text_a, text_b):
            """strings [B], [B] -> the encoder inputs of the pair ``text_a`` / ``text_b``."""
            with tf.device("/cpu:0"), tf.control_dependencies(same_batch(text_a, text_b)):
                return self._classification_inputs(self.token_ids(text_a, "text_a"), self.token_ids(text_b, "text_b"))

        self._text_features, self._pair_features = text_features, pair_features
        self._pack_merged = tf.function(packing.pack_merged, jit_compile=JIT, autograph=False)

    # -- text -> features (CPU) -----------------------------------------------------------------------
    def cut(self, text, name):
        """Text input `name` (string, any shape) cut to the bytes its kept pieces come from (`cut_text`: the first
        or last ``pieces x piece_bytes`` bytes, ``text_pieces[name]``)."""
        pieces, end = self.text_pieces[name]
        return cut_text(text, pieces * self.piece_bytes, keep_last=end == "last")

    def token_ids(self, text, name):
        """Text input `name` string ``[B]`` -> ragged int32 ``[B, None]`` ids of what `cut` reads of it."""
        return self._token_ids(self.cut(text, name))

    def tokens_with_offsets(self, text, name):
        """Text input `name` string ``[B]`` -> ids and code point start / end offsets into what `cut` reads of it
        (the text itself where its start is kept)."""
        return self._tokens_with_offsets(self.cut(text, name))

    def classification_inputs(self, text_a, text_b=None):
        """Encoder inputs of the text inputs ``text`` [B], or the pair ``text_a`` / ``text_b``."""
        return self._text_features(text_a) if text_b is None else self._pair_features(text_a, text_b)

    def _classification_inputs(self, ids_a, ids_b):  # in `text_features` / `pair_features`, on the CPU
        return gf.classification_inputs(ids_a, ids_b, self.length, pad_to_multiple=PAD_MULTIPLE,
                                        max_doc_len=self.doc_len)

    def tokenize(self, text):
        """token_ids int32, token_start / token_end int64 (code points) ``[B, W]`` padded with -1 (W: L, or
        the document width); num_tokens int64 ``[B]`` (before truncation to W; of the text `cut` reads)."""
        with tf.device("/cpu:0"):
            ids, starts, ends = self.tokens_with_offsets(text, "text")
            keep = tf.minimum(ids.row_lengths(), self.width)

            def first(rt):
                return gf.pad_rows(gf.keep_first(rt, keep), self.width, -1)

            return {"token_ids": first(ids), "token_start": first(starts), "token_end": first(ends),
                    "num_tokens": ids.row_lengths()}

    # -- model ----------------------------------------------------------------------------------------
    def encode(self, features, pack=False):
        """The encoder's states, zeros at padding; for long documents, those of the last segment (read with
        memory). With `pack` (one window) the merged requests' rows are packed first, as for `head`, and the
        states put back in their rows (`packing.unpack_tokens`)."""
        inputs = {k: features[k] for k in ENCODER_INPUTS}
        if self.doc_len is not None:
            hidden = self.model.transformer.encode_document(inputs, self.length)
            features = {k: v[:, -self.length:] for k, v in inputs.items()}
        elif pack:
            rows = self._pack_merged(inputs)
            hidden = self.model.transformer({k: rows[k] for k in heads.ENCODER_INPUTS},
                                            training=False)["sequence_output"]
            hidden = packing.unpack_tokens(hidden, rows["example_ids"], inputs["padding_mask"])
        else:
            hidden = self.model.transformer(inputs, training=False)["sequence_output"]
        real = tf.cast(features["padding_mask"], hidden.dtype)[..., None]
        hidden = tf.cast(hidden * real, tf.float32)
        return {"sequence_output": hidden, "pooled_output": hidden[:, -1],
                "padding_mask": features["padding_mask"], "input_ids": features["input_ids"],
                "segment_ids": features["segment_ids"]}

    def head(self, features, pack=False):
        """The task head's outputs, floats in float32 whatever the export's precision; with `pack` (a sequence
        head reading one window) the merged requests' rows are packed first (`packing.pack_merged`: several
        short requests share a row, each attending only to itself; the outputs are the same)."""
        if pack and self.doc_len is None:
            features = self._pack_merged(features)
        outputs = self.model(features, training=False)
        return {k: tf.cast(v, tf.float32) if v.dtype.is_floating else v for k, v in outputs.items()}


def encoder_ids_function(g, segment_len=None, choices=None):
    """``predict_ids`` of the heads that read the encoder inputs alone: int32 ``[B, T]`` (``[B, C, T]`` with
    ``choices``) ids, any T up to the export's width (whole segments of ``segment_len`` for long documents)
    -> the head's raw outputs."""
    @signature_function(ids_spec(ENCODER_INPUTS, choices))
    def predict_ids(input_ids, segment_ids, padding_mask):
        ids = checked_ids([input_ids, segment_ids, padding_mask], g.width, segment_len)
        return g.head(dict(zip(ENCODER_INPUTS, ids)))

    return predict_ids
