"""Token classification: a tag for every word (named entities, part of speech, slots) from CoNLL-style files or
JSONL (`data.token_classification`); long sentences read as windows of whole words, each word predicted once,
from the window where it has the most context."""

import dataclasses
import logging

from xlnet_tf.tasks.base import ENCODER_INPUTS, WARMUP_TEXTS, WINDOWED_LENGTHS, Task, TaskData, TaskOptions, softmax

log = logging.getLogger(__name__)
# --tag-column / --label-all-pieces: FinetuneSetup.tag_column, label_all_pieces
TAG_OPTIONS = TaskOptions(("--tag-column", "--label-all-pieces"), {"tag_column": -1, "label_all_pieces": False})


def token_predictions(data, outputs, finetune_config):
    """Per sentence: its words, one tag per word (from the logits at the word's first piece in the window
    where it has the most context), that tag's probability, and the entity spans of the tags (seqeval's
    chunks: type, first word, end word exclusive, and the words' text joined by spaces)."""
    from xlnet_tf.data import token_classification as tc

    names = finetune_config["label_names"]
    rows = []
    for example, logits in zip(data.examples, tc.word_values(data.features, outputs["logits"])):
        probs = softmax(logits)
        ids = logits.argmax(-1)
        tags = [names[i] for i in ids]
        entities = [{"type": t, "start": s, "end": e, "text": " ".join(example.words[s:e])}
                    for t, s, e in tc.entity_spans(example.words, tags)]
        rows.append({"words": example.words, "tags": tags,
                     "scores": [float(p[i]) for p, i in zip(probs, ids)], "entities": entities})
    return rows


class TokenClassification(Task):
    """Labels [B, T]: a tag id where a word is scored, `data.labels.IGNORE` elsewhere; `logits` [B, T, C] per
    position; seqeval's entity precision / recall / F1."""

    name = "token-classification"
    metric_names = ("f1", "precision", "recall", "accuracy")  # entity-level, seqeval's; accuracy: words
    best_metric = "f1"
    position_outputs = ("logits",)
    windows = "token classification reads long sentences"
    named_labels = True
    options = (TAG_OPTIONS,)
    reads_ids = True

    def default_doc_stride(self, max_seq_len):
        """Half a window's pieces."""
        return max((max_seq_len - 2) // 2, 1)

    def read(self, path, tokenizer, max_seq_len, options):
        """`options.labeled` False reads only the words (prediction input; a file's tags, if any, are not read)."""
        from xlnet_tf.data import token_classification as tc

        examples, report = tc.read_token_examples(path, tag_column=options.tag_column if options.labeled else None,
                                                  skip_bad_rows=options.skip_bad_rows, id_column=options.id_column)
        if not options.labeled:
            examples = [dataclasses.replace(e, tags=None) for e in examples]  # JSONL tags are not read either
        features, feature_report = tc.token_classification_features(
            examples, tokenizer, max_seq_len, options.label_list, doc_stride=options.doc_stride,
            label_all_pieces=options.label_all_pieces)
        report = {**report, **feature_report}
        if options.is_training:
            log.info("%s: %d sentences, %d words in %d windows (%d sentences in several); %d empty words given "
                     "<unk>, %d words cut to %d pieces", path, report["sentences"], report["words"],
                     report["windows"], report["multi_window_examples"], report["empty_words"],
                     report["truncated_words"], max_seq_len - 2)
        return TaskData(examples, features, report)

    def recorded(self, setup, train):
        return {**super().recorded(setup, train), "tag_column": setup.tag_column,
                "label_all_pieces": setup.label_all_pieces}

    def head_model(self, config, run_options, dtype, document, head):
        from xlnet_tf.heads import XLNetForTokenClassification

        return XLNetForTokenClassification(config, run_options, num_labels=head.get("num_labels", 2), dtype=dtype)

    def loss(self, finetune_config):
        from xlnet_tf.heads import token_classification_loss

        return token_classification_loss

    def predictions(self, data, outputs, finetune_config):
        return token_predictions(data, outputs, finetune_config)

    def evaluate(self, data, outputs, finetune_config):
        from xlnet_tf import metrics

        predicted = [row["tags"] for row in token_predictions(data, outputs, finetune_config)]
        return metrics.token_classification_metrics([example.tags for example in data.examples], predicted)

    def warmup_inputs(self, finetune_config):
        texts = list(WARMUP_TEXTS)
        return [{"text": [t]} for t in texts] + [{"text": texts + ["", "Paris, New York and Rio de Janeiro."]}]

    def text_pieces(self, finetune_config, length, doc_len, width):
        """A text is read up to WINDOWED_LENGTHS x max_seq_len pieces (its words in windows); a word of the `words`
        signature keeps its first max_seq_len - 2."""
        return {"text": (WINDOWED_LENGTHS * length, "first"), "words": (length - 2, "first")}

    def serving_signatures(self, g, finetune_config, pack):
        """``serving_default`` on raw text and ``words`` on pre-split words, both returning every word's tag and
        score and the entity spans (seqeval's chunks of the tags); ``predict_ids``."""
        from xlnet_tf.tasks import graphs

        serving_default, words = _word_signatures(g, finetune_config, self.default_doc_stride(g.length))
        return {"words": words, "serving_default": serving_default, "predict_ids": graphs.encoder_ids_function(g)}


def _word_ids(g, words, name):
    """Words ragged string ``[B, None]`` (of text input `name`) -> ragged ``[B, None, None]`` their pieces' ids."""
    import tensorflow as tf

    return tf.RaggedTensor.from_row_splits(g.token_ids(words.values, name), words.row_splits, validate=False)


def _words_read(word_ids, pieces, span):
    """How many words of each text (int64 ``[B]``, of ``word_ids`` ragged ``[B, None, None]``) start within its first
    ``pieces`` pieces, each word counting the pieces its rows read (at least one, at most ``span``)."""
    import tensorflow as tf

    from xlnet_tf.tokenization import row_ids

    counts = tf.clip_by_value(word_ids.values.row_lengths(), 1, span)
    before = tf.cumsum(counts, exclusive=True)
    rows = row_ids(word_ids)
    before -= tf.gather(before, tf.gather(word_ids.row_starts(), rows))
    return tf.math.unsorted_segment_sum(tf.cast(before < pieces, tf.int64), rows, word_ids.nrows())


def _tagged_words(g, word_ids, doc_stride):
    """Words' piece ids ragged ``[B, None, None]`` -> their tags: ragged ``[B, None]`` ``tag_id`` int64 and
    ``score`` (the tag's probability), each word predicted from the window where it has the most context."""
    import tensorflow as tf

    from xlnet_tf.data import graph_features as gf
    from xlnet_tf.data.buckets import PAD_MULTIPLE

    with tf.device("/cpu:0"):
        windows = gf.token_windows(word_ids, g.length, doc_stride, pad_to_multiple=PAD_MULTIPLE,
                                   unk_id=g.tokenizer.unk_id)
    logits = g.head({k: windows[k] for k in ENCODER_INPUTS})["logits"]
    with tf.device("/cpu:0"):
        word_logits = gf.word_outputs(logits, windows, word_ids.row_lengths())
        probabilities = tf.nn.softmax(word_logits.values, -1)
        tag_id = tf.argmax(word_logits.values, -1)  # first maximum, as numpy's argmax
        score = tf.reduce_max(probabilities, -1)
        return word_ids.with_values(tag_id), word_ids.with_values(score)


def _word_signatures(g, finetune_config, default_stride):
    """``(serving_default, words)``: the functions on raw text and on pre-split words."""
    import tensorflow as tf

    from xlnet_tf.data import graph_features as gf
    from xlnet_tf.data import graph_words
    from xlnet_tf.tasks import graphs
    from xlnet_tf.tokenization import substrings

    names = [str(n) for n in finetune_config["label_names"]]
    doc_stride = int(finetune_config.get("doc_stride") or default_stride)
    label_names = tf.constant(names)
    dense = gf.pad_to_longest

    @tf.function(jit_compile=graphs.JIT, autograph=False)
    def tagged_words(word_ids):  # the windows, the model and the words' tags: traced once for both signatures
        return _tagged_words(g, word_ids, doc_stride)

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

    @graphs.signature_function([graphs.text_spec("text")])
    def serving_default(text):
        with tf.device("/cpu:0"):
            text = g.cut(text, "text")  # entities are cut from what was read
            pieces = g.text_pieces["text"][0]
            # a word after the first `pieces` starts after the first `pieces` pieces: not tokenized
            at_most = tf.fill(tf.shape(text, out_type=tf.int64), tf.constant(pieces, tf.int64))
            words, starts, ends = (gf.keep_first(t, at_most) for t in graph_words.split_words(text))
            word_ids = _word_ids(g, words, "text")
            read = _words_read(word_ids, pieces, g.length - 2)
            words, starts, ends, word_ids = (gf.keep_first(t, read) for t in (words, starts, ends, word_ids))
        tag_id, score = tagged_words(word_ids)
        with tf.device("/cpu:0"):
            types, first, last, chunks = entities(tag_id, starts.values, ends.values)
            entity_text = first.with_flat_values(substrings(text, first.value_rowids(), first.values,
                                                            last.values - first.values))
            return {
                "words": dense(words, ""), "word_start": dense(starts, -1), "word_end": dense(ends, -1),
                "tags": dense(tag_id.with_flat_values(tf.gather(label_names, tag_id.values)), ""),
                "tag_id": dense(tag_id, -1), "scores": dense(score, 0.0), "num_words": words.row_lengths(),
                "entity_text": dense(entity_text, ""), "entity_type": dense(types, ""),
                "entity_start": dense(first, -1), "entity_end": dense(last, -1),
                "num_entities": types.row_lengths(),
            }

    @graphs.signature_function([tf.TensorSpec([None, None], tf.string, name="words")])
    def words_signature(words):
        with tf.device("/cpu:0"):
            given = tf.not_equal(words, "")  # empty strings are padding
            columns = tf.ragged.boolean_mask(
                tf.broadcast_to(tf.range(tf.shape(words, out_type=tf.int64)[1])[None], tf.shape(words, tf.int64)),
                given)
            kept = tf.ragged.boolean_mask(words, given)
            word_ids = _word_ids(g, kept, "words")
        tag_id, score = tagged_words(word_ids)
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


TOKEN_CLASSIFICATION = TokenClassification()
