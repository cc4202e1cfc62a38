"""`xlnet-tf benchmark`: every case in its own process, then one table of tokens/s, GFLOP/s against the matmul
peak measured in the same run, peak memory and ratios against the reference implementations, and, for the
"lengths" tasks (SST-2 sentence lengths), examples/s of fine-tuning and predict with length buckets, fixed and
dynamic padding and the exported classifier's latency by text length, and, for the "documents" tasks, how a
fine-tuning step's examples/s and the export's latency grow with the segments of a long document read with
memory, and, for the "memory" tasks, the peak memory and step time of training steps with each --recompute
mode against none, and, for the "serving" task, `xlnet-tf serve`'s requests/s and latency with batching at 1, 8
and 32 clients against the export in process, and under overload, and, for the "precision" task, the
classification export's latency for one text and for a batch in float32, bfloat16 and float16, in process and
served, with the logits' relative error against float32; all checked against the project's speed and memory
targets (the bfloat16 ones for CPUs with AMX, AMX_TARGETS, judged on such a CPU only). Written to OUTPUT_DIR as
results.json, report.md and throughput.png."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

from xlnet_tf.benchmarks.common import (BASE_SIZE, DEFAULT_TASKS, DOCUMENT_SEGMENTS, DOCUMENT_TASKS, DOCUMENT_TRAINING,
                                        GENERATE_TASKS, EXPORT_PRECISIONS, IMPLEMENTATIONS, LENGTH_TASKS, MEMORY_TASKS,
                                        OURS, PEAK_MEMORY_TASKS, PRECISION_TASKS, PRECISIONS, REFERENCES,
                                        SERVING_TASKS, STEP_TASKS, TORCH_BFLOAT16_MODES, Case, precision_text)
from xlnet_tf.benchmarks.comparisons import (LATENCY_WHERE, Target, document_growth, document_training,
                                             generate_comparison, latency_ratio, length_row, precision_comparison,
                                             recompute_comparison, serving_targets)
from xlnet_tf.config import MODEL_SIZES, RECOMPUTE_MODES
from xlnet_tf.benchmarks.flops import step_flops
from xlnet_tf.benchmarks.worker import RESULT_PREFIX

SUPPORTED_TASKS = {
    "xlnet-tf": STEP_TASKS,
    "xlnet-tf-savedmodel": ("inference",),
    "keras-hub": ("inference", "finetune"),  # its backbone has no query stream: no pretraining
    "model-garden": ("inference", "pretrain"),
    "transformers": STEP_TASKS,
}
# The "lengths" tasks' cases: (implementation, task, padding).
LENGTH_CASES = (
    ("xlnet-tf", "lengths-finetune", "packed"),
    ("xlnet-tf", "lengths-finetune", "buckets"),
    ("xlnet-tf", "lengths-finetune", "fixed"),
    ("transformers", "lengths-finetune", "dynamic"),
    ("xlnet-tf", "lengths-predict", "packed"),
    ("xlnet-tf", "lengths-predict", "buckets"),
    ("xlnet-tf", "lengths-predict", "fixed"),
    ("xlnet-tf-savedmodel", "lengths-latency", ""),
)
# The "lengths" tasks' bfloat16 cases, when --precisions has bfloat16: (implementation, task, padding, precision_mode):
# our fine-tuning by length strata (mixed_bfloat16) against transformers' dynamic padding under autocast.
BFLOAT16_LENGTH_CASES = (
    ("xlnet-tf", "lengths-finetune", "buckets", ""),
    ("transformers", "lengths-finetune", "dynamic", "autocast"),
)
# The "squad-lengths" task's cases: fine-tuning on SQuAD 2.0's window lengths, packed, by strata and padded to 512.
SQUAD_LENGTH_CASES = tuple(("xlnet-tf", "lengths-squad", padding) for padding in ("packed", "buckets", "fixed"))
# The "documents" tasks' cases: (implementation, task, segments per case): fine-tuning cases per segment count (one
# per DOCUMENT_TRAINING mode), one export timed at every count.
DOCUMENT_CASES = (
    *(("xlnet-tf", "documents-finetune", (segments,)) for segments in DOCUMENT_SEGMENTS),
    ("xlnet-tf-savedmodel", "documents-latency", DOCUMENT_SEGMENTS),
)
# What a "memory" row's peak memory is, most exact first: {memory_kind: the result's key}. "device": the GPU's /
# TPU's peak from TensorFlow's memory info; "tensors": the peak of TensorFlow's tensors on the CPU (its BFC
# allocator's statistics); "host": the process's peak resident size over its size after the imports.
MEMORY_KINDS = {"device": "peak_device_mb", "tensors": "peak_tensor_mb", "host": "peak_mb"}
HAS_XLA = ("xlnet-tf", "keras-hub", "model-garden")
PACKAGES = ("tensorflow", "keras", "tensorflow-text", "keras-hub", "tf-models-official", "tf-keras", "torch",
            "transformers")
TARGETS = (
    Target("inference float32 vs keras-hub float32", 1.0),
    Target("inference bfloat16 vs keras-hub float32", 1.6),
    Target("fine-tuning float32 vs keras-hub float32", 1.2),
    Target("pretraining float32 vs model-garden float32", 1.3),
    Target("pretraining float32 vs transformers float32", 2.5),
    Target("best xlnet-tf mode vs matmul peak of its precision", 0.70),
    Target("pretraining peak memory (long) vs transformers", 1.0, at_most=True),
    Target("bfloat16 inference relative error vs float32", 0.02, at_most=True),
    Target("fine-tuning SST-2 lengths, buckets vs fixed padding", 3.0),
    Target("fine-tuning SST-2 lengths, buckets vs transformers dynamic padding", 1.5),
    Target("predict SST-2 lengths, buckets vs fixed padding", 3.0),
    Target("fine-tuning SST-2 lengths, packed vs transformers dynamic padding", 3.0),
    Target("fine-tuning SST-2 lengths, packed: useful FLOP/s over the float32 matmul peak", 0.5),
    Target("predict SST-2 lengths, packed vs buckets", 2.0),
    Target("latency short/long text p50, in process", 0.4, at_most=True),
    Target("latency short/long text p99, in process", 0.4, at_most=True),
    Target("latency short/long text p50, served (gRPC)", 0.4, at_most=True),
    Target("latency short/long text p99, served (gRPC)", 0.4, at_most=True),
)
# The "precision" task's targets: a reduced-precision export's p50 latency on the batch, in process, over the
# float32 export's in the same run, at most; evaluated where that precision is fast: bfloat16 on a CPU with
# NATIVE_BFLOAT16 instructions or a GPU, float16 on a GPU.
PRECISION_TARGETS = {
    "bfloat16": Target("export bfloat16 vs float32 latency (AVX512_BF16 / AMX CPU)", 0.65, at_most=True),
    "float16": Target("export float16 vs float32 latency (GPU)", 0.65, at_most=True),
}
# bfloat16 at the limit of CPUs with AMX, evaluated on a CPU with amx_bf16 only (`amx_missing`): our inference in
# bfloat16 over the bfloat16 matmul peak of the same run and over transformers with bfloat16 weights; our bfloat16
# fine-tuning on SST-2 lengths (length strata) over transformers' (dynamic padding) under autocast; the bfloat16
# export's p50 latency in process over the float32 export's, for one text and for the batch ("precision" task).
AMX_TARGETS = (
    Target("inference bfloat16 vs bfloat16 matmul peak (AMX CPU)", 0.60),
    Target("inference bfloat16 vs transformers bfloat16 weights (AMX CPU)", 1.5),
    Target("fine-tuning SST-2 lengths bfloat16, buckets vs transformers autocast dynamic padding (AMX CPU)", 1.5),
    Target("export bfloat16 vs float32 latency, one text (AMX CPU)", 0.5, at_most=True),
    Target("export bfloat16 vs float32 latency, batch (AMX CPU)", 0.4, at_most=True),
)


@dataclasses.dataclass(frozen=True)
class BenchmarkOptions:
    """What to measure. Ours run in every requested precision and XLA mode; the references in float32, with
    and without XLA where they have it, and, when `precisions` has bfloat16, transformers' inference and
    fine-tuning at seq_len also in bfloat16, in each of TORCH_BFLOAT16_MODES. `long_seq_len` (0 = off) adds
    inference at that length, and a pretraining step of xlnet-tf and transformers for the peak-memory comparison.

    The "lengths" tasks run at seq_len (as max_seq_len), batch `lengths_batch_size`, float32 without XLA (and,
    when `precisions` has bfloat16, the fine-tuning of BFLOAT16_LENGTH_CASES in bfloat16), on rows of SST-2
    train lengths: fine-tuning `lengths_steps` timed steps (after `warmup` untimed ones) on a
    sample of `lengths_sample` rows, predict: `lengths_predict_passes` timed passes over
    `lengths_predict_rows` rows (after an untimed pass over them, which traces), latency:
    `latency_requests` requests per text after `latency_warmup`.

    The "squad-lengths" task (not run by default) fine-tunes as the lengths task does, on `lengths_sample` rows
    of SQuAD 2.0's window lengths at `long_seq_len` (XLNet's SQuAD max_seq_len 512; seq_len when 0), batch
    `squad_batch_size`, with a head reading every position: `squad_steps` timed steps after `warmup` untimed,
    packed, by strata and padded to the width.

    The "documents" tasks (not run by default) run at seq_len per segment, float32 without XLA, for each
    count in DOCUMENT_SEGMENTS: fine-tuning steps on batches of `documents_batch_size` documents (`warmup`
    untimed, `iterations` timed) and the export's latency (`latency_requests` requests per count after
    `latency_warmup`).

    The "memory" tasks (not run by default) time a pretraining step of `size` at batch
    `memory_pretrain_batch_size` and a fine-tuning step of `memory_finetune_size` at batch
    `memory_finetune_batch_size`, both at `memory_seq_len`, float32 without XLA, once per recompute mode (1
    untimed step, `long_iterations` timed), each in its own process for its peak memory.

    The "serving" task (not run by default; benchmarks/serving.py) serves the lengths tasks' export of `size`
    (max_seq_len seq_len; or `serving_export_dir`, an existing export) with batching (max_batch_size
    `serving_batch_size`) to `serving_clients` closed-loop gRPC clients for `serving_seconds` each, against
    serving_default in process on batches of `serving_batch_size` (at least `serving_seconds`), on
    `serving_texts` texts of SST-2 lengths; then `serving_overload` x the largest client count's requests/s,
    open-loop, for `serving_seconds`, against a server with a small --grpc_max_threads and a bounded queue.

    The "precision" task (not run by default; benchmarks/run_precision.py) exports the random classifier of
    `size` (max_seq_len seq_len) once per precision of `export_precisions` and times serving_default on one text
    of seq_len - 2 pieces (`latency_requests` requests after `latency_warmup`) and on a batch of
    `precision_batch_size` such texts (`precision_batch_requests` requests after 1), in process and served."""

    size: dict = dataclasses.field(default_factory=lambda: dict(BASE_SIZE))
    batch_size: int = 8
    seq_len: int = 128
    long_seq_len: int = 512
    tasks: tuple = DEFAULT_TASKS
    precisions: tuple = PRECISIONS
    xla_modes: tuple = (False, True)
    implementations: tuple = IMPLEMENTATIONS
    warmup: int = 2
    iterations: int = 5
    long_iterations: int = 3
    lengths_batch_size: int = 32
    lengths_steps: int = 20
    lengths_sample: int = 4096
    lengths_predict_rows: int = 512
    lengths_predict_passes: int = 1
    squad_batch_size: int = 8
    squad_steps: int = 5
    latency_requests: int = 50
    latency_warmup: int = 10
    documents_batch_size: int = 4
    memory_seq_len: int = 512
    memory_pretrain_batch_size: int = 8
    memory_finetune_batch_size: int = 4
    memory_finetune_size: dict = dataclasses.field(
        default_factory=lambda: {key: getattr(MODEL_SIZES["large"], key) for key in BASE_SIZE})
    generate_prompt_lengths: tuple = (128, 512, 1024)
    generate_new_tokens: int = 128
    serving_clients: tuple = (1, 8, 32)
    serving_seconds: float = 60.0
    serving_texts: int = 256
    serving_batch_size: int = 32
    serving_overload: float = 4.0
    serving_export_dir: str = ""
    export_precisions: tuple = EXPORT_PRECISIONS
    precision_batch_size: int = 32
    precision_batch_requests: int = 20
    timeout: float = 1800.0


def plan_cases(options: BenchmarkOptions):
    """The cases of one run, ours first."""
    cases = []
    size = tuple(sorted(options.size.items()))
    for implementation in options.implementations:
        for task in (t for t in options.tasks if t in SUPPORTED_TASKS[implementation]):
            lengths = [options.seq_len]
            if options.long_seq_len not in (0, options.seq_len) and (task == "inference" or (task == "pretrain" and implementation in
                                                                  ("xlnet-tf", "transformers"))):
                lengths.append(options.long_seq_len)
            for length in lengths:
                long = length != options.seq_len
                xla_modes = options.xla_modes if implementation in HAS_XLA else (False,)
                if long and task == "pretrain":
                    xla_modes = (False,)
                for precision, mode in step_precisions(options, implementation, task, long):
                    for xla in xla_modes:
                        cases.append(Case(
                            implementation, task, options.batch_size, length, precision, xla, size,
                            warmup=1 if long else options.warmup,
                            iterations=options.long_iterations if long else options.iterations, precision_mode=mode,
                        ))
    return (cases + plan_length_cases(options) + plan_document_cases(options) + plan_memory_cases(options)
            + plan_serving_cases(options) + plan_precision_cases(options) + plan_generate_cases(options))


def step_precisions(options: BenchmarkOptions, implementation, task, long):
    """The (precision, precision_mode) pairs of a step case: ours in every requested precision; transformers'
    inference and fine-tuning at seq_len (not `long`) also in bfloat16 in each of TORCH_BFLOAT16_MODES when
    bfloat16 is requested; the other references, and the long pretraining step (the memory comparison), in
    float32."""
    if long and task == "pretrain":
        return [("float32", "")]
    if implementation == "xlnet-tf":
        return [(precision, "") for precision in options.precisions]
    pairs = [("float32", "")]
    if implementation == "transformers" and task in ("inference", "finetune") and not long \
            and "bfloat16" in options.precisions:
        pairs += [("bfloat16", mode) for mode in TORCH_BFLOAT16_MODES]
    return pairs


def plan_generate_cases(options: BenchmarkOptions):
    """The "generate" task's cases, when asked for: xlnet-tf after a prompt of each of `generate_prompt_lengths`,
    transformers after the first (its reference), `generate_new_tokens` new tokens each, float32 without XLA, 1
    untimed generation then `long_iterations` timed."""
    if "generate" not in options.tasks:
        return []
    lengths = {"xlnet-tf": options.generate_prompt_lengths, "transformers": options.generate_prompt_lengths[:1]}
    return [Case(implementation, "generate", 1, length, "float32", False, tuple(sorted(options.size.items())),
                 warmup=1, iterations=options.long_iterations, new_tokens=options.generate_new_tokens)
            for implementation in ("xlnet-tf", "transformers") if implementation in options.implementations
            for length in lengths[implementation]]


def plan_length_cases(options: BenchmarkOptions):
    """The "lengths" tasks' cases (LENGTH_CASES, then BFLOAT16_LENGTH_CASES when bfloat16 is among the
    precisions) of the requested implementations, when "lengths" is asked for, and SQUAD_LENGTH_CASES when
    "squad-lengths" is."""
    cases = []
    if "squad-lengths" in options.tasks and "xlnet-tf" in options.implementations:
        cases += [Case(implementation, task, batch_size=options.squad_batch_size, seq_len=options.long_seq_len or
                       options.seq_len, precision="float32", xla=False, size=tuple(sorted(options.size.items())),
                       warmup=options.warmup, iterations=options.squad_steps, padding=padding,
                       sample_size=options.lengths_sample) for implementation, task, padding in SQUAD_LENGTH_CASES]
    if "lengths" not in options.tasks:
        return cases
    common = dict(batch_size=options.lengths_batch_size, seq_len=options.seq_len, xla=False,
                  size=tuple(sorted(options.size.items())))
    counts = {  # (warmup, iterations, sample_size)
        "lengths-finetune": (options.warmup, options.lengths_steps, options.lengths_sample),
        "lengths-predict": (min(options.warmup, 1), options.lengths_predict_passes, options.lengths_predict_rows),
        "lengths-latency": (options.latency_warmup, options.latency_requests, 0),
    }
    planned = [(*case, "float32", "") for case in LENGTH_CASES]
    if "bfloat16" in options.precisions:
        planned += [(implementation, task, padding, "bfloat16", mode)
                    for implementation, task, padding, mode in BFLOAT16_LENGTH_CASES]
    for implementation, task, padding, precision, mode in planned:
        if implementation in options.implementations:
            warmup, iterations, sample_size = counts[task]
            cases.append(Case(implementation, task, warmup=warmup, iterations=iterations, padding=padding,
                              sample_size=sample_size, precision=precision, precision_mode=mode, **common))
    return cases


def plan_document_cases(options: BenchmarkOptions):
    """The "documents" tasks' cases (DOCUMENT_CASES) of the requested implementations, when "documents" is asked
    for: fine-tuning on batches of documents_batch_size, latency on one text per request."""
    if "documents" not in options.tasks:
        return []
    common = dict(seq_len=options.seq_len, precision="float32", xla=False, size=tuple(sorted(options.size.items())))
    counts = {  # (batch_size, warmup, iterations)
        "documents-finetune": (options.documents_batch_size, options.warmup, options.iterations),
        "documents-latency": (1, options.latency_warmup, options.latency_requests),
    }
    cases = []
    for implementation, task, segments in DOCUMENT_CASES:
        if implementation in options.implementations:
            batch_size, warmup, iterations = counts[task]
            modes = DOCUMENT_TRAINING if task == "documents-finetune" else ((1, ""),)
            cases += [Case(implementation, task, batch_size, warmup=warmup, iterations=iterations, segments=segments,
                           grad_segments=grad_segments, recompute=recompute, **common)
                      for grad_segments, recompute in modes]
    return cases


def plan_memory_cases(options: BenchmarkOptions):
    """The "memory" tasks' cases, one per (task, recompute mode), "none" first, when "memory" is asked for and
    xlnet-tf is among the implementations."""
    if "memory" not in options.tasks or "xlnet-tf" not in options.implementations:
        return []
    sizes = {"memory-pretrain": (options.size, options.memory_pretrain_batch_size),
             "memory-finetune": (options.memory_finetune_size, options.memory_finetune_batch_size)}
    return [Case("xlnet-tf", task, sizes[task][1], options.memory_seq_len, "float32", False,
                 tuple(sorted(sizes[task][0].items())), warmup=1, iterations=options.long_iterations, recompute=mode)
            for task in MEMORY_TASKS for mode in RECOMPUTE_MODES]


def plan_serving_cases(options: BenchmarkOptions):
    """The "serving" task's one case, when "serving" is asked for and xlnet-tf-savedmodel is among the
    implementations."""
    if "serving" not in options.tasks or "xlnet-tf-savedmodel" not in options.implementations:
        return []
    serving = {"clients": tuple(options.serving_clients), "seconds": options.serving_seconds,
               "texts": options.serving_texts, "overload": options.serving_overload,
               "overload_seconds": options.serving_seconds, "export_dir": options.serving_export_dir}
    return [Case("xlnet-tf-savedmodel", SERVING_TASKS[0], options.serving_batch_size, options.seq_len, "float32",
                 False, tuple(sorted(options.size.items())), warmup=1, iterations=1,
                 serving=tuple(sorted(serving.items())))]


def plan_precision_cases(options: BenchmarkOptions):
    """The "precision" task's cases, one per export precision (in EXPORT_PRECISIONS' order: float32, the
    reference, first), when "precision" is asked for and xlnet-tf-savedmodel is among the implementations."""
    if "precision" not in options.tasks or "xlnet-tf-savedmodel" not in options.implementations:
        return []
    return [Case("xlnet-tf-savedmodel", PRECISION_TASKS[0], options.precision_batch_size, options.seq_len, precision,
                 False, tuple(sorted(options.size.items())), warmup=options.latency_warmup,
                 iterations=options.latency_requests, batch_requests=options.precision_batch_requests)
            for precision in EXPORT_PRECISIONS if precision in options.export_precisions]


def run_worker(arguments, timeout):
    """Runs `python -m xlnet_tf.benchmarks.worker ARGUMENTS` -> its result dict (status "failed" when none)."""
    command = [sys.executable, "-m", "xlnet_tf.benchmarks.worker", *arguments]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    if any(f'"{task}"' in argument for argument in arguments for task in PEAK_MEMORY_TASKS):
        env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"  # CPU tensor memory statistics (`cpu_tensor_peak_mb`)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return {"status": "failed", "error": f"exit {done.returncode}: " + " | ".join(tail)}


def summarize(case: Case, result: dict, peaks: dict):
    """One table row: the case, its status and, when it ran, the derived figures (a LENGTH_TASKS row with timed
    examples: examples_per_s over all its timed seconds; a "documents-finetune" row: examples_per_s of the
    median step). A row's share of the peak (`peak_fraction`, a lengths row's `useful_fraction`) is over
    `peaks[case.precision]`: the matmul peak of its own precision measured in the same run."""
    row = {**case.to_dict(), "label": case.label(), **result}
    row.pop("size")
    if case.task in SERVING_TASKS:
        row["model"] = "export " + dict(case.serving)["export_dir"] if dict(case.serving).get("export_dir") \
            else _size_name(case.dims)
        return row
    if case.task in PRECISION_TASKS:
        row["model"] = _size_name(case.dims)
        return row
    if case.task in PEAK_MEMORY_TASKS and result.get("status") == "ok":
        row["median_s"] = float(np.median(result["seconds"]))
        kind = next((kind for kind, key in MEMORY_KINDS.items() if key in result), None)
        if kind:
            row.update(peak_memory_mb=result[MEMORY_KINDS[kind]], memory_kind=kind)
    if case.task in MEMORY_TASKS:
        row["model"] = _size_name(case.dims)
        return row
    if case.task in GENERATE_TASKS:
        if result.get("status") == "ok":
            seconds = float(np.median(result["seconds"]))
            row.update(median_s=seconds, tokens_per_s=case.new_tokens / seconds, ms_per_token=1000 * seconds /
                       case.new_tokens)
        return row
    if case.task in DOCUMENT_TASKS:
        if result.get("status") == "ok" and case.task == "documents-finetune":
            row["examples_per_s"] = case.batch_size / row["median_s"]
        return row
    if case.task in LENGTH_TASKS:
        if result.get("status") == "ok" and result.get("timed_examples"):
            seconds = float(np.sum(result["seconds"]))
            row["examples_per_s"] = result["timed_examples"] / seconds
            if result.get("useful_flops") and peaks.get(case.precision):  # the examples' own FLOPs over the peak
                row["useful_fraction"] = result["useful_flops"] / seconds / 1e9 / peaks[case.precision]
        return row
    if result.get("status") == "ok":
        seconds = float(np.median(result["seconds"]))
        gflops = step_flops(case) / seconds / 1e9
        row.update(median_s=seconds, tokens_per_s=case.tokens / seconds, gflops=gflops,
                   peak_fraction=gflops / peaks[case.precision] if peaks.get(case.precision) else None)
    return row


def _size_name(dims):
    """"base" / "large" / "tiny" for a published size's dimensions, else the dimensions as text."""
    return next((name for name, config in MODEL_SIZES.items()
                 if all(getattr(config, key) == value for key, value in dims.items())),
                ",".join(f"{key}={value}" for key, value in sorted(dims.items())))


def precision_targets(rows, cpu_flags):
    """The "precision" rows' targets (PRECISION_TARGETS, one per reduced precision that was planned) ->
    [{target, value, bound, at_most, met, detail, evaluated}]: value, the reduced export's p50 on the batch in
    process over float32's; met None (evaluated False, the reason in detail) where that precision is not fast
    on this machine: bfloat16 on a CPU without avx512_bf16 / amx_bf16 in `cpu_flags` (`machine_info`'s {flag:
    present}; None: unknown), float16 on any CPU. A GPU (a row's device) evaluates both."""
    from xlnet_tf.hardware import NATIVE_BFLOAT16

    compared = {c["precision"]: c for c in precision_comparison(rows)}
    gpu = any(c["device"] == "GPU" for c in compared.values())
    native = bool(cpu_flags) and any(cpu_flags.get(flag) for flag in NATIVE_BFLOAT16)
    targets = []
    for precision, target in PRECISION_TARGETS.items():
        if precision not in compared:
            continue
        if gpu:
            why_not = None
        elif precision == "float16":
            why_not = "float16 is fast on GPUs only (CPUs emulate it); this run was on the CPU"
        elif cpu_flags is None:
            why_not = "the CPU's instruction sets are unknown (no /proc/cpuinfo), so whether bfloat16 is native is too"
        elif not native:
            why_not = (f"this CPU has neither {' nor '.join(NATIVE_BFLOAT16)} (TensorFlow emulates bfloat16 "
                       f"there); the bound applies to CPUs with them and GPUs")
        else:
            why_not = None
        targets.append(judged(target, *export_ratio(compared, precision, "batch"), why_not))
    return targets


def export_ratio(compared, precision, request):
    """(the `precision` export's p50 in process over the float32 export's for `request` ("one" text or the
    "batch"), detail) from `precision_comparison`'s entries by precision; (None, "not measured: why") where
    either was not measured."""
    entry, base = compared.get(precision), compared.get("float32")
    if entry is None:
        return None, f"not measured: no {precision} export in this run (--tasks precision, --export-precisions)"
    mine = (entry.get("in_process") or {}).get(request)
    if not mine or mine["vs_float32"] is None:
        missing = entry if entry["status"] != "ok" else base
        reason = (f"{missing['label']}: {missing['status']} {missing.get('error') or ''}".strip() if missing
                  else "no float32 row")
        return None, f"not measured: {reason}"
    theirs, error = base["in_process"][request], entry["logits_rel_error"]
    what = (f"batch of {entry['batch_size']} texts of {entry['seq_len']} tokens" if request == "batch"
            else f"one text of {entry['texts']['one']['tokens']} pieces")
    return mine["vs_float32"], (
        f"p50 {mine['p50_ms']:.1f} vs {theirs['p50_ms']:.1f} ms, {what}, in process; logits' relative error vs "
        "float32 " + (f"{error:.1e}, labels equal {entry['label_agreement']:.2f}" if error is not None
                      else f"not compared: {entry['compared_error']}"))


def judged(target, value, detail, why_not):
    """A target's entry {target, value, bound, at_most, met, detail, evaluated}: met by `value` against the
    bound; None where `value` is None or where `why_not` says why the bound does not apply on this machine
    (evaluated False, the reason first in detail)."""
    met = None if why_not or value is None else (value <= target.bound if target.at_most else value >= target.bound)
    return {"target": target.name, "value": value, "bound": target.bound, "at_most": target.at_most, "met": met,
            "evaluated": why_not is None, "detail": f"not evaluated: {why_not}; {detail}" if why_not else detail}


def amx_missing(cpu_flags):
    """Why the AMX_TARGETS are not evaluated on a CPU with `cpu_flags` (`machine_info`'s {flag: present}; None:
    unknown), or None where it has amx_bf16."""
    if cpu_flags is None:
        return "the CPU's instruction sets are unknown (no /proc/cpuinfo), so whether it has AMX is too"
    if cpu_flags.get("amx_bf16"):
        return None
    has = ("avx512_bf16 but not amx_bf16 (the 0.65x export target is its bound)" if cpu_flags.get("avx512_bf16")
           else "neither amx_bf16 nor avx512_bf16 (TensorFlow emulates bfloat16 there)")
    return f"this CPU has {has}; the bound is for CPUs with AMX (amx_bf16)"


def amx_targets(rows, seq_len, cpu_flags):
    """AMX_TARGETS at `seq_len` -> [{target, value, bound, at_most, met, detail, evaluated}], judged only on a
    CPU with amx_bf16 (`amx_missing`), and the exports' only where they ran on the CPU; elsewhere met None,
    evaluated False, with the reason and what was measured in detail. A side that was not planned or did not
    run: value None, "not measured" and why."""
    compared = {c["precision"]: c for c in precision_comparison(rows)}
    why_not = amx_missing(cpu_flags)
    on_gpu = any(c["device"] == "GPU" for c in compared.values())
    export_why_not = "the exports ran on the GPU; the bound is for CPUs with AMX" if on_gpu else why_not
    measured = [
        (bfloat16_peak_share(rows, seq_len), why_not),
        (step_ratio(rows, "inference", seq_len, "bfloat16", "transformers", "bfloat16", "weights"), why_not),
        (length_speedup(rows, seq_len, "lengths-finetune", "transformers", "dynamic", precision="bfloat16",
                        mode="autocast"), why_not),
        (export_ratio(compared, "bfloat16", "one"), export_why_not),
        (export_ratio(compared, "bfloat16", "batch"), export_why_not),
    ]
    return [judged(target, *value, reason) for target, (value, reason) in zip(AMX_TARGETS, measured)]


def bfloat16_peak_share(rows, seq_len):
    """(the fastest xlnet-tf bfloat16 inference row at `seq_len`: its GFLOP/s over the bfloat16 matmul peak of the
    same run, detail); (None, "not measured: why") without that row or that peak."""
    top = best(rows, "xlnet-tf", "inference", seq_len, "bfloat16")
    if not top or not top.get("peak_fraction"):
        return None, (f"not measured: xlnet-tf inference T={seq_len} bfloat16 "
                      + ("ran, but the bfloat16 matmul peak was not measured" if top else "missing"))
    peak = top["gflops"] / top["peak_fraction"]
    return top["peak_fraction"], f"{top['label']}: {top['gflops']:.0f} of {peak:.0f} GFLOP/s (bfloat16 matmul peak)"


def best(rows, implementation, task, seq_len, precision="float32", mode=""):
    """The fastest ok row of an implementation for (task, seq_len, precision, precision_mode), or None."""
    matching = [r for r in rows if r["status"] == "ok" and r["implementation"] == implementation and
                r["task"] == task and r["seq_len"] == seq_len and r["precision"] == precision and
                r.get("precision_mode", "") == mode]
    return max(matching, key=lambda r: r["tokens_per_s"], default=None)


def add_ratios(rows):
    """Each ok row of ours gets `vs_<reference>`: its tokens/s over the reference's best float32 mode for
    the same task and length."""
    for row in rows:
        if row["implementation"] not in OURS or row["status"] != "ok" or row["task"] not in STEP_TASKS:
            continue
        for reference in REFERENCES:
            other = best(rows, reference, row["task"], row["seq_len"])
            row[f"vs_{reference}"] = row["tokens_per_s"] / other["tokens_per_s"] if other else None


def length_speedup(rows, seq_len, task, implementation, padding, ours="buckets", precision="float32", mode=""):
    """(examples/s of xlnet-tf's `ours` row of a lengths `task` over `implementation`'s `padding` row, both in
    `precision` (theirs with precision_mode `mode`), detail); (None, "not measured: ...") where one is missing."""
    mine = length_row(rows, "xlnet-tf", task, ours, seq_len, precision)
    theirs = length_row(rows, implementation, task, padding, seq_len, precision, mode)
    if not mine or not theirs:
        mine_in, theirs_in = (("", "") if precision == "float32" else
                              (f" {precision}", f" {precision_text(precision, mode)}"))
        missing = [label for label, r in ((f"xlnet-tf {task} {ours}{mine_in}", mine),
                                          (f"{implementation} {task} {padding}{theirs_in}", theirs)) if not r]
        return None, f"not measured: {', '.join(missing)} T={seq_len} missing"
    return (mine["examples_per_s"] / theirs["examples_per_s"],
            f"{mine['examples_per_s']:.1f} vs {theirs['examples_per_s']:.1f} examples/s, batch "
            f"{mine['batch_size']}, widths {mine['boundaries']}")


def length_targets(rows, seq_len):
    """(value, detail) of each "lengths" target, in TARGETS' order."""

    def speedup(task, implementation, padding, ours="buckets"):
        return length_speedup(rows, seq_len, task, implementation, padding, ours)

    packed = length_row(rows, "xlnet-tf", "lengths-finetune", "packed", seq_len)
    useful = ((packed["useful_fraction"], f"{packed['examples_per_s']:.1f} examples/s, batch {packed['batch_size']}")
              if packed and packed.get("useful_fraction") else
              (None, "not measured: xlnet-tf lengths-finetune packed, or the float32 matmul peak, missing"))
    values = [speedup("lengths-finetune", "xlnet-tf", "fixed"),
              speedup("lengths-finetune", "transformers", "dynamic"),
              speedup("lengths-predict", "xlnet-tf", "fixed"),
              speedup("lengths-finetune", "transformers", "dynamic", ours="packed"), useful,
              speedup("lengths-predict", "xlnet-tf", "buckets", ours="packed")]
    latency = length_row(rows, "xlnet-tf-savedmodel", "lengths-latency", "", seq_len)
    for where, key in LATENCY_WHERE.items():
        for statistic in ("p50", "p99"):
            value = latency_ratio(latency, key, statistic)
            if value is None:
                reason = (latency or {}).get("served_error") or f"xlnet-tf-savedmodel lengths-latency T={seq_len}"
                values.append((None, f"not measured: {reason}" + ("" if latency else " missing")))
                continue
            short, long = (latency[key][text][f"{statistic}_ms"] for text in ("short", "long"))
            values.append((value, f"{short:.1f} ms ({latency['texts']['short']['tokens']} pieces) vs {long:.1f} ms "
                                  f"({latency['texts']['long']['tokens']} pieces), {where}"))
    return values


def step_ratio(rows, task, seq_len, ours_precision, reference, precision="float32", mode=""):
    """(tokens/s of xlnet-tf's fastest `ours_precision` row over `reference`'s fastest in `precision` with
    precision_mode `mode`, for `task` at `seq_len`, detail); (None, "not measured: ...") where one is missing."""
    mine, theirs = best(rows, "xlnet-tf", task, seq_len, ours_precision), best(rows, reference, task, seq_len,
                                                                                precision, mode)
    if not mine or not theirs:
        named = reference if precision == "float32" else f"{reference} {precision_text(precision, mode)}"
        missing = [name for name, r in (("xlnet-tf", mine), (named, theirs)) if not r]
        return None, f"not measured: {', '.join(missing)} {task} T={seq_len} missing (xlnet-tf in {ours_precision})"
    return mine["tokens_per_s"] / theirs["tokens_per_s"], f"{mine['label']} vs {theirs['label']}"


def evaluate_targets(rows, options: BenchmarkOptions, cpu_flags=None):
    """Each target with its measured value (None, with the reason, when a side is missing) and whether it is met:
    TARGETS, then AMX_TARGETS (`amx_targets` on `cpu_flags`: `machine_info`'s), then with the "precision" task
    its targets (`precision_targets`)."""
    length, long = options.seq_len, options.long_seq_len

    def ratio(task, ours_precision, reference):
        return step_ratio(rows, task, length, ours_precision, reference)

    values = [
        ratio("inference", "float32", "keras-hub"),
        ratio("inference", "bfloat16", "keras-hub"),
        ratio("finetune", "float32", "keras-hub"),
        ratio("pretrain", "float32", "model-garden"),
        ratio("pretrain", "float32", "transformers"),
    ]
    ours = [r for r in rows if r["implementation"] == "xlnet-tf" and r["status"] == "ok" and r.get("peak_fraction")]
    top = max(ours, key=lambda r: r["peak_fraction"], default=None)
    values.append((top["peak_fraction"], top["label"]) if top else (None, "not measured"))
    mine = best(rows, "xlnet-tf", "pretrain", long) if long else None
    theirs = best(rows, "transformers", "pretrain", long) if long else None
    if mine and theirs and theirs.get("peak_mb"):
        values.append((mine["peak_mb"] / theirs["peak_mb"],
                       f"{mine['peak_mb']:.0f} MB vs {theirs['peak_mb']:.0f} MB at T={long}"))
    else:
        values.append((None, "not measured: needs xlnet-tf and transformers pretraining at the long length"))
    errors = [r["rel_error_vs_float32"] for r in rows if r.get("rel_error_vs_float32") is not None]
    values.append((max(errors), f"largest of {len(errors)} bfloat16 inference rows") if errors
                  else (None, "not measured"))
    values += length_targets(rows, length)
    results = []
    for target, (value, detail) in zip(TARGETS, values):
        met = None if value is None else (value <= target.bound if target.at_most else value >= target.bound)
        results.append({"target": target.name, "value": value, "bound": target.bound,
                        "at_most": target.at_most, "met": met, "detail": detail})
    results += amx_targets(rows, length, cpu_flags)
    if "precision" in options.tasks:
        results += precision_targets(rows, cpu_flags)
    return results


def machine_info():
    """CPU, core count, the CPU's instruction sets that decide bfloat16 / int8 speed (`hardware.REPORTED_FLAGS`)
    and the versions of the frameworks (read from package metadata, nothing imported)."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    from xlnet_tf.hardware import cpu_flags, reported_flags

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "versions": versions,
            "cpu_flags": reported_flags(cpu_flags())}


def peak_precisions(cases):
    """The precisions whose matmul peak the rows of `cases` divide by (`summarize`): those of PRECISIONS that a
    case runs in, in that order (float32 when none does). A run without bfloat16 cases measures no bfloat16 peak,
    which on a CPU that emulates bfloat16 (AVX2 only) takes about five times the float32 one."""
    return [precision for precision in PRECISIONS if any(case.precision == precision for case in cases)] or \
        ["float32"]


def run_benchmark(options: BenchmarkOptions, output_dir, progress=True):
    """Measures the matmul peak of the precisions the cases run in, then every planned case; writes and returns
    the report dict."""
    from tqdm import tqdm

    from xlnet_tf.benchmarks import report

    os.makedirs(output_dir, exist_ok=True)
    cases = plan_cases(options)
    began = time.time()
    bar = tqdm(total=len(cases) + 1, desc="matmul peak", unit="case", disable=not progress)
    matmul = run_worker(["--matmul", "2048", ",".join(peak_precisions(cases))], options.timeout)
    peaks = matmul.get("gflops", {})
    bar.update()
    rows = []
    for case in cases:
        bar.set_description(case.label())
        rows.append(summarize(case, run_worker([json.dumps(case.to_dict())], options.timeout), peaks))
        bar.update()
    bar.close()
    add_ratios(rows)
    machine = machine_info()
    results = {
        "machine": machine, "matmul_peak_gflops": peaks, "matmul": matmul,
        "options": {**dataclasses.asdict(options), "xla_modes": list(options.xla_modes)},
        "rows": rows, "targets": evaluate_targets(rows, options, machine["cpu_flags"]), "wall_s": time.time() - began,
    }
    if "documents" in options.tasks:
        results["documents"] = document_growth(rows)
        results["documents_training"] = document_training(rows)
    if "memory" in options.tasks:
        results["memory"] = recompute_comparison(rows)
    if "serving" in options.tasks:
        results["serving"] = serving_targets(rows)
    if "precision" in options.tasks:
        results["precision"] = precision_comparison(rows)
    if "generate" in options.tasks:
        results["generate"] = generate_comparison(rows)
    report.write(results, output_dir)
    return results
