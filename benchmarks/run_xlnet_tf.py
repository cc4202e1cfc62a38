"""xlnet-tf's own runners: the encoder forward, the training loop's fine-tuning and pretraining steps, and the
exported SavedModel's `encode` signature (text in, so tokenization is timed too); the LENGTH_TASKS are in
`run_lengths`, the DOCUMENT_TASKS in `run_documents`, the SERVING_TASKS in `serving`, the PRECISION_TASKS in
`run_precision`, "generate" in `run_generate` (`worker.runner` picks the runner of a case)."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from xlnet_tf.benchmarks.common import (MEMORY_TASKS, Case, Unsupported, keras_dtype, synthetic_batch,
                                        time_iterations)
from xlnet_tf.benchmarks.xlnet_parts import ENCODER_INPUTS, doc_lines, train_steps, xlnet_config

PRETRAIN_INPUTS = ENCODER_INPUTS + ("perm_mask", "target_mapping", "target_ids", "target_mask")
TRAINING_DROPOUT = 0.1


def run(case: Case) -> dict:
    """Times `case` (implementation "xlnet-tf" or "xlnet-tf-savedmodel", a step task) -> {"seconds", "note", ...}."""
    import keras

    keras.utils.set_random_seed(0)
    if case.implementation == "xlnet-tf-savedmodel":
        return _saved_model(case)
    if case.task in MEMORY_TASKS and case.implementation != "xlnet-tf":
        raise Unsupported(f"{case.task} is measured for xlnet-tf only")
    return {"inference": _inference, "finetune": _finetune, "pretrain": _pretrain}[case.step_task](case)


def _training_options(case):
    """Dropout 0.1, and the case's --recompute mode (MEMORY_TASKS; "none" otherwise)."""
    from xlnet_tf.config import RunOptions

    return RunOptions(dropout=TRAINING_DROPOUT, dropatt=TRAINING_DROPOUT, recompute=case.recompute or "none")


def _inference(case):
    import tensorflow as tf

    from xlnet_tf.model import XLNetModel

    batch = {k: tf.constant(v) for k, v in synthetic_batch(case).items() if k in ENCODER_INPUTS}
    model = XLNetModel(xlnet_config(case), dtype=keras_dtype(case))
    forward = tf.function(lambda inputs: model(inputs)["sequence_output"], jit_compile=case.xla, autograph=False)
    seconds = time_iterations(lambda: forward(batch).numpy(), case.warmup, case.iterations)
    result = {"seconds": seconds, "note": f"tf.function{', XLA' if case.xla else ''}"}
    if case.precision != "float32":
        # The same weights in float32: how far reduced precision moves the output.
        reference = XLNetModel(xlnet_config(case), dtype="float32")
        reference.set_weights(model.get_weights())
        exact = reference(batch)["sequence_output"].numpy()
        approx = forward(batch).numpy().astype(np.float32)
        result["max_abs_diff_vs_float32"] = float(np.max(np.abs(approx - exact)))
        result["rel_error_vs_float32"] = float(np.linalg.norm(approx - exact) / np.linalg.norm(exact))
    return result


def _finetune(case):
    from xlnet_tf.heads import classification_loss, XLNetForSequenceClassification

    run_options = _training_options(case)
    return train_steps(
        case,
        lambda: XLNetForSequenceClassification(xlnet_config(case), run_options, num_labels=2, dtype=keras_dtype(case)),
        classification_loss,
        ENCODER_INPUTS + ("label_ids",),
    )


def _pretrain(case):
    from xlnet_tf.model import XLNetPretrainer
    from xlnet_tf.training.pretrain import TRAINING_CALL, pretraining_loss

    run_options = _training_options(case)
    return train_steps(
        case,
        lambda: XLNetPretrainer(xlnet_config(case), run_options, dtype=keras_dtype(case)),
        pretraining_loss,
        PRETRAIN_INPUTS,
        model_kwargs=TRAINING_CALL,
    )


def _saved_model(case):
    """Exports a random classifier (precision float32, vocabulary from CPython's docs) and times its `encode`
    signature on texts long enough to fill seq_len."""
    import tensorflow as tf

    from xlnet_tf.benchmarks.xlnet_parts import export_random_classifier

    if case.task != "inference" or case.precision != "float32" or case.xla:
        raise Unsupported("the SavedModel is benchmarked for float32 inference without XLA only")
    with tempfile.TemporaryDirectory(prefix="xlnet-tf-bench-export-") as work:
        export = export_random_classifier(work, xlnet_config(case), case.seq_len, 2000,
                                          os.path.join(work, "export", "classifier"))
        encode = tf.saved_model.load(export).signatures["encode"]
        texts = tf.constant(_long_texts(case.batch_size))
        seconds = time_iterations(lambda: encode(text=texts)["sequence_output"].numpy(), case.warmup,
                                  case.iterations)
    return {"seconds": seconds, "note": "tf.saved_model.load(...).signatures['encode'] on raw text"}


def _long_texts(count):
    """`count` different texts of a few hundred words each (they are truncated to seq_len)."""
    lines = doc_lines()
    return [" ".join(lines[i * 40:(i + 1) * 40]) for i in range(count)]
