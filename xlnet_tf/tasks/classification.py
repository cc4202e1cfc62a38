"""Sentence tasks: one text or a pair (TSV / CSV / JSONL rows, `data.readers.read_examples`) -> one answer per
example, from the <cls> summary (`heads.XLNetForSequenceClassification`). `SentenceTask` is what they share
(multi-label too); `CLASSIFICATION` (one class of num_labels) and `REGRESSION` (one number) are tasks."""

from xlnet_tf.tasks.base import ENCODER_INPUTS, MIN_TEXT_PIECES, WARMUP_TEXTS, Task, TaskData, TaskOptions, softmax

# --text-a-column / --text-b-column / --label-column: FinetuneSetup.columns
COLUMNS = TaskOptions(("--text-a-column", "--text-b-column", "--label-column"), {"columns": None})
# --label-names: FinetuneSetup.label_names (names for the training file's label values)
LABEL_NAMES = TaskOptions(("--label-names",), {"label_names": None})


def label_names(finetune_config, count):
    """The recorded label names as strings, or "0" ... for a model that records none."""
    return [str(name) for name in finetune_config.get("label_names") or range(count)]


class SentenceTask(Task):
    """A text (or a pair: `pairs` in finetune_config) in, one answer per example; long documents with memory,
    rows packed. Exports `serving_default(text)` (or `(text_a, text_b)`) and a Classify / Regress signature on
    tf.Examples whose bytes features have the names of serving_default's inputs."""

    packs = True
    options = (COLUMNS,)
    reads_ids = True
    min_text_pieces = MIN_TEXT_PIECES
    scores = "probabilities"  # the answer the Classify signature gives as every label's score

    def read(self, path, tokenizer, max_seq_len, options):
        from xlnet_tf.data import finetuning, labels, readers

        columns = {k: v for k, v in (options.columns or {}).items() if options.labeled or k != "label"}
        examples, report = readers.read_examples(path, task=self.name, label_separator=options.label_separator,
                                                 skip_bad_rows=options.skip_bad_rows, require_labels=options.labeled,
                                                 id_column=options.id_column, **columns)
        examples = labels.renamed(examples, options.label_values, options.label_list)
        features, feature_report = finetuning.classification_features(examples, tokenizer, max_seq_len,
                                                                      options.label_list,
                                                                      max_doc_len=options.max_doc_len)
        return TaskData(examples, features, {**report, **feature_report})

    def check_files(self, setup):
        """A training or eval file without a label column is refused from its first line (`readers.check_labels`)."""
        from xlnet_tf.data import readers

        for path in (setup.train_file, setup.eval_file):
            if path:
                readers.check_labels(path, **(setup.columns or {}))

    def recorded(self, setup, train):
        recorded = {"pairs": bool(train.report.get("pairs", 0))}
        if setup.columns:  # evaluate and predict read their files' columns the same way
            recorded["columns"] = dict(setup.columns)
        return {**recorded, **super().recorded(setup, train)}

    def head_model(self, config, run_options, dtype, document, head):
        from xlnet_tf.heads import XLNetForSequenceClassification

        return XLNetForSequenceClassification(config, run_options, num_labels=head.get("num_labels", 2), dtype=dtype,
                                              **document)

    def text_inputs(self, finetune_config):
        return ("text_a", "text_b") if finetune_config.get("pairs") else ("text",)

    def text_pieces(self, finetune_config, length, doc_len, width):
        """A single text keeps its first max_doc_len (or max_seq_len) - 2 pieces; a pair's text_a as many (a pair's A
        keeps as many as it does with any longer A), text_b at most max_seq_len - 3."""
        budget = doc_len or length
        pieces = super().text_pieces(finetune_config, length, doc_len, width)
        if finetune_config.get("pairs"):
            pieces.update(text_a=(budget - 2, "first"), text_b=(length - 3, "first"))
        return pieces

    def warmup_inputs(self, finetune_config):
        if not finetune_config.get("pairs"):
            return super().warmup_inputs(finetune_config)
        texts = list(WARMUP_TEXTS)
        return [{"text_a": [t], "text_b": [u]} for t, u in zip(texts, texts[::-1])] + [
            {"text_a": texts, "text_b": texts[::-1]}]

    def answers(self, outputs, finetune_config):
        """serving_default's outputs from the head's (tensors)."""
        raise NotImplementedError

    def example_outputs(self, answers, finetune_config):
        """The tf.Example signature's outputs (TensorFlow Serving's Classify): `classes` string [B, C] (the label
        names) and each label's score, from serving_default's `answers`."""
        import tensorflow as tf

        scores = answers[self.scores]
        names = label_names(finetune_config, scores.shape[-1])
        return {"classes": tf.broadcast_to(tf.constant(names), tf.shape(scores)), "scores": scores}

    def serving_signatures(self, g, finetune_config, pack):
        import tensorflow as tf

        from xlnet_tf.tasks import graphs

        names = self.text_inputs(finetune_config)
        specs = [graphs.text_spec(name) for name in names]

        def answers(features):
            return self.answers(g.head({k: features[k] for k in ENCODER_INPUTS}, pack=pack), finetune_config)

        if len(names) == 2:
            @graphs.signature_function(specs)
            def serving_default(text_a, text_b):
                return answers(g.classification_inputs(text_a, text_b))
        else:
            @graphs.signature_function(specs)
            def serving_default(text):
                return answers(g.classification_inputs(text))

        @graphs.signature_function([tf.TensorSpec([None], tf.string, name="inputs")])
        def on_examples(inputs):
            # serving_default's traced function, called: one copy of the model in the SavedModel.
            return self.example_outputs(serving_default(*graphs.parse_text_examples(inputs, names, g.cut)),
                                        finetune_config)

        (example_signature,) = self.example_methods
        return {example_signature: on_examples, "serving_default": serving_default,
                "predict_ids": graphs.encoder_ids_function(g, g.doc_len and g.length)}


class Classification(SentenceTask):
    """One class of `num_labels` per text: softmax cross-entropy; accuracy, F1 and MCC."""

    name = "classification"
    metric_names = ("accuracy", "f1", "macro_f1", "mcc")  # f1: two classes only (evaluation during training)
    best_metric = "accuracy"
    named_labels = True
    options = (COLUMNS, LABEL_NAMES)
    example_methods = {"classification": "tensorflow/serving/classify"}

    def loss(self, finetune_config):
        from xlnet_tf.heads import classification_loss

        return classification_loss

    def predictions(self, data, outputs, finetune_config):
        logits = outputs["logits"]
        names = label_names(finetune_config, logits.shape[1])
        return [{"label": names[i], "label_id": int(i), "probabilities": p.tolist()}
                for i, p in zip(logits.argmax(-1), softmax(logits))]

    def evaluate(self, data, outputs, finetune_config):
        from xlnet_tf import metrics

        return metrics.classification_metrics(data.features["label_ids"], outputs["logits"].argmax(-1))

    def answers(self, outputs, finetune_config):
        import tensorflow as tf

        logits = outputs["logits"]
        label_id = tf.argmax(logits, -1)  # first maximum, as numpy's argmax
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1), "label_id": label_id,
                "label": tf.gather(tf.constant(label_names(finetune_config, logits.shape[-1])), label_id)}


class Regression(SentenceTask):
    """One number per text: squared error; Pearson, Spearman and MSE."""

    name = "regression"
    metric_names = ("pearson", "spearman", "mse")  # mse: lower is better
    best_metric = "pearson"
    example_methods = {"regression": "tensorflow/serving/regress"}

    def head_model(self, config, run_options, dtype, document, head):
        from xlnet_tf.heads import XLNetForSequenceClassification

        return XLNetForSequenceClassification(config, run_options, regression=True, dtype=dtype, **document)

    def loss(self, finetune_config):
        from xlnet_tf.heads import regression_loss

        return regression_loss

    def predictions(self, data, outputs, finetune_config):
        return [{"prediction": float(p)} for p in outputs["predictions"]]

    def evaluate(self, data, outputs, finetune_config):
        from xlnet_tf import metrics

        return metrics.regression_metrics(data.features["label_ids"], outputs["predictions"])

    def answers(self, outputs, finetune_config):
        return {"prediction": outputs["predictions"]}

    def example_outputs(self, answers, finetune_config):
        """TensorFlow Serving's Regress: `outputs` float32 [B]."""
        return {"outputs": answers["prediction"]}


CLASSIFICATION = Classification()
REGRESSION = Regression()
