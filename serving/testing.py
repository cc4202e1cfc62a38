"""Small stand-in SavedModels with the export contract's shape, for tests and the serving benchmark.

They are not XLNet: a classifier whose logits come from string lengths, an extractive "QA" model that
answers with the start of the context, an encoder of character codes. What they share with real exports
is what the server sees: `tf.function` signatures on [None] tf.string inputs returning float, int64 and
string outputs, a TF Text op (`normalize_utf8`), variables to restore, in-graph UTF-8 validation
(`unicode_decode(errors="strict")`: INVALID_ARGUMENT on bad bytes), an assertion that refuses an empty
batch, and `assets.extra/tf_serving_warmup_requests`.

Signatures:
    classifier: serving_default(text) -> logits [B,2], probabilities [B,2], label_id [B] int64, label [B]
                pair(text_a, text_b) -> the same; encode(text) -> sequence_output [B,8,4],
                pooled_output [B,4], padding_mask [B,8]; slow(seconds [B] float) -> elapsed [B] (= seconds), slept [B] (the sleep as timed inside)
                (sleeps max(seconds), without using CPU); busy(text) -> score [B] (BUSY_STEPS
                tanh(x W) steps of width BUSY_WIDTH per text: CPU time proportional to the batch);
                scale(x [B,1] float) -> y = 2x; on serialized tf.Examples whose bytes feature
                `text` holds the text (TensorFlow Serving's Classify / Regress API, with its method
                names): classification(inputs) -> classes [B,2] (the labels), scores [B,2] (the
                probabilities); regression(inputs) -> outputs [B] (the probability of "positive")
    qa:         serving_default(question, context) -> answer [B] string, answer_start/answer_end [B]
                int64, score [B], no_answer_probability [B]; encode(text) as above
"""

from __future__ import annotations

import os

LABELS = ("negative", "positive")
BUSY_STEPS, BUSY_WIDTH = 64, 256
ENCODE_LENGTH = 8
ENCODE_WIDTH = 4


def _module(kind, offset):
    import tensorflow as tf
    import tensorflow_text as tf_text

    def checked_lengths(text):
        """Characters per text; INVALID_ARGUMENT on non-UTF-8 or an empty batch."""
        tf.debugging.assert_positive(tf.size(text), message="empty batch: this model needs at least one text")
        chars = tf.strings.unicode_decode(text, "UTF-8", errors="strict")
        normalized = tf_text.normalize_utf8(text, "NFKC")
        return chars, tf.cast(chars.row_lengths(), tf.float32), normalized

    class Classifier(tf.Module):
        def __init__(self):
            super().__init__()
            self.weights = tf.Variable([[0.08, -0.05], [-0.3, 0.4], [0.1, -0.1]], name="weights")
            self.offset = tf.Variable([offset, -offset], name="offset")
            self.labels = tf.constant(LABELS)
            self.encoder = tf.Variable([[0.01, -0.02, 0.03, 0.005]], name="encoder")
            self.busy_weights = tf.Variable(tf.random.stateless_normal([BUSY_WIDTH, BUSY_WIDTH], [1, 2]) * 0.05,
                                            name="busy_weights")

        def _classify(self, text):
            _, lengths, normalized = checked_lengths(text)
            words = tf.cast(tf.strings.split(normalized).row_lengths(), tf.float32)
            features = tf.stack([lengths, words, tf.ones_like(lengths)], axis=-1)
            logits = tf.matmul(features, self.weights) + self.offset
            label_id = tf.argmax(logits, axis=-1, output_type=tf.int64)
            return {"logits": logits, "probabilities": tf.nn.softmax(logits), "label_id": label_id,
                    "label": tf.gather(self.labels, label_id)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
        def classify(self, text):
            return self._classify(text)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")], autograph=False)
        def classify_examples(self, inputs):
            probabilities = self._classify(self._example_text(inputs))["probabilities"]
            return {"classes": tf.broadcast_to(self.labels, tf.shape(probabilities)), "scores": probabilities}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")], autograph=False)
        def regress_examples(self, inputs):
            return {"outputs": self._classify(self._example_text(inputs))["probabilities"][:, 1]}

        @staticmethod
        def _example_text(serialized):
            return tf.io.parse_example(serialized, {"text": tf.io.FixedLenFeature([], tf.string)})["text"]

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text_a"),
                                      tf.TensorSpec([None], tf.string, name="text_b")], autograph=False)
        def pair(self, text_a, text_b):
            return self._classify(tf.strings.join([text_a, text_b], separator=" | "))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
        def encode(self, text):
            chars, _, _ = checked_lengths(text)
            codes = tf.cast(chars[:, :ENCODE_LENGTH].to_tensor(shape=[None, ENCODE_LENGTH]), tf.float32)
            mask = tf.cast(codes > 0, tf.float32)
            sequence = codes[:, :, None] * self.encoder[None] * mask[:, :, None]
            pooled = tf.reduce_sum(sequence, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1, keepdims=True), 1.0)
            return {"sequence_output": sequence, "pooled_output": pooled, "padding_mask": mask}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="seconds")], autograph=False)
        def slow(self, seconds):
            micros = tf.cast(tf.reduce_max(tf.concat([seconds, [0.0]], 0)) * 1e6, tf.int64)
            empty = tf.data.Dataset.range(0)
            began = tf.timestamp()
            with tf.control_dependencies([began]):
                sleeping = tf.raw_ops.SleepDataset(input_dataset=empty._variant_tensor, sleep_microseconds=micros,
                                                   output_types=[tf.int64], output_shapes=[[]])
                total = tf.data.experimental.from_variant(sleeping, empty.element_spec).reduce(
                    tf.constant(0, tf.int64), tf.autograph.experimental.do_not_convert(lambda a, b: a + b))
            with tf.control_dependencies([total]):
                slept = tf.timestamp() - began  # as the servable's clock (the wall clock) saw the sleep
            return {"elapsed": seconds + tf.cast(total, tf.float32),
                    "slept": tf.fill(tf.shape(seconds), tf.cast(slept, tf.float32))}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
        def busy(self, text):
            _, lengths, _ = checked_lengths(text)
            state = tf.tile(lengths[:, None], [1, BUSY_WIDTH]) * 1e-3

            def step(i, x):
                return i + 1, tf.tanh(tf.matmul(x, self.busy_weights) + x)

            _, state = tf.while_loop(lambda i, _: i < BUSY_STEPS, step, [tf.constant(0), state])
            return {"score": tf.reduce_sum(state, axis=-1)}

        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")], autograph=False)
        def scale(self, x):
            return {"y": 2.0 * x}

    class QA(Classifier):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="question"),
                                      tf.TensorSpec([None], tf.string, name="context")], autograph=False)
        def answer(self, question, context):
            _, q_len, _ = checked_lengths(question)
            _, c_len, _ = checked_lengths(context)
            end = tf.cast(tf.minimum(q_len, c_len), tf.int64)
            answer = tf.strings.substr(context, tf.zeros_like(end), end, unit="UTF8_CHAR")
            score = q_len / (c_len + 1.0) + self.offset[0]
            return {"answer": answer, "answer_start": tf.zeros_like(end), "answer_end": end, "score": score,
                    "no_answer_probability": tf.sigmoid(q_len - c_len)}

    return QA() if kind == "qa" else Classifier()


def write_warmup_requests(saved_model_dir, requests):
    """Writes assets.extra/tf_serving_warmup_requests: requests = [(signature_name, {alias: values})]."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    from .tensors import from_ndarray

    directory = os.path.join(saved_model_dir, "assets.extra")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tf_serving_warmup_requests")
    with tf.io.TFRecordWriter(path) as writer:
        for signature_name, inputs in requests:
            request = predict_pb2.PredictRequest()
            request.model_spec.signature_name = signature_name
            for alias, values in inputs.items():
                request.inputs[alias].CopyFrom(from_ndarray(values))
            entry = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(entry.SerializeToString())
    return path


def build_standin(directory, kind="classifier", offset=0.0, warmup=True):
    """Saves a stand-in SavedModel (kind 'classifier' or 'qa') into `directory` (a version directory)."""
    import tensorflow as tf

    module = _module(kind, float(offset))
    if kind == "qa":
        signatures = {"serving_default": module.answer, "encode": module.encode}
        warm = [("serving_default", {"question": ["who wrote it?"], "context": ["Ada wrote it."]}),
                ("encode", {"text": ["warm up"]})]
    else:
        signatures = {"serving_default": module.classify, "pair": module.pair, "encode": module.encode,
                      "slow": module.slow, "busy": module.busy, "scale": module.scale,
                      "classification": module.classify_examples,
                      "regression": module.regress_examples}
        warm = [("serving_default", {"text": ["warm up", "a second text"]}), ("encode", {"text": ["warm up"]})]
    tf.saved_model.save(module, str(directory), signatures=signatures)
    if kind != "qa":
        from xlnet_tf.export.exporter import set_method_names

        set_method_names(str(directory), {"classification": "tensorflow/serving/classify",
                                          "regression": "tensorflow/serving/regress"})
    if warmup:
        write_warmup_requests(str(directory), warm)
    return str(directory)
