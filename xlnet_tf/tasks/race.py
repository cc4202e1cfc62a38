"""RACE (multiple choice): an article, a question and C options; every option is a row (article <sep> question +
option <sep> <cls>) scored by one shared head, softmax over the options."""

from xlnet_tf.tasks.base import ENCODER_INPUTS, WARMUP_TEXTS, Task, TaskData, softmax


def qa_len(max_seq_len):
    """Question + option tokens kept for RACE: the original's 128, or less for short sequences."""
    return min(128, max_seq_len - 3)


class Race(Task):
    """Inputs [B, C, T] (C options per example), labels [B] (the right option); rows packed; long articles
    read with memory. Metric: accuracy."""

    name = "race"
    metric_names = ("accuracy",)
    best_metric = "accuracy"
    packs = True

    def rows_per_example(self, features):
        return features["input_ids"].shape[1]

    def read(self, path, tokenizer, max_seq_len, options):
        from xlnet_tf.data import finetuning, readers

        examples, report = readers.read_race(path, skip_bad_rows=options.skip_bad_rows)
        features, feature_report = finetuning.race_features(examples, tokenizer, max_seq_len,
                                                            max_qa_len=qa_len(max_seq_len),
                                                            max_doc_len=options.max_doc_len)
        return TaskData(examples, features, {**report, **feature_report})

    def recorded(self, setup, train):
        return {"num_choices": int(train.features["input_ids"].shape[1]), "max_qa_len": qa_len(setup.max_seq_len)}

    def head_model(self, config, run_options, dtype, document, head):
        from xlnet_tf.heads import XLNetForMultipleChoice

        return XLNetForMultipleChoice(config, run_options, dtype=dtype, **document)

    def loss(self, finetune_config):
        from xlnet_tf.heads import multiple_choice_loss

        return multiple_choice_loss

    def predictions(self, data, outputs, finetune_config):
        logits = outputs["logits"]
        return [{"id": ex.example_id, "answer": "ABCDEFGH"[i], "probabilities": p.tolist()}
                for ex, i, p in zip(data.examples, logits.argmax(-1), softmax(logits))]

    def evaluate(self, data, outputs, finetune_config):
        from xlnet_tf import metrics

        return metrics.race_accuracy(data.features["label_ids"], outputs["logits"].argmax(-1))

    def min_seq_len(self, finetune_config):
        """<sep> <sep> <cls> and one token."""
        return 4

    def warmup_inputs(self, finetune_config):
        texts = list(WARMUP_TEXTS)
        choices = int(finetune_config.get("num_choices", 4))
        options = [f"option {chr(ord('A') + i)}" for i in range(choices)]
        return [{"article": [texts[0]], "question": ["What is XLNet?"], "options": [options]},
                {"article": texts, "question": ["Which _ is it?", "Why?", ""], "options": [options] * 3}]

    def text_pieces(self, finetune_config, length, doc_len, width):
        """The article keeps its first max_doc_len (or max_seq_len) - 3 pieces at most; question + option keeps its
        last max_qa_len, so the question and the options are read from their end (one piece more: the question +
        option text is cut to max_qa_len pieces once they are joined)."""
        qa = min(int(finetune_config.get("max_qa_len", 128)), length - 3) + 1
        return {**super().text_pieces(finetune_config, length, doc_len, width),
                "article": ((doc_len or length) - 3, "first"), "question": (qa, "last"), "options": (qa, "last")}

    def serving_signatures(self, g, finetune_config, pack):
        """``serving_default(article, question, options [B, C])`` -> each option's logit and probability, the
        best option; ``predict_ids`` on ids ``[B, C, T]``."""
        import tensorflow as tf

        from xlnet_tf.data import graph_features as gf
        from xlnet_tf.data.buckets import PAD_MULTIPLE
        from xlnet_tf.tasks import graphs

        choices = int(finetune_config.get("num_choices", 4))
        max_qa_len = min(int(finetune_config.get("max_qa_len", 128)), g.length - 3)

        @graphs.signature_function([graphs.text_spec("article"), graphs.text_spec("question"),
                                    tf.TensorSpec([None, choices], tf.string, name="options")])
        def serving_default(article, question, options):
            with tf.device("/cpu:0"), tf.control_dependencies(graphs.same_batch(article, question, options)):
                # question + option is cut to the bytes of its kept pieces (max_qa_len: one less than the inputs)
                qa_bytes = (g.text_pieces["question"][0] - 1) * g.piece_bytes
                qa = gf.race_qa_text(g.cut(question, "question"), g.cut(options, "options"),
                                     last_bytes=qa_bytes + graphs.UTF8_MAX_BYTES)
                qa = graphs.cut_text(tf.reshape(qa, [-1]), qa_bytes, keep_last=True)
                features = gf.race_inputs(g.token_ids(article, "article"), g.token_ids(qa, "question"), choices,
                                          g.length, max_qa_len, pad_to_multiple=PAD_MULTIPLE, max_doc_len=g.doc_len)
                features = {k: tf.reshape(features[k], [-1, choices, tf.shape(features[k])[-1]])
                            for k in ENCODER_INPUTS}
            logits = g.head(features, pack=pack)["logits"]
            return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1),
                    "answer_index": tf.argmax(logits, -1)}

        return {"serving_default": serving_default,
                "predict_ids": graphs.encoder_ids_function(g, g.doc_len and g.length, choices)}


RACE = Race()
