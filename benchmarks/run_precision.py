"""The exports' precisions (the PRECISION_TASKS): the lengths tasks' random classifier exported with `export
--precision float32|bfloat16|float16`, its `serving_default` latency on one text of seq_len - 2 pieces (a
seq_len-token row with `<sep> <cls>`) and on a batch of batch_size such texts, in process and through `xlnet-tf
serve`, and its logits on that batch.

Each precision is its own case (its own worker process, its own export); the parent compares the logits with the
float32 case's (`comparisons.precision_comparison`), which the seeded initialisation makes the same classifier:
`weights_digest` says so (equal digests, equal weights and vocabulary), and no comparison is made without it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile

import numpy as np

from xlnet_tf.benchmarks.common import EXPORT_PRECISIONS, SPECIAL_TOKENS, Case, Unsupported

IMPLEMENTATION = "xlnet-tf-savedmodel"
BATCH_WARMUP = 1  # untimed batch requests before the timed ones
TEXT_STRIDE = 97  # words of CPython's documentation between the starts of the batch's texts


def run(case: Case) -> dict:
    """Times `case` (task in PRECISION_TASKS) -> its result dict (see `_latency`)."""
    import keras

    if case.implementation != IMPLEMENTATION:
        raise Unsupported(f"{case.task} is measured for {IMPLEMENTATION}, not {case.implementation}")
    if case.precision not in EXPORT_PRECISIONS or case.xla:
        raise Unsupported(f"{case.task} exports in {', '.join(EXPORT_PRECISIONS)} without XLA, not "
                          f"{case.precision}{' with XLA' if case.xla else ''}")
    if case.batch_size < 1 or case.batch_requests < 1:
        raise Unsupported(f"{case.task} needs a batch and batch requests >= 1, got {case.batch_size} and "
                          f"{case.batch_requests}")
    keras.utils.set_random_seed(0)  # the same classifier in every precision's process
    return _latency(case)


def _latency(case):
    """The export in `case.precision`: `serving_default` on [the first text] (`case.warmup` untimed then
    `case.iterations` timed requests) and on the batch of `batch_texts` (BATCH_WARMUP untimed, then
    `case.batch_requests` timed), in process and served (`run_lengths.export_latencies`); then its logits and
    label ids on the batch, in process.
    -> texts {one: {text, tokens}, batch: {count, tokens_min, tokens_max}}, in_process and served {one, batch:
    {p50_ms, p99_ms, requests}} (served None, with served_error, when the server could not answer), logits
    [batch][labels], label_ids [batch], weights_digest, device ("CPU" / "GPU"), device_name."""
    import tensorflow as tf

    from xlnet_tf.benchmarks.run_lengths import export_latencies, load_random_export

    with tempfile.TemporaryDirectory(prefix="xlnet-tf-bench-export-") as work:
        version, loaded = load_random_export(work, case, precision=case.precision)
        function = loaded.signatures["serving_default"]
        texts = batch_texts(loaded.signatures["tokenize"], case.seq_len - SPECIAL_TOKENS, case.batch_size)
        batch_case = dataclasses.replace(case, warmup=BATCH_WARMUP, iterations=case.batch_requests)
        in_process, served, error = export_latencies(
            version, function, {"one": ([texts[0]["text"]], case), "batch": ([t["text"] for t in texts], batch_case)})
        outputs = function(text=tf.constant([t["text"] for t in texts]))
        digest = weights_digest(version)
    gpus = tf.config.list_physical_devices("GPU")
    details = tf.config.experimental.get_device_details(gpus[0]) if gpus else {}
    pieces = [t["tokens"] for t in texts]
    return {
        "texts": {"one": texts[0], "batch": {"count": len(texts), "tokens_min": min(pieces),
                                             "tokens_max": max(pieces)}},
        "in_process": in_process, "served": served, "served_error": error,
        "logits": outputs["logits"].numpy().astype(np.float64).tolist(),
        "label_ids": outputs["label_id"].numpy().tolist(), "weights_digest": digest,
        "device": "GPU" if gpus else "CPU", "device_name": details.get("device_name", ""),
        "note": f"serving_default of export --precision {case.precision}, one client; served: xlnet-tf serve, "
                f"gRPC on loopback, one Predict of the request's texts",
    }


def batch_texts(tokenize, max_tokens, count):
    """`count` texts of at most `max_tokens` pieces each (`run_lengths.longest_text` from every TEXT_STRIDE-th
    word of CPython's documentation: different texts that each fill the row), the first from its start
    -> [{"text", "tokens"}]."""
    from xlnet_tf.benchmarks.run_lengths import longest_text

    return [longest_text(tokenize, max_tokens, start=i * TEXT_STRIDE) for i in range(count)]


def weights_digest(version):
    """sha256 over the export's floating-point variables (float32 in every precision) and its assets (the
    vocabulary), independent of the variables' names and order: equal digests, the same classifier."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(os.path.join(version, "variables", "variables"))
    digests = [hashlib.sha256(np.ascontiguousarray(reader.get_tensor(name)).tobytes()).hexdigest()
               for name, dtype in reader.get_variable_to_dtype_map().items() if dtype.is_floating]
    assets = os.path.join(version, "assets")
    for name in sorted(os.listdir(assets)) if os.path.isdir(assets) else ():
        with open(os.path.join(assets, name), "rb") as handle:
            digests.append(hashlib.sha256(handle.read()).hexdigest())
    return hashlib.sha256("".join(sorted(digests)).encode()).hexdigest()
