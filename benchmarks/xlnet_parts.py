"""What xlnet-tf's runners share: the architecture of a case (`xlnet_config`), the training loop's steps timed on
one repeated batch (`train_steps`, and the CPU tensor memory it reports), and the random classifier that the
export tasks (the lengths, documents, serving and precision groups, the SavedModel's `encode`) export, with its
vocabulary trained on CPython's documentation (`doc_lines`, also the source of their texts)."""

from __future__ import annotations

import os
import tempfile

from xlnet_tf.benchmarks.common import memory_length, synthetic_batch, time_iterations

ENCODER_INPUTS = ("input_ids", "segment_ids", "padding_mask")
EXPORT_VOCAB = 2000  # the SentencePiece model of the exported classifier (CPython's documentation)


def xlnet_config(case):
    """The case's architecture (`case.dims`) as an XLNetConfig."""
    from xlnet_tf.config import XLNetConfig

    return XLNetConfig(**case.dims)


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


def export_random_classifier(work, config, max_seq_len, vocab_size, export_base, corpus_lines=None,
                             label_names=("0", "1"), max_doc_len=None, precision="float32"):
    """A randomly initialised XLNet classifier with a SentencePiece model trained on `corpus_lines` (default:
    every line of CPython's documentation topics), saved as a fine-tuned directory under `work` and exported
    to `export_base` (BASE/NAME), computing in `precision` (`export --precision`) -> the export's version
    directory. With `max_doc_len`, the classifier reads documents of up to that many tokens as segments of
    max_seq_len with memory (`--long-doc memory`, memory of every earlier segment)."""
    from xlnet_tf.config import RunOptions
    from xlnet_tf.export.exporter import export_model
    from xlnet_tf.heads import head_arguments, save_finetuned
    from xlnet_tf.tasks import build_head_model
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
