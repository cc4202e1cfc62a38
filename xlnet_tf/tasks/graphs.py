"""The traced pieces that every task's export signatures share: text -> features on the CPU, the model, the
signature helpers (`signature_function`, input specs, batch and width checks) and tf.Example parsing.

Imported by the tasks' `serving_signatures` and by `xlnet_tf.export.signatures` (never by training: it
imports TensorFlow). Every ``tf.function`` is traced with ``jit_compile=False`` (no XLA in served functions).
"""

import tensorflow as tf

from xlnet_tf import heads
from xlnet_tf.data import graph_features as gf
from xlnet_tf.data import packing
from xlnet_tf.data.buckets import PAD_MULTIPLE
from xlnet_tf.tasks.base import ENCODER_INPUTS

JIT = False  # no XLA in served functions


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
    """Fail (InvalidArgument) when the inputs of one request do not have the same batch size."""
    n = tf.shape(tensors[0])[0]
    for t in tensors[1:]:
        tf.debugging.assert_equal(tf.shape(t)[0], n, message="all inputs of a request need the same batch size")


def check_width(ids, length, segment_len=None):
    """Fail (InvalidArgument) when ids are wider than the export's max_seq_len (document width), their widths
    differ, or (long documents) the width is not whole segments of ``segment_len``."""
    width = tf.shape(ids[0])[-1]
    tf.debugging.assert_less_equal(width, length, message=f"input_ids may have at most {length} positions")
    if segment_len:
        tf.debugging.assert_equal(width % segment_len, 0,
                                  message=f"input_ids of a long-document model need whole segments of {segment_len} "
                                          f"positions (left-padded)")
    for t in ids[1:]:
        tf.debugging.assert_equal(tf.shape(t)[-1], width, message="all id inputs need the same number of positions")


def parse_text_examples(serialized, feature_names):
    """Serialized tf.Examples ``[B]`` -> one string ``[B]`` per name of ``feature_names``: each Example's bytes
    feature of that name, one value of UTF-8 text. A missing feature, another type or count, or text that is
    not UTF-8 fails the request (InvalidArgument naming the feature)."""
    with tf.device("/cpu:0"):
        parsed = tf.io.parse_example(serialized, {name: tf.io.FixedLenFeature([], tf.string)
                                                  for name in feature_names})
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
    widest row)."""

    def __init__(self, model, tokenizer, max_seq_len, max_doc_len=None):
        self.model, self.tokenizer, self.length = model, tokenizer, max_seq_len
        self.doc_len = max_doc_len  # long documents read with memory: segments of max_seq_len
        self.width = gf.document_width(max_seq_len, max_doc_len)
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

        self.token_ids, self.tokens_with_offsets = token_ids, tokens_with_offsets

    # -- text -> features (CPU) -----------------------------------------------------------------------
    def classification_inputs(self, text_a, text_b=None):
        with tf.device("/cpu:0"):
            if text_b is not None:
                same_batch(text_a, text_b)
            ids_a = self.token_ids(text_a)
            ids_b = None if text_b is None else self.token_ids(text_b)
            return gf.classification_inputs(ids_a, ids_b, self.length, pad_to_multiple=PAD_MULTIPLE,
                                            max_doc_len=self.doc_len)

    def tokenize(self, text):
        """token_ids int32, token_start / token_end int64 (code points) ``[B, W]`` padded with -1 (W: L, or
        the document width); num_tokens int64 ``[B]`` (before truncation to W)."""
        with tf.device("/cpu:0"):
            ids, starts, ends = self.tokens_with_offsets(text)
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
            rows = packing.pack_merged(inputs)
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
            features = packing.pack_merged(features)
        outputs = self.model(features, training=False)
        return {k: tf.cast(v, tf.float32) if v.dtype.is_floating else v for k, v in outputs.items()}


def encoder_ids_function(g, segment_len=None, choices=None):
    """``predict_ids`` of the heads that read the encoder inputs alone: int32 ``[B, T]`` (``[B, C, T]`` with
    ``choices``) ids, any T up to the export's width (whole segments of ``segment_len`` for long documents)
    -> the head's raw outputs."""
    @signature_function(ids_spec(ENCODER_INPUTS, choices))
    def predict_ids(input_ids, segment_ids, padding_mask):
        check_width([input_ids, segment_ids, padding_mask], g.width, segment_len)
        return g.head({"input_ids": input_ids, "segment_ids": segment_ids, "padding_mask": padding_mask})

    return predict_ids
