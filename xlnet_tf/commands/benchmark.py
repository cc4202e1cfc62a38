"""xlnet-tf benchmark: speed and memory beside keras-hub, Model Garden and transformers
(xlnet_tf.benchmarks)."""

from __future__ import annotations

from xlnet_tf.commands.common import Command, local_only
from xlnet_tf.errors import UserError


def _benchmark(args):
    from xlnet_tf.benchmarks.common import BASE_SIZE, EXPORT_PRECISIONS, PRECISIONS, TASKS
    from xlnet_tf.benchmarks.suite import IMPLEMENTATIONS, BenchmarkOptions, run_benchmark
    from xlnet_tf.config import MODEL_SIZES

    for flag in ("batch_size", "seq_len", "iterations", "long_iterations", "lengths_batch_size", "lengths_steps",
                 "squad_batch_size", "squad_steps",
                 "documents_batch_size", "memory_seq_len", "memory_pretrain_batch_size", "memory_finetune_batch_size",
                 "precision_batch_size", "precision_batch_requests"):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.warmup < 0 or args.long_seq_len < 0:
        raise UserError("--warmup and --long-seq-len must be >= 0")
    if args.serving_seconds <= 0:
        raise UserError(f"--serving-seconds must be > 0, got {args.serving_seconds}")
    quick = {  # --quick: a smoke run
        "long_seq_len": 0, "xla_modes": (False,), "warmup": 1, "iterations": 3, "lengths_steps": 3, "squad_steps": 2,
        "lengths_predict_rows": 4 * args.lengths_batch_size, "latency_requests": 10, "latency_warmup": 3,
        "serving_seconds": min(args.serving_seconds, 3.0), "serving_texts": 64,
        "precision_batch_requests": min(args.precision_batch_requests, 3),
    } if args.quick else {}
    options = BenchmarkOptions(**{
        "size": {key: getattr(MODEL_SIZES[args.model_size], key) for key in BASE_SIZE},
        "batch_size": args.batch_size, "seq_len": args.seq_len, "long_seq_len": args.long_seq_len,
        "tasks": _comma_list("--tasks", args.tasks, TASKS),
        "precisions": _comma_list("--precisions", args.precisions, PRECISIONS),
        "xla_modes": {"both": (False, True), "on": (True,), "off": (False,)}[args.xla],
        "implementations": _comma_list("--implementations", args.implementations, IMPLEMENTATIONS),
        "warmup": args.warmup, "iterations": args.iterations, "long_iterations": args.long_iterations,
        "lengths_batch_size": args.lengths_batch_size, "lengths_steps": args.lengths_steps, "timeout": args.timeout,
        "squad_batch_size": args.squad_batch_size, "squad_steps": args.squad_steps,
        "documents_batch_size": args.documents_batch_size,
        "memory_seq_len": args.memory_seq_len, "memory_pretrain_batch_size": args.memory_pretrain_batch_size,
        "memory_finetune_batch_size": args.memory_finetune_batch_size,
        "memory_finetune_size": {key: getattr(MODEL_SIZES[args.memory_finetune_size], key) for key in BASE_SIZE},
        "serving_seconds": args.serving_seconds,
        "export_precisions": _comma_list("--export-precisions", args.export_precisions, EXPORT_PRECISIONS),
        "precision_batch_size": args.precision_batch_size, "precision_batch_requests": args.precision_batch_requests,
        **quick,
    })
    local_only("--output-dir", args.output_dir, "the benchmark's worker processes write their results there")
    results = run_benchmark(options, args.output_dir)
    print(f"wrote {args.output_dir}/results.json, report.md and throughput.png")
    return 0 if all(row["status"] in ("ok", "missing", "unsupported") for row in results["rows"]) else 1


def _comma_list(flag, value, allowed):
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    unknown = [item for item in items if item not in allowed]
    if not items or unknown:
        raise UserError(f"{flag}: unknown {unknown or value!r}; choose from {', '.join(allowed)}")
    return items


def add_benchmark_arguments(parser):
    parser.add_argument("--output-dir", default="benchmark_results", help="results.json, report.md, throughput.png")
    parser.add_argument("--model-size", default="base", choices=("tiny", "base", "large"))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--long-seq-len", type=int, default=512,
                       help="also inference, and pretraining memory, at this length (0: off)")
    parser.add_argument("--tasks", default="inference,finetune,pretrain,lengths",
                       help="lengths: fine-tuning, predict and the export's latency on SST-2 sentence lengths; "
                            "squad-lengths (not by default): fine-tuning on SQuAD 2.0's window lengths at "
                            "--long-seq-len with a head reading every position, packed vs strata vs padded "
                            "(--squad-batch-size, --squad-steps); "
                            "documents (not by default): fine-tuning examples/s and the export's latency on long "
                            "documents of 1, 2, 4 and 8 segments of --seq-len read with memory (fine-tuning with "
                            "--grad-segments all and 1, each with --recompute none and blocks, with its peak memory); "
                            "memory (not by "
                            "default): peak memory and step time of a pretraining step (--model-size) and a "
                            "fine-tuning step (--memory-finetune-size) with each --recompute mode; serving (not by "
                            "default): xlnet-tf serve with batching (--model-size's export) at 1, 8 and 32 gRPC "
                            "clients against the export in process, then 4x overload; precision (not by default): "
                            "the classification export (--model-size) in each --export-precisions, its p50 / p99 "
                            "latency for one text of --seq-len - 2 pieces and for a batch of --precision-batch-size, "
                            "in process and served, against float32, with the logits' relative error and the "
                            "share of equal labels; target: bfloat16 p50 (batch, in process) <= 0.65x float32's, "
                            "evaluated on CPUs with avx512_bf16 or amx_bf16 and on GPUs (float16: on GPUs), and on "
                            "CPUs with amx_bf16 also one text <= 0.5x and the batch <= 0.4x; "
                            "generate (not by default): greedy tokens/s after one prompt of 128, 512 and 1,024 tokens "
                            "(128 new), against transformers' XLNetLMHeadModel.generate at 128; target >= 5x")
    parser.add_argument("--precisions", default="float32,bfloat16",
                       help="of xlnet-tf; references in float32, and with bfloat16 transformers' inference and "
                            "fine-tuning also in bfloat16 weights and under autocast, and the lengths task's "
                            "fine-tuning (ours by length strata, transformers' under autocast) in bfloat16; "
                            "the AMX targets on these are evaluated on CPUs with amx_bf16 only")
    parser.add_argument("--xla", default="both", choices=("both", "on", "off"))
    parser.add_argument("--implementations", default="xlnet-tf,xlnet-tf-savedmodel,keras-hub,model-garden,transformers",
                       help="references that are not installed are reported as missing")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before the timed ones")
    parser.add_argument("--iterations", type=int, default=5, help="timed steps (the median is reported)")
    parser.add_argument("--long-iterations", type=int, default=3, help="timed steps at --long-seq-len")
    parser.add_argument("--lengths-batch-size", type=int, default=32, help="batch of the lengths tasks")
    parser.add_argument("--lengths-steps", type=int, default=20,
                       help="timed fine-tuning steps of the lengths task (after warm-up steps of every bucket)")
    parser.add_argument("--squad-batch-size", type=int, default=8, help="windows per step of the squad-lengths task")
    parser.add_argument("--squad-steps", type=int, default=5,
                       help="timed fine-tuning steps of the squad-lengths task (after --warmup untimed)")
    parser.add_argument("--documents-batch-size", type=int, default=4,
                       help="documents per fine-tuning batch of the documents task")
    parser.add_argument("--memory-seq-len", type=int, default=512, help="length of the memory task's steps")
    parser.add_argument("--memory-pretrain-batch-size", type=int, default=8,
                       help="batch of the memory task's pretraining step")
    parser.add_argument("--memory-finetune-batch-size", type=int, default=4,
                       help="batch of the memory task's fine-tuning step")
    parser.add_argument("--memory-finetune-size", default="large", choices=("tiny", "base", "large"),
                       help="model size of the memory task's fine-tuning step")
    parser.add_argument("--serving-seconds", type=float, default=60.0,
                       help="seconds of the serving task's each client count, in-process run and overload run")
    parser.add_argument("--export-precisions", default="float32,bfloat16,float16",
                       help="the precision task's exports (export --precision; float32 is the reference of the "
                            "ratios and errors; TensorFlow emulates float16 on CPUs, slowly: raise --timeout or leave it out there)")
    parser.add_argument("--precision-batch-size", type=int, default=32, help="texts per batch of the precision task")
    parser.add_argument("--precision-batch-requests", type=int, default=20,
                       help="timed batch requests of the precision task, in process and served, after 1 untimed "
                            "(its one text: 50 requests after 10, --quick 10 after 3, as the lengths task's latency)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per case")
    parser.add_argument("--quick", action="store_true",
                       help="3 timed steps after 1, no XLA, no long sequences, a few lengths steps and requests: "
                            "a smoke run")


BENCHMARK = Command(
    "benchmark", "tokens/s, GFLOP/s and peak memory against keras-hub, Model Garden and transformers",
    add_benchmark_arguments, _benchmark)
