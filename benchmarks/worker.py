"""Runs one benchmark case (or the matmul peak) in this process and prints its result as one JSON line.

    python -m xlnet_tf.benchmarks.worker '{"implementation": "xlnet-tf", "task": "inference", ...}'
    python -m xlnet_tf.benchmarks.worker --matmul 2048 [float32,bfloat16]

Each case gets a fresh process, so frameworks do not share thread pools or allocators and the peak resident
memory of the process is the case's own: it is reported as the growth over the resident size measured after
the framework was imported and before the model was built.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback

from xlnet_tf import hardware

RESULT_PREFIX = "BENCHMARK_RESULT "
# Imported before the baseline memory reading, so that their size does not count as the case's.
FRAMEWORKS = {
    "xlnet-tf": ("tensorflow", "keras", "tensorflow_text", "xlnet_tf.model"),
    "xlnet-tf-savedmodel": ("tensorflow", "keras", "tensorflow_text", "xlnet_tf.model"),
    "keras-hub": ("tensorflow", "keras", "keras_hub"),
    "model-garden": ("tensorflow", "tf_keras", "official.nlp.modeling.networks", "official.nlp.modeling.models"),
    "transformers": ("torch", "transformers"),
}


def runner(case):
    """The function that measures `case` (which runner handles which case is decided here only): xlnet-tf's task
    groups have a module each, "generate" is `run_generate`'s for xlnet-tf and transformers alike, and every other
    case goes to its implementation's runner, which rejects the tasks it does not run. Only that module is
    imported (after the baseline memory reading, as the case's)."""
    from xlnet_tf.benchmarks.common import (DOCUMENT_TASKS, GENERATE_TASKS, LENGTH_TASKS, OURS, PRECISION_TASKS,
                                            SERVING_TASKS)

    if case.implementation in OURS:
        if case.task in LENGTH_TASKS:
            from xlnet_tf.benchmarks import run_lengths

            return run_lengths.run
        if case.task in DOCUMENT_TASKS:
            from xlnet_tf.benchmarks import run_documents

            return run_documents.run
        if case.task in SERVING_TASKS:
            from xlnet_tf.benchmarks import serving

            return serving.run
        if case.task in PRECISION_TASKS:
            from xlnet_tf.benchmarks import run_precision

            return run_precision.run
        if case.task in GENERATE_TASKS:
            from xlnet_tf.benchmarks import run_generate

            return run_generate.run_xlnet_tf
        from xlnet_tf.benchmarks import run_xlnet_tf

        return run_xlnet_tf.run
    if case.implementation == "keras-hub":
        from xlnet_tf.benchmarks import run_keras_hub

        return run_keras_hub.run
    if case.implementation == "model-garden":
        from xlnet_tf.benchmarks import run_model_garden

        return run_model_garden.run
    if case.implementation == "transformers" and case.task in GENERATE_TASKS:
        from xlnet_tf.benchmarks import run_generate

        return run_generate.run_transformers
    if case.implementation == "transformers":
        from xlnet_tf.benchmarks import run_transformers

        return run_transformers.run
    raise KeyError(case.implementation)


def measure_case(case_dict):
    from xlnet_tf.benchmarks.common import Case, ReferenceMissing, Unsupported

    case = Case.from_dict(case_dict)
    try:
        for module in FRAMEWORKS[case.implementation]:
            importlib.import_module(module)
    except ImportError as error:
        return {"status": "missing", "error": f"{error}"}
    baseline = hardware.resident_mb()
    try:
        result = runner(case)(case)
    except ReferenceMissing as error:
        return {"status": "missing", "error": str(error)}
    except Unsupported as error:
        return {"status": "unsupported", "error": str(error)}
    except Exception as error:  # reported in the table; the suite goes on with the next case
        traceback.print_exc()
        return {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    peak = hardware.peak_resident_mb()
    return {"status": "ok", "peak_mb": float("nan") if peak is None or baseline is None else peak - baseline,
            **result}


def measure_matmul(size, iterations=10, precisions=None):
    """GFLOP/s of a size x size matmul in TensorFlow in each of `precisions` (dtype names; None: every one of
    the step cases', float32 and bfloat16), the median of `iterations` -> {"gflops": {precision: GFLOP/s}, ...}."""
    import numpy as np
    import tensorflow as tf

    from xlnet_tf.benchmarks.common import PRECISIONS, time_iterations

    peaks = {}
    for dtype in (tf.as_dtype(precision) for precision in precisions or PRECISIONS):
        a = tf.cast(tf.random.stateless_normal([size, size], seed=[1, 2]), dtype)
        b = tf.cast(tf.random.stateless_normal([size, size], seed=[3, 4]), dtype)
        # a scalar out: no copy timed
        matmul = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)), autograph=False)
        seconds = time_iterations(lambda: matmul(a, b).numpy(), 3, iterations)
        peaks[dtype.name] = 2 * size**3 / float(np.median(seconds)) / 1e9
    return {"status": "ok", "gflops": peaks, "size": size}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if argv and argv[0] == "--matmul":
        size = int(argv[1]) if len(argv) > 1 else 2048
        result = measure_matmul(size, precisions=argv[2].split(",") if len(argv) > 2 else None)
    else:
        result = measure_case(json.loads(argv[0]))
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
