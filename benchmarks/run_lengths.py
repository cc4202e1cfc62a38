"""xlnet-tf on real sentence lengths (the LENGTH_TASKS): fine-tuning and predict with length buckets or with
fixed padding, and the exported classifier's latency for a short and a long text, in process and served.

Rows are SST-2 train lengths (`common.length_examples`, random token ids) built by the library's one feature
builder (`graph_features.classification_inputs`: left-padded, `<cls>` last). Fine-tuning batches are the
library's (`data.buckets.stratify` "auto": one part per length stratum), predict batches its buckets
(`auto_boundaries` over the sampled lengths); fixed padding is the same code padding to max_seq_len; packed
rows are `data.packing`'s (the strata's examples of each step packed into rows of the longest row's width, as
`finetune --packing auto`; predict packs as `predict` of a packed model: calls of about `batch_size` examples).
Fine-tuning and predict rows also count the useful FLOPs: each example's matmul FLOPs alone at its own length
(`flops.example_flops`), for the share of the matmul peak they reach. "lengths-squad" fine-tunes the same way
on rows of SQuAD 2.0's window lengths with a head reading every position: whether packing would pay for SQuAD,
whose windows `finetune` keeps (packed rows of 512, the widest window). Fine-tuning runs in float32 or in bfloat16
(Keras' mixed_bfloat16 policy, as `finetune --mixed-precision bfloat16`); predict and latency in float32.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from xlnet_tf.benchmarks.common import Case, Unsupported, keras_dtype, length_examples, time_iterations
from xlnet_tf.benchmarks.xlnet_parts import EXPORT_VOCAB, xlnet_config

TRAINING_DROPOUT = 0.1
SHORT_TEXT = "This function returns a new list."  # 6 words; 7 pieces with the export's vocabulary
LONG_TOKENS = 120  # the long text's pieces (at most max_seq_len - 2)
TRAINING_TASKS = ("lengths-finetune", "lengths-squad")  # in float32 or bfloat16 (mixed_bfloat16); the others float32
IMPLEMENTATION = {"lengths-finetune": "xlnet-tf", "lengths-predict": "xlnet-tf",
                  "lengths-latency": "xlnet-tf-savedmodel", "lengths-squad": "xlnet-tf"}
SERVED_REQUEST_TIMEOUT_S = 600  # the gRPC deadline of one timed request through xlnet-tf serve


def run(case: Case) -> dict:
    """Times `case` (task in LENGTH_TASKS) -> its result dict (see each task's function)."""
    import keras

    if case.implementation != IMPLEMENTATION[case.task]:
        raise Unsupported(f"{case.task} is measured for {IMPLEMENTATION[case.task]}, not {case.implementation}")
    precisions = ("float32", "bfloat16") if case.task in TRAINING_TASKS else ("float32",)
    if case.xla or case.precision not in precisions:
        raise Unsupported("the lengths tasks are measured without XLA, in float32 (fine-tuning also in bfloat16)")
    keras.utils.set_random_seed(0)
    return {"lengths-finetune": _finetune, "lengths-predict": _predict, "lengths-latency": _latency,
            "lengths-squad": _finetune}[case.task](case)


def _features(case):
    """The case's examples as classification rows padded to seq_len: numpy int32 input_ids, segment_ids,
    padding_mask [N, L], length [N] (real tokens) and label_ids [N]."""
    import tensorflow as tf

    from xlnet_tf.data import graph_features

    sentences, labels = length_examples(case)
    ids = tf.RaggedTensor.from_row_lengths(np.concatenate(sentences), [len(s) for s in sentences])
    rows = graph_features.classification_inputs(ids, None, case.seq_len)
    keys = ("input_ids", "segment_ids", "padding_mask", "length")
    return {**{k: np.asarray(rows[k]) for k in keys}, "label_ids": labels}


def _spec(case):
    """The case's padding as a `--bucket-boundaries` value: "auto" (padding "buckets", and "packed": the packed
    steps' examples are the strata's) or "none" ("fixed")."""
    if case.padding not in ("buckets", "fixed", "packed"):
        raise Unsupported(f"xlnet-tf pads by length buckets, packs or pads to max_seq_len, not {case.padding!r}")
    return "none" if case.padding == "fixed" else "auto"


def _useful_flops(case, lengths, training):
    """The matmul FLOPs of examples of `lengths`, each alone at its own length ("lengths-squad": reading every
    position)."""
    from xlnet_tf.benchmarks.flops import example_flops

    every = case.task == "lengths-squad"
    return float(sum(example_flops(case.dims, int(n), training, every_position=every) for n in lengths))


def every_position_loss(outputs, batch):
    """The "lengths-squad" head's loss: softmax cross-entropy of class 0 at every real position of the
    per-position `logits` [R, W, 2] (SQuAD's start / end logits cost as much); summed, over the real tokens."""
    import tensorflow as tf

    real = tf.cast(batch["padding_mask"], tf.float32)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.zeros_like(batch["padding_mask"], tf.int32),
                                                            logits=outputs["logits"])
    return tf.reduce_sum(losses * real), tf.reduce_sum(real)


def _finetune(case):
    """`case.warmup` untimed then `case.iterations` timed fine-tuning steps of the real `Trainer` (AdamW,
    clipping at 1.0, dropout 0.1, no XLA), one step per `run_steps` call, reading `TaskInput`'s tf.data
    pipeline: batches of one part per length stratum (`stratify` "auto") or padded to max_seq_len ("none").
    The head: classification's (<cls>), or for "lengths-squad" `XLNetForTokenClassification` (two logits at
    every position: the encoder's last layer computes every position, as for SQuAD) with `every_position_loss`.
    -> seconds [steps], timed_examples, boundaries (the strata's widths) and rows_per_batch, real / padded
    tokens per step (timed steps, and a batch mirroring the sample)."""
    from xlnet_tf.config import RunOptions
    from xlnet_tf.data import buckets, packing
    from xlnet_tf.heads import XLNetForSequenceClassification, XLNetForTokenClassification, classification_loss
    from xlnet_tf.training import strategies
    from xlnet_tf.training.finetune import INPUTS, LABELS, TaskInput
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    features = _features(case)
    steps, batch = case.iterations, case.batch_size
    strata = buckets.stratify(features["length"], batch, case.seq_len, _spec(case))
    plan = buckets.training_plan(strata, case.warmup + steps)
    packed = None
    if case.padding == "packed":
        packed = packing.packed_plan(plan, features["length"], packing.choose_width(features["length"], case.seq_len))
    inputs = TaskInput(features, INPUTS["classification"] + LABELS["classification"], "classification", plan, packed)
    options = TrainingOptions(train_steps=10**6, batch_size=batch, learning_rate=2e-5, save_every=10**6)
    run_options = RunOptions(dropout=TRAINING_DROPOUT, dropatt=TRAINING_DROPOUT)
    with tempfile.TemporaryDirectory(prefix="xlnet-tf-bench-") as model_dir:
        head, loss = ((XLNetForTokenClassification, every_position_loss) if case.task == "lengths-squad" else
                      (XLNetForSequenceClassification, classification_loss))
        trainer = Trainer(strategies.make_strategy(),
                          lambda: head(xlnet_config(case), run_options, num_labels=2, dtype=keras_dtype(case)), loss,
                          None, options, model_dir, inputs=inputs)
        iterator, mems = trainer.data_iterator(), trainer.initial_mems()
        losses = []

        def step():
            losses.append(float(trainer.run_steps(iterator, mems, 1)[0]))

        seconds = time_iterations(step, case.warmup, steps)
        traced = trainer.traced_programs()
    real, padded = inputs.token_counts(case.warmup, case.warmup + steps)
    timed = packing.plan_examples(plan)[case.warmup:case.warmup + steps].reshape(-1)
    layout = ({"boundaries": [packed.shape.width], "rows_per_batch": [packed.shape.rows],
               "examples_per_row": packed.shape.slots} if packed else
              {"boundaries": list(strata.widths), "rows_per_batch": list(strata.counts)})
    how = (f"packed: {packed.shape.rows} rows of {packed.shape.width} per batch" if packed else
           f"{case.padding}: {len(strata.widths)} part(s) per batch")
    return {
        "seconds": seconds, "timed_examples": steps * batch, "steps": steps, **layout,
        "useful_flops": _useful_flops(case, features["length"][timed], training=True),
        "real_tokens_per_step": real / steps,
        "padded_tokens_per_step": padded / steps, "sample_real_tokens": int(features["length"].sum()),
        "sample_padded_tokens": int(round(strata.positions_per_row * len(features["length"]))),
        "traced_programs": traced, "loss_first": losses[0], "loss_last": losses[-1],
        "note": f"Trainer.run_steps over TaskInput ({how}), {case.warmup} warm-up step(s)",
    }


def _predict(case):
    """`finetune.run_model` (what `xlnet-tf predict` and `evaluate` run) over the case's `sample_size` rows,
    batch_size rows per batch by bucket: one untimed pass over them (it traces the model's predict function,
    which later calls reuse), then `case.iterations` timed passes.
    -> seconds [passes], timed_examples, boundaries, batches, real / padded tokens per batch."""
    from xlnet_tf.config import RunOptions
    from xlnet_tf.data import buckets, packing
    from xlnet_tf.heads import XLNetForSequenceClassification
    from xlnet_tf.training.finetune import run_model

    features = _features(case)
    lengths = features["length"]
    boundaries = (buckets.auto_boundaries(lengths, case.seq_len, min_rows=case.batch_size)
                  if _spec(case) == "auto" else (case.seq_len,))
    width = packing.choose_width(lengths, case.seq_len) if case.padding == "packed" else None
    model = XLNetForSequenceClassification(xlnet_config(case), RunOptions(dropout=0.0, dropatt=0.0), num_labels=2)

    def predict():
        return run_model(model, "classification", features, case.batch_size, boundaries, packed_width=width)

    predict()
    seconds = time_iterations(predict, 0, case.iterations)
    if width:
        shape, calls = packing.inference_layouts(lengths, case.batch_size, width)
        count, real, padded = len(calls), int(lengths.sum()), len(calls) * shape.rows * shape.width
        layout = {"boundaries": [width], "rows_per_batch": [shape.rows], "examples_per_row": shape.slots}
    else:
        count = len(buckets.inference_batches(buckets.assign(lengths, boundaries), case.batch_size))
        real, padded = buckets.padding_cost(lengths, boundaries)
        layout = {"boundaries": list(boundaries)}
    return {
        "seconds": seconds, "timed_examples": case.sample_size * case.iterations, **layout, "batches": count,
        "real_tokens_per_step": real / count, "padded_tokens_per_step": padded / count,
        "useful_flops": case.iterations * _useful_flops(case, lengths, training=False),
        "note": f"finetune.run_model ({case.padding}) after one untimed pass (tracing)",
    }


def _latency(case):
    """The exported random classifier's `serving_default` on one text per request: `SHORT_TEXT` and a text of
    min(LONG_TOKENS, seq_len - 2) pieces, and on a request of `case.batch_size` texts of SST-2 lengths
    (`serving.length_texts`, as requests merged by batching), `case.warmup` untimed then `case.iterations` timed
    requests each, in process (tf.saved_model.load) and through `xlnet-tf serve` over gRPC (its own process);
    then the same requests in process on the same classifier exported with `--packing none`.
    The batch's request is also timed on `encode` (every token's state) in process, packed and unpacked.
    -> texts {short, long, batch, encode: {text (short, long), texts (batch, encode), tokens}}, in_process,
    served and unpacked_in_process {short, long, batch[, encode]: {p50_ms, p99_ms, requests}} (served None,
    with served_error, when the server could not answer)."""
    import tensorflow as tf

    from xlnet_tf.benchmarks.serving import length_texts
    from xlnet_tf.export.exporter import export_model

    with tempfile.TemporaryDirectory(prefix="xlnet-tf-bench-export-") as work:
        version, loaded = load_random_export(work, case)
        texts = _texts(loaded.signatures["tokenize"], min(LONG_TOKENS, case.seq_len - 2))
        batch, pieces, _ = length_texts(loaded.signatures["tokenize"], case.batch_size, case.seq_len)
        requests = {name: ([text["text"]], case) for name, text in texts.items()}
        requests["batch"] = (batch, case)
        texts["batch"] = {"texts": len(batch), "tokens": int(np.sum(pieces)), "longest": int(np.max(pieces))}
        in_process, served, error = export_latencies(version, loaded.signatures["serving_default"], requests)
        plain = tf.saved_model.load(export_model(os.path.join(work, "finetuned"), os.path.join(work, "unpacked"),
                                                 packing="none")).signatures
        unpacked = {key: request_latencies(lambda i, t=request: plain["serving_default"](text=tf.constant(t))[
            "label"].numpy(), case) for key, (request, case) in requests.items()}
        texts["encode"] = texts["batch"]  # the same request of the batch's texts, on `encode`
        for times, signatures in ((in_process, loaded.signatures), (unpacked, plain)):
            times["encode"] = request_latencies(
                lambda i, f=signatures["encode"]: f(text=tf.constant(batch))["sequence_output"].numpy(), case)
    return {"texts": texts, "in_process": in_process, "served": served, "served_error": error,
            "unpacked_in_process": unpacked,
            "note": "serving_default, one request at a time, one client; served: xlnet-tf serve, gRPC on loopback; "
                    "unpacked: the same classifier exported with --packing none"}


def export_latencies(version, function, requests):
    """`request_latencies` of each request of `requests` ({key: (texts, case)}: one request holds the list of
    texts, timed as `case` says) on `function` (the loaded export's serving_default) in process, then through
    `xlnet-tf serve` of the export at `version` (`_served`) -> (in_process {key: latencies}, served {key:
    latencies} or None, served_error: None, or why the server could not answer)."""
    import tensorflow as tf

    in_process = {key: request_latencies(lambda i, t=texts: function(text=tf.constant(t))["label"].numpy(), case)
                  for key, (texts, case) in requests.items()}
    served, error = None, None
    try:
        served = _served(os.path.dirname(version), requests)
    except Exception as failure:  # the in-process figures stand; the served ones are reported as missing
        error = f"{type(failure).__name__}: {failure}"[:500]
    return in_process, served, error


def load_random_export(work, case, max_doc_len=None, precision="float32"):
    """`export_random_classifier` at the case's size and seq_len (EXPORT_VOCAB pieces; documents of up to
    `max_doc_len` tokens read with memory when given; computing in `precision`, `export --precision`),
    exported under `work` and loaded in process -> (the export's version directory, the loaded SavedModel)."""
    import tensorflow as tf

    from xlnet_tf.benchmarks.xlnet_parts import export_random_classifier

    version = export_random_classifier(work, xlnet_config(case), case.seq_len, EXPORT_VOCAB,
                                       os.path.join(work, "export", "classifier"), max_doc_len=max_doc_len,
                                       precision=precision)
    return version, tf.saved_model.load(version)


def _texts(tokenize, long_tokens):
    """{"short": SHORT_TEXT, "long": `longest_text(tokenize, long_tokens)`}, each {"text", "tokens"}."""
    return {"short": {"text": SHORT_TEXT, "tokens": count_pieces(tokenize, SHORT_TEXT)},
            "long": longest_text(tokenize, long_tokens)}


def count_pieces(tokenize, text):
    """The pieces of `text` by an export's `tokenize` signature (before truncation)."""
    import tensorflow as tf

    return int(tokenize(text=tf.constant([text]))["num_tokens"].numpy()[0])


def longest_text(tokenize, max_tokens, start=0):
    """The longest run of words of CPython's documentation from its `start`-th word with at most `max_tokens`
    pieces (counted by an export's `tokenize` signature; a word is at least one piece, so the count grows with
    the words and is bisected) -> {"text", "tokens"}."""
    from xlnet_tf.benchmarks.xlnet_parts import doc_lines

    words = " ".join(doc_lines()).split()[start:start + 4 * max_tokens]
    low, high = 1, len(words)  # the answer lies in [low, high]: one word fits (pieces >= words)
    while low < high:
        middle = (low + high + 1) // 2
        if count_pieces(tokenize, " ".join(words[:middle])) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    text = " ".join(words[:low])
    return {"text": text, "tokens": count_pieces(tokenize, text)}


def request_latencies(call, case):
    """p50 / p99 (ms) of `case.iterations` sequential `call(i)` after `case.warmup` untimed ones."""
    from xlnet_tf.benchmarks.serving import measure

    for i in range(case.warmup):
        call(i)
    _, p50, p99, errors = measure(call, 1, case.iterations)
    if errors:
        raise RuntimeError(f"{len(errors)} of {case.iterations} requests failed: {errors[0][:300]}")
    return {"p50_ms": p50, "p99_ms": p99, "requests": case.iterations}


def _served(base, requests):
    """`request_latencies` of each request ({key: (texts, case)}) through `xlnet-tf serve` of the model at BASE
    (BASE/VERSION holds the export), one gRPC Predict of the texts per request."""
    from xlnet_tf.benchmarks.serving import start_server
    from xlnet_tf.serving import Client

    name = os.path.basename(base)
    process, target, _ = start_server(base, name)
    try:
        # A batch of 32 base-size rows in emulated bfloat16 takes about a minute on a 2-core CPU; the worker's
        # own --timeout bounds the case.
        with Client(target, name, timeout=SERVED_REQUEST_TIMEOUT_S) as client:
            (status,) = client.status()[-1:]
            if status["state"] != "AVAILABLE":
                raise RuntimeError(f"the server could not load the export: {status['error_message'][:300]}")
            return {key: request_latencies(lambda i, t=list(texts): client.predict({"text": t}), case)
                    for key, (texts, case) in requests.items()}
    finally:
        process.terminate()
        process.wait(60)
