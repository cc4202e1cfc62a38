"""xlnet-tf on long documents (the DOCUMENT_TASKS): documents of S segments of seq_len tokens read in order,
each segment attending to the Transformer-XL memory of the ones before (`XLNetModel.encode_document`).

Fine-tuning: the classification head with `segment_len` = seq_len and memory of every earlier segment, timed
step by step in the training loop (`xlnet_parts.train_steps`) on rows of S * seq_len real tokens built by
the library's feature builder (`graph_features.classification_inputs` with max_doc_len: left-padded, `<cls>`
last). Latency: one export of a random classifier fine-tuned with `--long-doc memory` (max_doc_len = the
largest S * seq_len), whose `serving_default` runs the segments in a `tf.while_loop`, timed in process on one
text of about S * seq_len tokens per S (the lengths tasks' export, texts and request timing).
"""

from __future__ import annotations

import tempfile

import numpy as np

from xlnet_tf.benchmarks.common import SPECIAL_TOKENS, Case, Unsupported, memory_length

TRAINING_DROPOUT = 0.1
IMPLEMENTATION = {"documents-finetune": "xlnet-tf", "documents-latency": "xlnet-tf-savedmodel"}


def run(case: Case) -> dict:
    """Times `case` (task in DOCUMENT_TASKS) -> its result dict (see each task's function)."""
    import keras

    if case.implementation != IMPLEMENTATION[case.task]:
        raise Unsupported(f"{case.task} is measured for {IMPLEMENTATION[case.task]}, not {case.implementation}")
    if case.precision != "float32" or case.xla:
        raise Unsupported("the documents tasks are measured in float32 without XLA")
    if not case.segments or min(case.segments) < 1:
        raise Unsupported(f"{case.task} needs segment counts >= 1, got {case.segments!r}")
    keras.utils.set_random_seed(0)
    return {"documents-finetune": _finetune, "documents-latency": _latency}[case.task](case)


def document_batch(case: Case, segments, seed=0):
    """`case.batch_size` classification rows of `segments` * seq_len real tokens each (random ids in
    [10, n_token), then `<sep> <cls>`), as `classification_inputs` lays out documents -> numpy int32
    input_ids, segment_ids, padding_mask [B, S * seq_len] and label_ids [B]."""
    import tensorflow as tf

    from xlnet_tf.data import graph_features

    width = segments * case.seq_len
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, case.dims["n_token"], size=(case.batch_size, width - SPECIAL_TOKENS), dtype=np.int32)
    rows = graph_features.classification_inputs(tf.RaggedTensor.from_tensor(ids), None, case.seq_len,
                                                max_doc_len=width)
    features = {k: np.asarray(rows[k]) for k in ("input_ids", "segment_ids", "padding_mask")}
    return {**features, "label_ids": rng.integers(0, 2, size=case.batch_size, dtype=np.int32)}


def _finetune(case):
    """`case.warmup` untimed then `case.iterations` timed classification steps (forward, backward, AdamW;
    dropout 0.1) on one repeated `document_batch` of S = case.segments[0] segments, reading the memory of every
    earlier segment with gradient through the last `case.grad_segments` segments' (0: all of them, the
    default of `finetune --long-doc memory`; 1: none, the paper's stop_gradient) and `case.recompute`.
    -> seconds [steps], timed_examples, row_tokens, mem_len, loss_first, loss_last and the peak memory
    (`train_steps`)."""
    from xlnet_tf.benchmarks.xlnet_parts import ENCODER_INPUTS, train_steps
    from xlnet_tf.config import RunOptions, XLNetConfig
    from xlnet_tf.heads import XLNetForSequenceClassification, classification_loss

    (segments,) = case.segments
    mem_len = memory_length(segments, case.seq_len)
    recompute = case.recompute or "none"
    run_options = RunOptions(dropout=TRAINING_DROPOUT, dropatt=TRAINING_DROPOUT, recompute=recompute)

    def build_model():
        return XLNetForSequenceClassification(XLNetConfig(**case.dims), run_options, num_labels=2,
                                              segment_len=case.seq_len, mem_len=mem_len,
                                              grad_segments=case.grad_segments)

    result = train_steps(case, build_model, classification_loss, ENCODER_INPUTS + ("label_ids",),
                         batch=document_batch(case, segments))
    return {**result, "timed_examples": case.iterations * case.batch_size, "row_tokens": segments * case.seq_len,
            "mem_len": mem_len,
            "note": f"Trainer step, {segments} segment(s) of {case.seq_len} with memory {mem_len}, grad_segments "
                    f"{case.grad_segments or 'all'}, recompute {recompute}"}


def _latency(case):
    """One export reading documents of up to max(case.segments) * seq_len tokens; for each S in
    case.segments, `serving_default` on one text of at most S * seq_len - 2 pieces (`longest_text`: it
    fills S segments with `<sep> <cls>`), `case.warmup` untimed then `case.iterations` timed requests, in
    process. -> by_segments [{segments, tokens, p50_ms, p99_ms, requests}], max_doc_len, mem_len."""
    import tensorflow as tf

    from xlnet_tf.benchmarks.run_lengths import load_random_export, longest_text, request_latencies

    max_doc_len = max(case.segments) * case.seq_len
    by_segments = []
    with tempfile.TemporaryDirectory(prefix="xlnet-tf-bench-export-") as work:
        _, loaded = load_random_export(work, case, max_doc_len=max_doc_len)
        tokenize, serve = loaded.signatures["tokenize"], loaded.signatures["serving_default"]
        for segments in case.segments:
            text = longest_text(tokenize, segments * case.seq_len - SPECIAL_TOKENS)
            timing = request_latencies(lambda i, t=text["text"]: serve(text=tf.constant([t]))["label"].numpy(), case)
            by_segments.append({"segments": segments, "tokens": text["tokens"], **timing})
    return {"by_segments": by_segments, "max_doc_len": max_doc_len,
            "mem_len": memory_length(max(case.segments), case.seq_len),
            "note": "serving_default of one --long-doc memory export (segments in a tf.while_loop), one text per "
                    "request, one client, in process"}
