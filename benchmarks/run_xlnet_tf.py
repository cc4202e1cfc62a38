"""xlnet-tf's own runners: the encoder forward, the training loop's fine-tuning and pretraining steps, and the
exported SavedModel's `encode` signature (text in, so tokenization is timed too); the LENGTH_TASKS are in
`run_lengths`, the DOCUMENT_TASKS in `run_documents`, the SERVING_TASKS in `serving`, the PRECISION_TASKS in
`run_precision`."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from xlnet_tf.benchmarks.common import (DOCUMENT_TASKS, GENERATE_TASKS, LENGTH_TASKS, MEMORY_TASKS, PRECISION_TASKS, SERVING_TASKS,
                                        Case, Unsupported, memory_length, synthetic_batch, time_iterations)

ENCODER_INPUTS = ("input_ids", "segment_ids", "padding_mask")
PRETRAIN_INPUTS = ENCODER_INPUTS + ("perm_mask", "target_mapping", "target_ids", "target_mask")
TRAINING_DROPOUT = 0.1


def run(case: Case) -> dict:
    """Times `case` (implementation "xlnet-tf" or "xlnet-tf-savedmodel") -> {"seconds", "note", ...}."""
    import keras

    if case.task in LENGTH_TASKS:
        from xlnet_tf.benchmarks import run_lengths

        return run_lengths.run(case)
    if case.task in DOCUMENT_TASKS:
        from xlnet_tf.benchmarks import run_documents

        return run_documents.run(case)
    if case.task in SERVING_TASKS:
        from xlnet_tf.benchmarks import serving

        return serving.run(case)
    if case.task in PRECISION_TASKS:
        from xlnet_tf.benchmarks import run_precision

        return run_precision.run(case)
    if case.task in GENERATE_TASKS:
        from xlnet_tf.benchmarks import run_generate

        return run_generate.run_xlnet_tf(case)

    keras.utils.set_random_seed(0)
    if case.implementation == "xlnet-tf-savedmodel":
        return _saved_model(case)
    if case.task in MEMORY_TASKS and case.implementation != "xlnet-tf":
        raise Unsupported(f"{case.task} is measured for xlnet-tf only")
    return {"inference": _inference, "finetune": _finetune, "pretrain": _pretrain}[case.step_task](case)


def _config(case):
    from xlnet_tf.config import XLNetConfig

    return XLNetConfig(**case.dims)


def _dtype(case):
    return "mixed_bfloat16" if case.precision == "bfloat16" else "float32"


def _training_options(case):
    """Dropout 0.1, and the case's --recompute mode (MEMORY_TASKS; "none" otherwise)."""
    from xlnet_tf.config import RunOptions

    return RunOptions(dropout=TRAINING_DROPOUT, dropatt=TRAINING_DROPOUT, recompute=case.recompute or "none")


def _inference(case):
    import tensorflow as tf

    from xlnet_tf.model import XLNetModel

    batch = {k: tf.constant(v) for k, v in synthetic_batch(case).items() if k in ENCODER_INPUTS}
    model = XLNetModel(_config(case), dtype=_dtype(case))
    forward = tf.function(lambda inputs: model(inputs)["sequence_output"], jit_compile=case.xla)
    seconds = time_iterations(lambda: forward(batch).numpy(), case.warmup, case.iterations)
    result = {"seconds": seconds, "note": f"tf.function{', XLA' if case.xla else ''}"}
    if case.precision != "float32":
        # The same weights in float32: how far reduced precision moves the output.
        reference = XLNetModel(_config(case), dtype="float32")
        reference.set_weights(model.get_weights())
        exact = reference(batch)["sequence_output"].numpy()
        approx = forward(batch).numpy().astype(np.float32)
        result["max_abs_diff_vs_float32"] = float(np.max(np.abs(approx - exact)))
        result["rel_error_vs_float32"] = float(np.linalg.norm(approx - exact) / np.linalg.norm(exact))
    return result


def train_steps(case, build_model, loss_fn, keys, model_kwargs=None, batch=None):
    """Times single steps of xlnet_tf's training loop (AdamW, clipping at 1.0) on one repeated batch: `batch`
    (numpy arrays), by default `synthetic_batch(case)`, restricted to `keys`. On a GPU / TPU the result has
    `peak_device_mb`: the largest device memory in use at any time since the model was built; on a CPU whose
    allocator keeps statistics, `peak_tensor_mb` (see `cpu_tensor_peak_mb`)."""
    import tensorflow as tf

    from xlnet_tf.hardware import peak_memory_mb
    from xlnet_tf.training import strategies
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    features = {k: v for k, v in (synthetic_batch(case) if batch is None else batch).items() if k in keys}

    def dataset_fn(input_context, start_batch):
        return tf.data.Dataset.from_tensors(features).repeat().prefetch(2)

    options = TrainingOptions(train_steps=10**6, batch_size=case.batch_size, learning_rate=2e-5,
                              steps_per_loop=1, save_every=10**6, jit_compile=case.xla)
    with tempfile.TemporaryDirectory(prefix="xlnet-tf-bench-") as model_dir:
        trainer = Trainer(strategies.make_strategy(), build_model, loss_fn, dataset_fn, options, model_dir,
                          model_kwargs=model_kwargs)
        iterator, mems = trainer.data_iterator(), trainer.initial_mems()
        losses = []

        def step():
            loss = trainer.run_steps(iterator, mems, 1)[0]
            losses.append(float(loss))

        seconds = time_iterations(step, case.warmup, case.iterations)
        peaks = {"peak_device_mb": peak_memory_mb(trainer.strategy).get("peak_device_memory_mb"),
                 "peak_tensor_mb": cpu_tensor_peak_mb()}
    return {"seconds": seconds, "note": f"Trainer step{', XLA replica step' if case.xla else ''}",
            "loss_first": losses[0], "loss_last": losses[-1], **{k: v for k, v in peaks.items() if v}}


def cpu_tensor_peak_mb():
    """The most memory TensorFlow's tensors held on the CPU at once, MB, when its CPU allocator keeps statistics
    (a BFC allocator: TF_CPU_ALLOCATOR_USE_BFC=true, which the memory tasks' workers set), else None."""
    import tensorflow as tf

    try:
        return tf.config.experimental.get_memory_info("CPU:0")["peak"] / 2**20
    except (ValueError, tf.errors.OpError):
        return None


def _finetune(case):
    from xlnet_tf.heads import classification_loss, XLNetForSequenceClassification

    run_options = _training_options(case)
    return train_steps(
        case,
        lambda: XLNetForSequenceClassification(_config(case), run_options, num_labels=2, dtype=_dtype(case)),
        classification_loss,
        ENCODER_INPUTS + ("label_ids",),
    )


def _pretrain(case):
    from xlnet_tf.model import XLNetPretrainer
    from xlnet_tf.training.pretrain import TRAINING_CALL, pretraining_loss

    run_options = _training_options(case)
    return train_steps(
        case,
        lambda: XLNetPretrainer(_config(case), run_options, dtype=_dtype(case)),
        pretraining_loss,
        PRETRAIN_INPUTS,
        model_kwargs=TRAINING_CALL,
    )


def _saved_model(case):
    """Exports a random classifier (precision float32, vocabulary from CPython's docs) and times its `encode`
    signature on texts long enough to fill seq_len."""
    import tensorflow as tf

    if case.task != "inference" or case.precision != "float32" or case.xla:
        raise Unsupported("the SavedModel is benchmarked for float32 inference without XLA only")
    with tempfile.TemporaryDirectory(prefix="xlnet-tf-bench-export-") as work:
        export = export_random_classifier(work, _config(case), case.seq_len, 2000,
                                          os.path.join(work, "export", "classifier"))
        encode = tf.saved_model.load(export).signatures["encode"]
        texts = tf.constant(_long_texts(case.batch_size))
        seconds = time_iterations(lambda: encode(text=texts)["sequence_output"].numpy(), case.warmup,
                                  case.iterations)
    return {"seconds": seconds, "note": "tf.saved_model.load(...).signatures['encode'] on raw text"}


def export_random_classifier(work, config, max_seq_len, vocab_size, export_base, corpus_lines=None,
                             label_names=("0", "1"), max_doc_len=None, precision="float32"):
    """A randomly initialised XLNet classifier with a SentencePiece model trained on `corpus_lines` (default:
    every line of CPython's documentation topics), saved as a fine-tuned directory under `work` and exported
    to `export_base` (BASE/NAME), computing in `precision` (`export --precision`) -> the export's version
    directory. With `max_doc_len`, the classifier reads documents of up to that many tokens as segments of
    max_seq_len with memory (`--long-doc memory`, memory of every earlier segment)."""
    from xlnet_tf.config import RunOptions
    from xlnet_tf.export.exporter import export_model
    from xlnet_tf.heads import build_head_model, head_arguments, save_finetuned
    from xlnet_tf.tokenization import train_spm
    from xlnet_tf.data.graph_features import document_width

    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as handle:
        handle.write("\n".join(doc_lines() if corpus_lines is None else corpus_lines) + "\n")
    spm = train_spm(corpus, os.path.join(work, "spiece"), vocab_size, minloglevel=2)
    finetune_config = {"task": "classification", "lower_case": False, "spm_model": "spiece.model",
                       "max_seq_len": max_seq_len, "num_labels": len(label_names), "label_names": list(label_names)}
    if max_doc_len:
        finetune_config.update(long_doc="memory", max_doc_len=max_doc_len, grad_segments=1,
                               mem_len=memory_length(document_width(max_seq_len, max_doc_len) // max_seq_len, max_seq_len))
    model = build_head_model("classification", config, RunOptions(dropout=0.0, dropatt=0.0),
                             **head_arguments(finetune_config))
    finetuned = os.path.join(work, "finetuned")
    os.rename(spm, os.path.join(work, "spiece.model"))
    save_finetuned(model, finetuned, finetune_config, extra_files=[os.path.join(work, "spiece.model")])
    return export_model(finetuned, export_base, precision=precision)


def doc_lines():
    """The non-empty lines of CPython's bundled documentation topics, stripped."""
    import pydoc_data.topics

    return [line.strip() for _, text in sorted(pydoc_data.topics.topics.items())
            for line in text.splitlines() if line.strip()]


def _long_texts(count):
    """`count` different texts of a few hundred words each (they are truncated to seq_len)."""
    lines = doc_lines()
    return [" ".join(lines[i * 40:(i + 1) * 40]) for i in range(count)]
