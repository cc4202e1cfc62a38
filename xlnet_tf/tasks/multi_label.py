"""Multi-label: texts with any number of labels (JSONL: a list; TSV / CSV: separated by --label-separator),
each label its own sigmoid over the classification logits and its own threshold (0.5, or tuned on the eval
file for the best F1 with --tune-thresholds)."""

import logging

from xlnet_tf.errors import UserError
from xlnet_tf.tasks.base import TaskOptions
from xlnet_tf.tasks.classification import COLUMNS, LABEL_NAMES, SentenceTask, label_names

log = logging.getLogger(__name__)
# --label-separator / --tune-thresholds: FinetuneSetup.label_separator, tune_thresholds
LABEL_OPTIONS = TaskOptions(("--label-separator", "--tune-thresholds"), {"label_separator": ",",
                                                                          "tune_thresholds": False})


def sigmoid(logits):
    """Each logit's sigmoid, float64."""
    import numpy as np

    return 1.0 / (1.0 + np.exp(-np.asarray(logits, np.float64)))


def multi_label_decisions(outputs, finetune_config):
    """(scores [N, C] float64: each label's sigmoid, decisions [N, C] bool: score >= the label's threshold)."""
    import numpy as np

    scores = sigmoid(outputs["logits"])
    thresholds = np.asarray(finetune_config.get("thresholds") or [0.5] * scores.shape[1], np.float64)
    return scores, scores >= thresholds[None]


class MultiLabel(SentenceTask):
    """Labels [N, C] (1 for each of the example's labels): binary cross-entropy per label; micro / macro F1."""

    name = "multi-label"
    metric_names = ("micro_f1", "macro_f1", "micro_precision", "micro_recall", "subset_accuracy")
    best_metric = "micro_f1"
    named_labels = True
    per_example_labels = ("label_ids",)
    options = (COLUMNS, LABEL_OPTIONS, LABEL_NAMES)
    example_methods = {"classification": "tensorflow/serving/classify"}
    scores = "scores"

    def check_setup(self, setup):
        if setup.tune_thresholds and not setup.eval_file:
            raise UserError("--tune-thresholds tunes on --eval-file: give one")

    def recorded(self, setup, train):
        recorded = super().recorded(setup, train)
        return {**recorded, "label_separator": setup.label_separator,
                "thresholds": [0.5] * recorded["num_labels"]}

    def converted_config(self, max_seq_len, num_labels=None, label_names=None):
        # transformers' pipeline: a label applies when its sigmoid > 0.5
        return {**super().converted_config(max_seq_len, num_labels, label_names), "thresholds": [0.5] * num_labels}

    def loss(self, finetune_config):
        from xlnet_tf.heads import multi_label_loss

        return multi_label_loss

    def predictions(self, data, outputs, finetune_config):
        names = finetune_config["label_names"]
        scores, decided = multi_label_decisions(outputs, finetune_config)
        return [{"labels": [n for n, d in zip(names, row) if d], "scores": dict(zip(names, map(float, s)))}
                for s, row in zip(scores, decided)]

    def evaluate(self, data, outputs, finetune_config):
        from xlnet_tf import metrics

        _, decided = multi_label_decisions(outputs, finetune_config)
        results = metrics.multi_label_metrics(data.features["label_ids"], decided, finetune_config["label_names"])
        results["thresholds"] = list(finetune_config.get("thresholds") or [])
        return results

    def tunes(self, setup):
        return setup.tune_thresholds

    def tune(self, data, outputs, source):
        """Each label's threshold for the best F1 on `data`."""
        from xlnet_tf import metrics

        thresholds = metrics.tune_thresholds(data.features["label_ids"], sigmoid(outputs["logits"]))
        log.info("thresholds tuned on %s: %s", source, thresholds)
        return {"thresholds": thresholds}

    def answers(self, outputs, finetune_config):
        """Each label's sigmoid against its recorded threshold."""
        import tensorflow as tf

        from xlnet_tf.data import graph_features as gf

        logits = outputs["logits"]
        names = label_names(finetune_config, logits.shape[-1])
        scores = tf.sigmoid(logits)
        thresholds = tf.constant(finetune_config.get("thresholds") or [0.5] * len(names), tf.float32)
        applies = scores >= thresholds[None]
        chosen = tf.ragged.boolean_mask(tf.broadcast_to(tf.constant(names), tf.shape(scores)), applies)
        return {"logits": logits, "scores": scores, "label_applies": tf.cast(applies, tf.int32),
                "labels": gf.pad_to_longest(chosen, ""), "num_predicted": chosen.row_lengths()}


MULTI_LABEL = MultiLabel()
