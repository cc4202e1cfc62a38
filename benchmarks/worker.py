"""Runs one benchmark case (or the matmul peak) in this process and prints its result as one JSON line.

    python -m xlnet_tf.benchmarks.worker '{"implementation": "xlnet-tf", "task": "inference", ...}'
    python -m xlnet_tf.benchmarks.worker --matmul 2048

Each case gets a fresh process, so frameworks do not share thread pools or allocators and the peak resident
memory of the process is the case's own: it is reported as the growth over the resident size measured after
the framework was imported and before the model was built.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import traceback

RESULT_PREFIX = "BENCHMARK_RESULT "
RUNNERS = {
    "xlnet-tf": "xlnet_tf.benchmarks.run_xlnet_tf",
    "xlnet-tf-savedmodel": "xlnet_tf.benchmarks.run_xlnet_tf",
    "keras-hub": "xlnet_tf.benchmarks.run_keras_hub",
    "model-garden": "xlnet_tf.benchmarks.run_model_garden",
    "transformers": "xlnet_tf.benchmarks.run_transformers",
}
# Imported before the baseline memory reading, so that their size does not count as the case's.
FRAMEWORKS = {
    "xlnet-tf": ("tensorflow", "keras", "tensorflow_text", "xlnet_tf.model"),
    "xlnet-tf-savedmodel": ("tensorflow", "keras", "tensorflow_text", "xlnet_tf.model"),
    "keras-hub": ("tensorflow", "keras", "keras_hub"),
    "model-garden": ("tensorflow", "tf_keras", "official.nlp.modeling.networks", "official.nlp.modeling.models"),
    "transformers": ("torch", "transformers"),
}


def resident_mb():
    """Current resident set size of this process, MB (Linux /proc)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_resident_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def measure_case(case_dict):
    from xlnet_tf.benchmarks.common import Case, ReferenceMissing, Unsupported

    case = Case.from_dict(case_dict)
    try:
        for module in FRAMEWORKS[case.implementation]:
            importlib.import_module(module)
    except ImportError as error:
        return {"status": "missing", "error": f"{error}"}
    baseline = resident_mb()
    try:
        result = importlib.import_module(RUNNERS[case.implementation]).run(case)
    except ReferenceMissing as error:
        return {"status": "missing", "error": str(error)}
    except Unsupported as error:
        return {"status": "unsupported", "error": str(error)}
    except Exception as error:  # reported in the table; the suite goes on with the next case
        traceback.print_exc()
        return {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    return {"status": "ok", "peak_mb": peak_resident_mb() - baseline, **result}


def measure_matmul(size, iterations=10):
    """GFLOP/s of a size x size matmul in TensorFlow, float32 and bfloat16 (median of `iterations`)."""
    import numpy as np
    import tensorflow as tf

    from xlnet_tf.benchmarks.common import time_iterations

    peaks = {}
    for dtype in (tf.float32, tf.bfloat16):
        a = tf.cast(tf.random.stateless_normal([size, size], seed=[1, 2]), dtype)
        b = tf.cast(tf.random.stateless_normal([size, size], seed=[3, 4]), dtype)
        matmul = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)))  # a scalar out: no copy timed
        seconds = time_iterations(lambda: matmul(a, b).numpy(), 3, iterations)
        peaks[dtype.name] = 2 * size**3 / float(np.median(seconds)) / 1e9
    return {"status": "ok", "gflops": peaks, "size": size}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if argv and argv[0] == "--matmul":
        result = measure_matmul(int(argv[1]) if len(argv) > 1 else 2048)
    else:
        result = measure_case(json.loads(argv[0]))
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
