"""The exported graphs: raw text in, the task's answers out, tokenization built in.

``build_serving_module`` returns the SavedModel root and its signatures for a fine-tuned head model;
``build_reusable_module`` the reusable encoder's. Both trace the ONE tokenizer (``XLNetTokenizer``, TF +
TF Text ops) and the graph feature builders (``xlnet_tf.data.graph_features``), so a served request gets
exactly the rows that ``xlnet_tf.data.finetuning`` builds for training and ``xlnet-tf predict``.

A request is padded to its own longest row, rounded up to a multiple of ``PAD_MULTIPLE`` (8) and at most
the export's ``max_seq_len``, not to ``max_seq_len``: XLNet's outputs at real positions do not depend on the
amount of padding, so a short request costs less and gets the same answer. Requests that a server merges
into one batch (strings, merged before tokenization) are padded once, to the longest merged row; sequence
heads then pack those rows (`xlnet_tf.data.packing`): several short texts share a row of that width, each
attending only to itself, so a merged batch with one long text costs about its real tokens, not rows x width.

Tokenization and feature building are pinned to the CPU (``tf.device("/cpu:0")``); the model runs
wherever the server places it. Every ``tf.function`` is traced with ``jit_compile=False``.
"""

import tensorflow as tf

from xlnet_tf import heads
from xlnet_tf.data import graph_features as gf
from xlnet_tf.data import packing
from xlnet_tf.data.buckets import PAD_MULTIPLE

_JIT = False  # no XLA in served functions


def _fn(signature):
    return tf.function(input_signature=signature, jit_compile=_JIT, autograph=False)


def _text_spec(name):
    return tf.TensorSpec([None], tf.string, name=name)


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


def _same_batch(*tensors):
    """Fail (InvalidArgument) when the inputs of one request do not have the same batch size."""
    n = tf.shape(tensors[0])[0]
    for t in tensors[1:]:
        tf.debugging.assert_equal(tf.shape(t)[0], n, message="all inputs of a request need the same batch size")


def _ids_spec(names, choices=None):
    """``predict_ids`` inputs: int32 ``[B, T]`` (``[B, C, T]``), any T up to the export's max_seq_len."""
    shape = [None, None] if choices is None else [None, choices, None]
    return [tf.TensorSpec(shape, tf.int32, name=n) for n in names]


def _check_width(ids, length, segment_len=None):
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


class _Root(tf.__internal__.tracking.AutoTrackable):
    """SavedModel root: the tokenizer (its SentencePiece resource), ``variables``, functions."""


def _backing(variables):
    """The ``tf.Variable``s behind Keras 3 variables.

    The SavedModel must track the very variables the traced functions read: tracking the Keras wrappers
    instead gives a checkpoint whose TF1 restore op (what TensorFlow Serving runs when it loads a model in
    a Session) fills other resources than the ones the signatures read.
    """
    out = []
    for v in variables:
        value = v.value if not isinstance(v, tf.Variable) else v
        if not isinstance(value, tf.Variable):
            raise TypeError(f"{v.path if hasattr(v, 'path') else v}: no backing tf.Variable (got {type(value)})")
        out.append(value)
    return out


class _Graphs:
    """Traced pieces shared by the signatures of one export."""

    def __init__(self, model, tokenizer, max_seq_len, max_doc_len=None):
        self.model, self.tokenizer, self.length = model, tokenizer, max_seq_len
        self.doc_len = max_doc_len  # long documents read with memory: segments of max_seq_len
        self.width = gf.document_width(max_seq_len, max_doc_len)
        spec = [tf.TensorSpec([None], tf.string)]

        # Tokenization is traced ONCE per export as two library functions that every signature calls
        # (a smaller graph that loads faster than one inlined copy per use).
        @_fn(spec)
        def token_ids(text):
            """string [B] -> ragged int32 [B, None] ids."""
            with tf.device("/cpu:0"):
                return tokenizer.tokenize(text)

        @_fn(spec)
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
                _same_batch(text_a, text_b)
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
        inputs = {k: features[k] for k in ("input_ids", "segment_ids", "padding_mask")}
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


# ----------------------------------------------------------------------------------------------------
# Serving module

# The signatures on serialized tf.Examples, by task, with TensorFlow Serving's method names (set on the saved
# SignatureDefs by the exporter: tf.saved_model.save writes every signature as a predict one).
EXAMPLE_SIGNATURES = {"classification": "classification", "regression": "regression", "multi-label": "classification"}
EXAMPLE_METHODS = {"classification": "tensorflow/serving/classify", "regression": "tensorflow/serving/regress",
                   "multi-label": "tensorflow/serving/classify"}
SENTENCE_TASKS = ("classification", "regression", "multi-label")  # serving_default(text) or (text_a, text_b)


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


def build_serving_module(model, tokenizer, finetune_config, max_seq_len, packing_mode="auto"):
    """(root, signatures) for a fine-tuned head model.

    Args:
      model: the head model (float32, dropout 0), from ``load_finetuned``.
      tokenizer: its ``XLNetTokenizer``.
      finetune_config: the fine-tuned directory's config (``task``, ``label_names``, ``pairs``,
        ``doc_stride``, ``max_query_len``, ``max_qa_len``, ``num_choices``).
      max_seq_len: L, the longest input of every signature (requests are padded to their longest row); for
        a model reading long documents (``long_doc`` "memory"), the segment length, and inputs take up to
        ``max_doc_len`` tokens (the segments run in a ``tf.while_loop`` carrying the memory).
      packing_mode: "auto": classification, regression, multi-label and RACE exports reading one window pack
        the rows of a request (several texts, or requests merged by the server's batching) into rows of the
        request's width before the model (`xlnet_tf.data.packing.pack_merged`); "none": they do not.
    Returns:
      ``(root, signatures)``: the root object holding the tokenizer and the model's variables, and the
      concrete functions by signature name (``serving_default``, ``encode``, ``tokenize``, ``predict_ids``;
      ``classification`` / ``regression`` on tf.Examples for those tasks, see ``EXAMPLE_SIGNATURES``).
    """
    from xlnet_tf.training.finetune import config_doc_len

    task = finetune_config["task"]
    length = max_seq_len
    doc_len = config_doc_len(finetune_config)
    pack = packing.parse_mode(packing_mode) == "auto" and task in packing.PACKED_TASKS
    g = _Graphs(model, tokenizer, length, doc_len)
    root = _Root()
    root.tokenizer = tokenizer
    root.variables = _backing(model.variables)
    root.trainable_variables = _backing(model.trainable_variables)
    pairs = bool(finetune_config.get("pairs")) and task in SENTENCE_TASKS
    text_inputs = [_text_spec("text_a"), _text_spec("text_b")] if pairs else [_text_spec("text")]
    signatures = {}

    @_fn([_text_spec("text")])
    def tokenize(text):
        return g.tokenize(text)

    signatures["tokenize"] = tokenize.get_concrete_function()

    if pairs:
        @_fn(text_inputs)
        def encode(text_a, text_b):
            return g.encode(g.classification_inputs(text_a, text_b), pack=pack)
    else:
        @_fn(text_inputs)
        def encode(text):
            return g.encode(g.classification_inputs(text), pack=pack)
    signatures["encode"] = encode.get_concrete_function()

    if task in SENTENCE_TASKS:
        def answers(features):
            out = g.head({k: features[k] for k in ("input_ids", "segment_ids", "padding_mask")}, pack=pack)
            if task == "regression":
                return {"prediction": out["predictions"]}
            logits = out["logits"]
            names = finetune_config.get("label_names") or [str(i) for i in range(logits.shape[-1])]
            if task == "multi-label":  # each label's sigmoid against its recorded threshold
                scores = tf.sigmoid(logits)
                thresholds = tf.constant(finetune_config.get("thresholds") or [0.5] * len(names), tf.float32)
                applies = scores >= thresholds[None]
                chosen = tf.ragged.boolean_mask(tf.broadcast_to(tf.constant([str(n) for n in names]),
                                                                tf.shape(scores)), applies)
                return {"logits": logits, "scores": scores, "label_applies": tf.cast(applies, tf.int32),
                        "labels": gf.pad_to_longest(chosen, ""), "num_predicted": chosen.row_lengths()}
            label_id = tf.argmax(logits, -1)  # first maximum, as numpy's argmax
            return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1), "label_id": label_id,
                    "label": tf.gather(tf.constant([str(n) for n in names]), label_id)}

        if pairs:
            @_fn(text_inputs)
            def serving_default(text_a, text_b):
                return answers(g.classification_inputs(text_a, text_b))
        else:
            @_fn(text_inputs)
            def serving_default(text):
                return answers(g.classification_inputs(text))

        predict_ids = _encoder_ids_function(g, doc_len and length)

        # TensorFlow Serving's Classify / Regress API: serialized tf.Examples whose bytes features hold the
        # text (the names of serving_default's inputs).
        feature_names = [spec.name for spec in text_inputs]

        @_fn([tf.TensorSpec([None], tf.string, name="inputs")])
        def on_examples(inputs):
            # serving_default's traced function, called: one copy of the model in the SavedModel.
            out = serving_default(*parse_text_examples(inputs, feature_names))
            if task == "regression":
                return {"outputs": out["prediction"]}
            names = finetune_config.get("label_names") or [str(i) for i in range(out["logits"].shape[-1])]
            scores = out["scores"] if task == "multi-label" else out["probabilities"]  # every label, its score
            classes = tf.broadcast_to(tf.constant([str(n) for n in names]), tf.shape(scores))
            return {"classes": classes, "scores": scores}

        signatures[EXAMPLE_SIGNATURES[task]] = on_examples.get_concrete_function()

    elif task == "squad":
        doc_stride = int(finetune_config.get("doc_stride", 128))
        max_query_len = int(finetune_config.get("max_query_len", 64))
        simple = finetune_config.get("squad_head") == "simple"

        @_fn([_text_spec("question"), _text_spec("context")])
        def serving_default(question, context):
            with tf.device("/cpu:0"):
                _same_batch(question, context)
                c_ids, c_start, c_end = g.tokens_with_offsets(context)
                windows = gf.squad_windows(g.token_ids(question), c_ids, c_start, c_end, length, doc_stride,
                                           max_query_len, pad_to_multiple=PAD_MULTIPLE)
            out = g.head({k: windows[k] for k in ("input_ids", "segment_ids", "padding_mask", "p_mask",
                                                    "cls_index")})
            with tf.device("/cpu:0"):
                best = gf.squad_best_spans(out, windows, tf.size(question, out_type=tf.int64),
                                           int(finetune_config.get("max_answer_length", 64)))
                first_window = tf.math.unsorted_segment_min(
                    tf.range(tf.size(windows["example_index"], out_type=tf.int64)), windows["example_index"],
                    tf.size(question, out_type=tf.int64))
                byte_start = char_to_byte_offsets(context, best["start"])
                byte_end = char_to_byte_offsets(context, best["end"])
                answer = tf.strings.substr(context, byte_start, byte_end - byte_start)
            return {
                "answer": answer,
                "answer_start": best["start"],
                "answer_end": best["end"],
                "score": best["score"],
                # the beam head's answerability logit; the simple head's null score over the best span's (the
                # null answer wins above 0.5, as transformers picks it when its score is the higher)
                "no_answer_probability": tf.sigmoid(best["null_score"] - (best["score"] if simple else 0.0)),
                "null_score": best["null_score"],
                "window_index": tf.where(best["found"], best["window"] - first_window, -1),
            }

        @_fn(_ids_spec(("input_ids", "segment_ids", "padding_mask", "p_mask"))
             + [tf.TensorSpec([None], tf.int32, name="cls_index")])
        def predict_ids(input_ids, segment_ids, padding_mask, p_mask, cls_index):
            _check_width([input_ids, segment_ids, padding_mask, p_mask], length)
            return g.head({"input_ids": input_ids, "segment_ids": segment_ids, "padding_mask": padding_mask,
                           "p_mask": p_mask, "cls_index": cls_index})

    elif task == "race":
        choices = int(finetune_config.get("num_choices", 4))
        max_qa_len = min(int(finetune_config.get("max_qa_len", 128)), length - 3)

        @_fn([_text_spec("article"), _text_spec("question"), tf.TensorSpec([None, choices], tf.string, name="options")])
        def serving_default(article, question, options):
            with tf.device("/cpu:0"):
                _same_batch(article, question, options)
                qa = gf.race_qa_text(question, options)
                features = gf.race_inputs(g.token_ids(article), g.token_ids(tf.reshape(qa, [-1])), choices, length,
                                          max_qa_len, pad_to_multiple=PAD_MULTIPLE, max_doc_len=doc_len)
                features = {k: tf.reshape(features[k], [-1, choices, tf.shape(features[k])[-1]])
                            for k in ("input_ids", "segment_ids", "padding_mask")}
            logits = g.head(features, pack=pack)["logits"]
            return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1),
                    "answer_index": tf.argmax(logits, -1)}

        predict_ids = _encoder_ids_function(g, doc_len and length, choices)
    elif task == "token-classification":
        serving_default, words = token_signatures(g, finetune_config)
        signatures["words"] = words.get_concrete_function()
        predict_ids = _encoder_ids_function(g)
    else:
        raise ValueError(f"unknown task {task!r}")

    signatures["serving_default"] = serving_default.get_concrete_function()
    signatures["predict_ids"] = predict_ids.get_concrete_function()
    return root, signatures


def _encoder_ids_function(g, segment_len=None, choices=None):
    """``predict_ids`` of the heads that read the encoder inputs alone: int32 ``[B, T]`` (``[B, C, T]`` with
    ``choices``) ids, any T up to the export's width (whole segments of ``segment_len`` for long documents)
    -> the head's raw outputs."""
    @_fn(_ids_spec(("input_ids", "segment_ids", "padding_mask"), choices))
    def predict_ids(input_ids, segment_ids, padding_mask):
        _check_width([input_ids, segment_ids, padding_mask], g.width, segment_len)
        return g.head({"input_ids": input_ids, "segment_ids": segment_ids, "padding_mask": padding_mask})

    return predict_ids


def _tagged_words(g, words, doc_stride):
    """Words ragged string ``[B, None]`` -> their tags: ragged ``[B, None]`` ``tag_id`` int64 and ``score``
    (the tag's probability), each word predicted from the window where it has the most context."""
    with tf.device("/cpu:0"):
        word_ids = tf.RaggedTensor.from_row_splits(g.token_ids(words.values), words.row_splits, validate=False)
        windows = gf.token_windows(word_ids, g.length, doc_stride, pad_to_multiple=PAD_MULTIPLE,
                                   unk_id=g.tokenizer.unk_id)
    logits = g.head({k: windows[k] for k in ("input_ids", "segment_ids", "padding_mask")})["logits"]
    with tf.device("/cpu:0"):
        word_logits = gf.word_outputs(logits, windows, words.row_lengths())
        probabilities = tf.nn.softmax(word_logits.values, -1)
        tag_id = tf.argmax(word_logits.values, -1)  # first maximum, as numpy's argmax
        score = tf.reduce_max(probabilities, -1)
        return words.with_flat_values(tag_id), words.with_flat_values(score)


def token_signatures(g, finetune_config):
    """Token classification: ``(serving_default, words)``, the functions on raw text and on pre-split words,
    both returning every word's tag and score and the entity spans (seqeval's chunks of the tags)."""
    from xlnet_tf.data import graph_words
    from xlnet_tf.training.finetune import default_doc_stride

    names = [str(n) for n in finetune_config["label_names"]]
    doc_stride = int(finetune_config.get("doc_stride") or default_doc_stride("token-classification", g.length))
    label_names = tf.constant(names)
    dense = gf.pad_to_longest

    def entities(tag_id, word_first, word_last):
        """Entity chunks of ``tag_id`` ragged ``[B, None]``: type strings, and ``word_first`` / ``word_last``
        (per word values, e.g. byte offsets) of the first and last word, ragged ``[B, E]``."""
        chunks = graph_words.chunk_entities(tag_id, names)
        row = chunks["start"].value_rowids()
        first = tf.gather(tag_id.row_starts(), row)
        return (chunks["start"].with_flat_values(tf.gather(tf.constant(chunks["types"] or [""]),
                                                           chunks["type_id"].values)),
                chunks["start"].with_flat_values(tf.gather(word_first, first + chunks["start"].values)),
                chunks["start"].with_flat_values(tf.gather(word_last, first + chunks["end"].values - 1)),
                chunks)

    @_fn([_text_spec("text")])
    def serving_default(text):
        with tf.device("/cpu:0"):
            words, starts, ends = graph_words.split_words(text)
        tag_id, score = _tagged_words(g, words, doc_stride)
        with tf.device("/cpu:0"):
            types, first, last, chunks = entities(tag_id, starts.values, ends.values)
            source = tf.gather(text, first.value_rowids())
            entity_text = first.with_flat_values(tf.strings.substr(source, first.values, last.values - first.values))
            return {
                "words": dense(words, ""), "word_start": dense(starts, -1), "word_end": dense(ends, -1),
                "tags": dense(tag_id.with_flat_values(tf.gather(label_names, tag_id.values)), ""),
                "tag_id": dense(tag_id, -1), "scores": dense(score, 0.0), "num_words": words.row_lengths(),
                "entity_text": dense(entity_text, ""), "entity_type": dense(types, ""),
                "entity_start": dense(first, -1), "entity_end": dense(last, -1),
                "num_entities": types.row_lengths(),
            }

    @_fn([tf.TensorSpec([None, None], tf.string, name="words")])
    def words_signature(words):
        with tf.device("/cpu:0"):
            given = tf.not_equal(words, "")  # empty strings are padding
            columns = tf.ragged.boolean_mask(
                tf.broadcast_to(tf.range(tf.shape(words, out_type=tf.int64)[1])[None], tf.shape(words, tf.int64)),
                given)
            kept = tf.ragged.boolean_mask(words, given)
        tag_id, score = _tagged_words(g, kept, doc_stride)
        with tf.device("/cpu:0"):
            types, first, last, chunks = entities(tag_id, columns.values, columns.values + 1)
            row = first.value_rowids()
            word_rows = tf.ragged.range(tf.gather(tag_id.row_starts(), row) + chunks["start"].values,
                                        tf.gather(tag_id.row_starts(), row) + chunks["end"].values)
            joined = tf.strings.unsorted_segment_join(tf.gather(kept.values, word_rows.values),
                                                      word_rows.value_rowids(), tf.size(row), separator=" ")
            shape = tf.shape(words, out_type=tf.int64)
            at = tf.stack([columns.value_rowids(), columns.values], 1)

            def by_column(values, pad_value):
                return tf.tensor_scatter_nd_update(tf.fill(shape, tf.constant(pad_value, values.dtype)), at, values)

            return {
                "tags": by_column(tf.gather(label_names, tag_id.values), ""), "tag_id": by_column(tag_id.values, -1),
                "scores": by_column(score.values, 0.0), "num_words": kept.row_lengths(),
                "entity_text": dense(first.with_flat_values(joined), ""), "entity_type": dense(types, ""),
                "entity_start": dense(first, -1), "entity_end": dense(last, -1),
                "num_entities": types.row_lengths(),
            }

    return serving_default, words_signature


# ----------------------------------------------------------------------------------------------------
# Reusable encoder


def build_reusable_module(model, tokenizer, max_seq_len):
    """(root, signatures) of the reusable encoder (TF Hub's reusable SavedModel conventions).

    The root has ``__call__(inputs, training=False)`` (also as ``encode_ids``): ``inputs`` a dict of int32
    ``input_ids`` / ``segment_ids`` / ``padding_mask`` ``[B, T]`` (any T; 1 = real token) -> dict
    ``sequence_output`` float32 ``[B, T, d_model]`` and ``pooled_output`` ``[B, d_model]`` (the state at the
    LAST position: ``<cls>`` in XLNet's left-padded layout). ``training`` is accepted for the convention;
    the encoder has no dropout in either mode. ``text_inputs(text)`` turns raw strings into those inputs
    (single-sentence layout ``text <sep> <cls>``, at most max_seq_len tokens, left-padded to the batch's
    longest row rounded up to a multiple of 8). ``variables``,
    ``trainable_variables`` (the encoder weights the call uses: all but the pretraining-only ``mask_emb``) and
    ``regularization_losses`` (empty) are attributes. Load it with ``import tensorflow_text`` first (it
    registers the tokenizer's ops); ``xlnet_tf.export.keras_layer.ReusableEncoderLayer`` wraps it as a
    trainable Keras layer.
    Signatures: ``serving_default`` / ``encode`` (text -> as the serving export's ``encode``) and ``tokenize``.
    """
    encoder = model.transformer
    length = max_seq_len
    g = _Graphs(model, tokenizer, length)
    root = _Root()
    root.tokenizer = tokenizer
    root.variables = _backing(encoder.variables)
    # mask_emb only feeds the pretraining query stream: not used here, so not offered for training.
    root.trainable_variables = _backing([v for v in encoder.trainable_variables if v is not encoder.mask_emb])
    root.regularization_losses = []

    def call(inputs, training=False):
        # Both modes trace the inference graph: without dropout they compute the same function, and the
        # training-mode layers use XLA-compiled parts (the feed-forward's GELU) that an export must not hold.
        del training
        hidden = encoder({k: inputs[k] for k in ("input_ids", "segment_ids", "padding_mask")},
                         training=False)["sequence_output"]
        hidden = tf.cast(hidden, tf.float32)
        return {"sequence_output": hidden, "pooled_output": hidden[:, -1]}

    call_fn = tf.function(call, jit_compile=_JIT, autograph=False)
    spec = {k: tf.TensorSpec([None, None], tf.int32, name=k) for k in ("input_ids", "segment_ids", "padding_mask")}
    for training in (False, True):
        call_fn.get_concrete_function(spec, training=training)

    @_fn([_text_spec("text")])
    def text_inputs(text):
        features = g.classification_inputs(text)
        return {k: features[k] for k in ("input_ids", "segment_ids", "padding_mask")}

    @_fn([_text_spec("text")])
    def encode(text):
        return g.encode(g.classification_inputs(text))

    @_fn([_text_spec("text")])
    def tokenize(text):
        return g.tokenize(text)

    root.__call__ = call_fn
    root.encode_ids = call_fn
    root.text_inputs = text_inputs
    signatures = {"serving_default": encode.get_concrete_function(), "encode": encode.get_concrete_function(),
                  "tokenize": tokenize.get_concrete_function()}
    return root, signatures


GENERATE_INPUTS = ("text", "max_new_tokens", "temperature", "top_k", "top_p", "seed")


def build_generation_module(model, tokenizer, max_prompt_len, max_new_tokens):
    """(root, signatures) for a language model (an ``XLNetPretrainer``; task "lm"): ``xlnet_tf.generation``'s
    cached decoder in one ``While`` loop, the tokenizer and detokenizer in the graph.

    ``generate(text [B], max_new_tokens int32 [B], temperature float32 [B], top_k int32 [B], top_p float32 [B],
    seed int64 [B])`` and ``serving_default(text [B])`` (greedy, ``max_new_tokens`` each) -> ``text`` string [B]
    (the continuation), ``token_ids`` int32 [B, N] (0 after a row's end; N = ``max_new_tokens``, the export's
    cap), ``log_probs`` float32 [B, N], ``num_tokens`` int32 [B] and ``finish_reason`` string [B] ("stop" or
    "length"). A prompt keeps its last ``max_prompt_len`` tokens; an empty prompt reads ``<eod>`` (the start of
    a document). Rows stop at ``</s>``, ``<eod>`` or ``<eop>``. Plus ``tokenize(text)`` -> ``token_ids`` int32,
    ``token_start`` / ``token_end`` int64 (code points) padded with -1 to the longest row, ``num_tokens`` int64.
    """
    from xlnet_tf import generation

    root = _Root()
    root.tokenizer = tokenizer
    root.variables = _backing(model.variables)
    root.trainable_variables = _backing(model.trainable_variables)
    stop_ids = tf.constant(generation.default_stop_ids(tokenizer), tf.int32)
    reasons = tf.constant(generation.FINISH_REASONS)

    def decode(text, limits, temperature, top_k, top_p, seeds):
        with tf.device("/cpu:0"):
            keep = tf.fill(tf.shape(text, out_type=tf.int64), tf.constant(max_prompt_len, tf.int64))
            ids = gf.keep_last(tokenizer.tokenize(text), keep)
            ids = tf.ragged.map_flat_values(tf.cast, ids, tf.int32)
            empty = tf.equal(ids.row_lengths(), 0)
            eod = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(tf.cast(empty, tf.int64))], tokenizer.eod_id),
                                                   tf.cast(empty, tf.int64))
            ids = tf.concat([eod, ids], axis=1)  # an empty prompt reads <eod>
            width = tf.reduce_max(ids.row_lengths())
            prompt_ids = gf.pad_rows(ids, width, 0, left=True)
            prompt_mask = gf.pad_rows(tf.ones_like(ids), width, 0, left=True)
        out = generation.decode(model, prompt_ids, prompt_mask, max_new_tokens, temperature=temperature,
                                top_k=top_k, top_p=top_p, seeds=seeds, stop_ids=stop_ids, max_new_tokens=limits)
        with tf.device("/cpu:0"):
            tokens = tf.RaggedTensor.from_tensor(out["tokens"], lengths=out["lengths"])
            continuation = tokenizer.detokenize(tokens)
        return {"text": continuation, "token_ids": out["tokens"], "log_probs": out["log_probs"],
                "num_tokens": out["lengths"], "finish_reason": tf.gather(reasons, out["finish_reason"])}

    specs = [_text_spec("text"), tf.TensorSpec([None], tf.int32, name="max_new_tokens"),
             tf.TensorSpec([None], tf.float32, name="temperature"), tf.TensorSpec([None], tf.int32, name="top_k"),
             tf.TensorSpec([None], tf.float32, name="top_p"), tf.TensorSpec([None], tf.int64, name="seed")]

    @_fn(specs)
    def generate(text, max_new_tokens, temperature, top_k, top_p, seed):
        _same_batch(text, max_new_tokens, temperature, top_k, top_p, seed)
        checks = [tf.debugging.assert_non_negative(max_new_tokens, message="max_new_tokens must be >= 0"),
                  tf.debugging.assert_non_negative(temperature, message="temperature must be >= 0 (0: greedy)"),
                  tf.debugging.assert_non_negative(top_k, message="top_k must be >= 0 (0: every token)"),
                  tf.debugging.assert_positive(top_p, message="top_p must be in (0, 1]"),
                  tf.debugging.assert_less_equal(top_p, 1.0, message="top_p must be in (0, 1]")]
        with tf.control_dependencies(checks):
            return decode(tf.identity(text), max_new_tokens, temperature, top_k, top_p, seed)

    @_fn([_text_spec("text")])
    def serving_default(text):
        batch = tf.shape(text)
        return decode(text, tf.fill(batch, max_new_tokens), tf.zeros(batch, tf.float32), tf.zeros(batch, tf.int32),
                      tf.ones(batch, tf.float32), tf.zeros(batch, tf.int64))

    @_fn([_text_spec("text")])
    def tokenize(text):
        with tf.device("/cpu:0"):
            ids, starts, ends = tokenizer.tokenize_with_offsets(text)
            return {"token_ids": gf.pad_to_longest(ids, -1), "token_start": gf.pad_to_longest(starts, -1),
                    "token_end": gf.pad_to_longest(ends, -1), "num_tokens": ids.row_lengths()}

    signatures = {"serving_default": serving_default.get_concrete_function(),
                  "generate": generate.get_concrete_function(), "tokenize": tokenize.get_concrete_function()}
    return root, signatures
