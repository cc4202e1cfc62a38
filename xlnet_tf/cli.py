"""`xlnet-tf` command line: parses flags and calls the library (nothing else lives here)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import re
import sys

from xlnet_tf.config import RECOMPUTE_MODES
from xlnet_tf.errors import UserError


def _convert(args):
    from xlnet_tf import convert

    if args.source == "huggingface":
        convert.convert_transformers(args.src, args.out, args.max_seq_len, allow_unused=args.allow_unused)
    else:
        for flag in ("mem_len", "reuse_len"):
            if getattr(args, flag) < 0:
                raise UserError(f"--{flag} must be >= 0, got {getattr(args, flag)}")
        convert.convert_official(args.src, args.out, args.config, args.spm_model, args.max_seq_len,
                                 clamp_len=args.clamp_len, same_length=args.same_length, bi_data=args.bi_data,
                                 mem_len=args.mem_len, reuse_len=args.reuse_len)
    print(f"wrote {args.out}")


def _sample_data(args):
    from xlnet_tf.sample_data import write_sample

    print(write_sample(args.task, args.output_dir, seed=args.seed))


def _train_spm(args):
    from xlnet_tf.tokenization import train_spm

    path = train_spm(args.input, args.model_prefix, args.vocab_size, lower_case=args.lower_case,
                     log_file=None if args.verbose else _log_file(args))
    print(f"wrote {path} and {args.model_prefix}.vocab")


def _training_options(args, strategy, **extra):
    from xlnet_tf.training.loop import TrainingOptions
    from xlnet_tf.training.strategies import default_steps_per_loop

    steps_per_loop = args.steps_per_loop or default_steps_per_loop(strategy)
    return TrainingOptions(
        train_steps=args.train_steps, batch_size=args.batch_size, learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps, weight_decay=args.weight_decay, clip_norm=args.clip_norm,
        grad_accum_steps=args.grad_accum_steps, steps_per_loop=steps_per_loop, save_every=args.save_every,
        keep_checkpoints=args.keep_checkpoints, jit_compile=args.jit_compile, seed=args.seed,
        initial_loss_scale=args.initial_loss_scale, loss_scale_growth_steps=args.loss_scale_growth_steps, **extra,
    )


def _comma_list(flag, value, allowed):
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    unknown = [item for item in items if item not in allowed]
    if not items or unknown:
        raise UserError(f"{flag}: unknown {unknown or value!r}; choose from {', '.join(allowed)}")
    return items


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
    _local_only("--output-dir", args.output_dir, "the benchmark's worker processes write their results there")
    results = run_benchmark(options, args.output_dir)
    print(f"wrote {args.output_dir}/results.json, report.md and throughput.png")
    return 0 if all(row["status"] in ("ok", "missing", "unsupported") for row in results["rows"]) else 1


def _start_run(args):
    """Strategy first (logical CPU devices must be set before TensorFlow initialises them), then seeds."""
    strategy = _strategy(args)
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(args.seed)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    return strategy


def _pretrain(args):
    from xlnet_tf.config import RunOptions
    from xlnet_tf.data.pretraining import load_metadata
    from xlnet_tf.training.pretrain import PretrainingSetup, resolve_config, run_pretraining

    strategy = _start_run(args)
    metadata = load_metadata(args.data_dir)
    if args.seq_len is not None and args.seq_len != metadata["seq_len"]:
        raise UserError(f"--seq-len {args.seq_len} differs from the data's seq_len {metadata['seq_len']} "
                        f"({args.data_dir}/metadata.json)")
    config = resolve_config(args.config, args.model_size, metadata["vocab_size"])
    run_options = RunOptions(
        dropout=args.dropout, dropatt=args.dropatt, initializer_range=args.init_std, recompute=args.recompute,
        mem_len=metadata["reuse_len"] if args.mem_len is None else args.mem_len,
        reuse_len=metadata["reuse_len"], bi_data=bool(metadata.get("bi_data")), clamp_len=args.clamp_len,
    )
    num_predict = args.num_predict or max(1, round(metadata["seq_len"] / 6))
    setup = PretrainingSetup(args.data_dir, args.model_dir, config, run_options, num_predict, args.objective,
                             args.mixed_precision)
    trainer, records = run_pretraining(setup, _training_options(args, strategy), strategy)
    if records:
        print(f"pretrained to step {records[-1]['step']}: loss {records[0]['loss']:.4f} -> {records[-1]['loss']:.4f}; "
              f"model directory {args.model_dir}")
    if trainer.stopped_by_signal:
        return 143
    return 0


def _finetune(args):
    from xlnet_tf import files
    from xlnet_tf.config import RunOptions, XLNetConfig
    from xlnet_tf.model import CONFIG_FILE, SPM_FILE
    from xlnet_tf.training.finetune import FinetuneSetup, parse_widths, run_finetuning
    from xlnet_tf.training.pretrain import resolve_config

    if (args.train_steps is None) == (args.epochs is None):
        raise UserError("give exactly one of --train-steps and --epochs")
    if args.long_doc == "truncate" and (args.max_doc_len or args.mem_len or args.grad_segments):
        raise UserError("--max-doc-len, --mem-len and --grad-segments need --long-doc memory")
    columns = {key: _column(value) for key, value in (("text_a", args.text_a_column), ("text_b", args.text_b_column),
                                                      ("label", args.label_column)) if value is not None}
    setup = functools.partial(
        FinetuneSetup, task=args.task, train_file=args.train_file, eval_file=args.eval_file, model_dir=args.model_dir,
        lower_case=args.lower_case, init_checkpoint=args.init_checkpoint, max_seq_len=args.max_seq_len,
        doc_stride=args.doc_stride, max_query_len=args.max_query_len, epochs=args.epochs,
        mixed_precision=args.mixed_precision, bucket_boundaries=args.bucket_boundaries, long_doc=args.long_doc,
        max_doc_len=args.max_doc_len, mem_len=args.mem_len, grad_segments=args.grad_segments,
        tag_column=args.tag_column, label_all_pieces=args.label_all_pieces, squad_head=args.squad_head,
        max_answer_length=args.max_answer_length, label_separator=args.label_separator,
        tune_thresholds=args.tune_thresholds, packing=args.packing, columns=columns or None,
        skip_bad_rows=args.skip_bad_rows,
    )
    probe = setup(config=None, spm_model=None, run_options=None)  # bad flags fail before any work (the task's too)
    parse_widths(args.bucket_boundaries, args.max_seq_len, probe.doc_len)
    run_options = RunOptions(dropout=args.dropout, dropatt=args.dropatt, initializer_range=args.init_std,
                             recompute=args.recompute)
    if args.init_checkpoint:  # its recorded clamp_len / same_length / attn_type, under this run's flags
        from xlnet_tf.heads import finetune_run_options

        run_options = finetune_run_options(args.init_checkpoint, dropout=args.dropout, dropatt=args.dropatt,
                                           initializer_range=args.init_std,
                                           recompute=args.recompute)
    strategy = _start_run(args)
    spm = args.spm_model or (args.init_checkpoint and files.join(args.init_checkpoint, SPM_FILE))
    if not spm or not files.exists(spm):
        raise UserError(f"--spm-model is needed (no {SPM_FILE} found: {spm})")
    if args.init_checkpoint:
        if args.config or args.model_size:
            raise UserError("--init-checkpoint brings its architecture; drop --config / --model-size")
        config = XLNetConfig.from_json(files.join(args.init_checkpoint, CONFIG_FILE))
    else:
        from xlnet_tf.tokenization import XLNetTokenizer

        config = resolve_config(args.config, args.model_size, XLNetTokenizer(spm).vocab_size)
    setup = setup(config=config, spm_model=spm, run_options=run_options)
    # With --epochs the step count is set once the training file is read.
    options = _training_options(_with_steps(args, args.train_steps or 1), strategy, layer_decay=args.layer_decay)
    trainer, records, results = run_finetuning(setup, options, strategy)
    if records:
        print(f"fine-tuned to step {records[-1]['step']}: loss {records[0]['loss']:.4f} -> {records[-1]['loss']:.4f}")
    if results:
        print(json.dumps(results, indent=2))
    return 143 if trainer.stopped_by_signal else 0


def _column(value):
    """--text-a-column / --text-b-column / --label-column: a whole number is a column number, else a name."""
    return int(value) if re.fullmatch(r"-?\d+", value.strip()) else value


def _with_steps(args, steps):
    copy = argparse.Namespace(**vars(args))
    copy.train_steps = steps
    return copy


def _evaluate(args):
    from xlnet_tf.training.finetune import evaluate

    print(json.dumps(evaluate(args.model_dir, args.eval_file, args.batch_size, _strategy(args),
                              skip_bad_rows=args.skip_bad_rows), indent=2))


def _predict(args):
    if args.model_dir:
        for flag, value in (("--runner", args.runner), ("--input-format", args.input_format)):
            if value:
                raise UserError(f"{flag} goes with --export-dir (a Beam pipeline over an exported SavedModel), not "
                                f"with --model-dir (predicts one file in this process)")
        from xlnet_tf.training.finetune import predict

        count = predict(args.model_dir, args.input, args.output, args.batch_size, _strategy(args),
                        skip_bad_rows=args.skip_bad_rows)
        print(f"wrote {count} predictions to {args.output}")
        return
    if args.skip_bad_rows:
        raise UserError("--skip-bad-rows goes with --model-dir; with --export-dir bad rows go to the dead letters "
                        "(PREFIX-dead-letter-*.jsonl) and the pipeline goes on")
    with _beam_console(args):
        from xlnet_tf.pipelines.common import pipeline_options
        from xlnet_tf.pipelines.predict import predict_beam

        predict_beam(args.export_dir, args.input, args.output, pipeline_options(args.runner or "DirectRunner",
                                                                                args.beam_args),
                     batch_size=args.batch_size, input_format=args.input_format)


@contextlib.contextmanager
def _beam_console(args):
    """Where a Beam pipeline runs: Beam installed (or a UserError saying how), and, unless --verbose, Beam's
    import warnings and the runner's worker processes (which write to this process's stderr) in the log file."""
    from xlnet_tf.console import native_output_to
    from xlnet_tf.pipelines.common import require_beam

    with native_output_to(None if args.verbose else _log_file(args)):
        require_beam()
        yield


def _add_strategy_flags(parser, what=""):
    parser.add_argument("--strategy", default="auto", choices=["auto", "one_device", "mirrored", "multi_worker", "tpu"],
                        help=f"tf.distribute strategy{what}")
    parser.add_argument("--tpu", help="TPU name, grpc:// address, or 'local' on a TPU VM (with --strategy tpu or "
                                      "auto; default: $TPU_NAME)")
    parser.add_argument("--cpu-devices", type=int, default=2, help="logical CPU devices for --strategy mirrored without GPUs")


def _strategy(args):
    """The tf.distribute strategy of --strategy / --tpu / --cpu-devices."""
    from xlnet_tf.training.strategies import make_strategy

    return make_strategy(args.strategy, tpu=args.tpu, cpu_devices=args.cpu_devices)


def _add_training_flags(parser, steps_required=True):
    parser.add_argument("--model-dir", required=True, help="checkpoints, logs and the trained model go here (a local folder or gs://...)")
    parser.add_argument("--train-steps", type=int, required=steps_required, help="optimizer steps in all")
    parser.add_argument("--batch-size", type=int, default=32, help="global batch (all replicas), per micro-batch")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--clip-norm", type=float, default=1.0, help="clip gradients by this global norm (0 = off)")
    parser.add_argument("--grad-accum-steps", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--steps-per-loop", type=int,
                        help="optimizer steps per host call (one log line each); default 1000 on a TPU (the "
                             "original's --iterations: a host call costs a TPU far more than a GPU), else 10; "
                             "never more than --save-every")
    parser.add_argument("--save-every", type=int, default=1000, help="checkpoint every this many steps")
    parser.add_argument("--keep-checkpoints", type=int, default=5)
    _add_strategy_flags(parser)
    parser.add_argument("--mixed-precision", choices=["bfloat16", "float16"],
                        help="bfloat16 (TPUs, A100 / H100, AVX512_BF16 / AMX CPUs) or float16 (GPUs with tensor cores: "
                             "V100, T4, ...; with dynamic loss scaling) compute, float32 weights")
    parser.add_argument("--initial-loss-scale", type=float, default=2.0 ** 15,
                        help="float16: the loss scale to start from (halved on overflow, doubled after "
                             "--loss-scale-growth-steps finite steps; Keras' defaults)")
    parser.add_argument("--loss-scale-growth-steps", type=int, default=2000,
                        help="float16: finite steps in a row before the loss scale doubles")
    parser.add_argument("--jit-compile", action="store_true", help="compile the whole replica step (forward, backward, "
                        "accumulation, all-reduce, clipping, AdamW) with XLA (one device, GPUs, TPUs)")
    parser.add_argument("--deterministic", action="store_true", help="deterministic TensorFlow ops")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--dropatt", type=float, default=0.1)
    parser.add_argument("--init-std", type=_positive_float, metavar="STD",
                        help="stddev of the normal initialiser of the weights that start at random (the original's "
                             "--init_std; default: 0.02 at the published widths, d_model 768 and 1024, and "
                             "0.02 x sqrt(768 / d_model) for narrower models: 0.069 for --model-size tiny)")
    parser.add_argument("--recompute", default="none", choices=RECOMPUTE_MODES,
                        help="recompute in the backward pass instead of keeping: blocks = every block's activations "
                             "(least memory, about a third more compute), attention = only the attention scores "
                             "and probabilities (the part that grows with length squared)")


def _create_pretraining_data(args):
    settings = dict(seq_len=args.seq_len, reuse_len=args.reuse_len, num_shards=args.num_shards, seed=args.seed,
                    bi_data=args.bi_data, lower_case=True if args.lower_case else None,
                    skip_bad_lines=args.skip_bad_lines)
    if args.runner:
        with _beam_console(args):
            from xlnet_tf.pipelines.common import pipeline_options
            from xlnet_tf.pipelines.pretraining_data import create_pretraining_data_beam

            create_pretraining_data_beam(args.input, args.spm_model, args.output_dir,
                                         pipeline_options(args.runner, args.beam_args), **settings)
        return
    from xlnet_tf.data.pretraining import create_pretraining_data

    create_pretraining_data(args.input, args.spm_model, args.output_dir, **settings)


def _local_only(flag, path, why):
    """Refuses a remote `path` for a flag whose command works on local folders only (before any work)."""
    from xlnet_tf import files

    if path and files.is_remote(path):
        raise UserError(f"{flag} must be a local folder ({why}); got {path}")


def _demo(args):
    from xlnet_tf.demo import run_demo

    _local_only("--workdir", args.workdir, "the demo reuses its local work folder on a rerun")
    run_demo(args.workdir, quick=args.quick, verbose=args.verbose)


def _plot_attention(args):
    from xlnet_tf.plots import plot_attention

    print(f"wrote {plot_attention(args.model_dir, args.text, args.output, args.layers)}")


def _export(args):
    from xlnet_tf.export import export_model
    from xlnet_tf.generation import RecordedRunOptionsError

    try:
        print(export_model(args.model_dir, args.export_base, args.version, args.max_seq_len, args.reusable,
                           precision=args.precision, max_new_tokens=args.max_new_tokens, packing=args.packing))
    except RecordedRunOptionsError as error:  # a language model's export generates
        raise UserError(error.explain(_UNRECORD_HINT)) from None


# How a command-line user overrides a recorded run option that a command cannot run with (no flag sets them).
_UNRECORD_HINT = "remove them from that file (or convert again with other values)"


def _generate(args):
    from xlnet_tf import files
    from xlnet_tf.generation import GenerationOptions, generate_text, load_generator, read_prompts

    if args.memory_window < 0 or args.batch_size < 1:
        raise UserError("--memory-window must be >= 0 and --batch-size at least 1")
    stop_ids = None if args.stop_ids is None else tuple(int(x) for x in args.stop_ids.split(",") if x.strip())
    try:
        options = GenerationOptions(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                                    top_p=args.top_p, seed=args.seed, stop_ids=stop_ids,
                                    memory_window=args.memory_window)
    except ValueError as error:  # ConfigError
        raise UserError(str(error).replace("GenerationOptions: ", "")) from None
    if args.padding_text is not None and args.padding_text_file:
        raise UserError("give --padding-text or --padding-text-file, not both")
    rows = [{"prompt": text} for text in args.prompt] if args.prompt else read_prompts(args.input)
    padding = files.read_text(args.padding_text_file) if args.padding_text_file else args.padding_text
    from xlnet_tf.generation import RecordedRunOptionsError

    try:
        model, tokenizer = load_generator(args.model_dir, args.spm_model)
    except RecordedRunOptionsError as error:
        raise UserError(error.explain(_UNRECORD_HINT)) from None
    from tqdm import tqdm

    results = []
    batches = range(0, len(rows), args.batch_size)
    for start in tqdm(batches, unit="batch", disable=len(batches) < 2, dynamic_ncols=True):
        part = rows[start:start + args.batch_size]
        # Row i of the file samples with seed + i, whatever the batch size.
        generated = generate_text(model, tokenizer, [row["prompt"] for row in part],
                                  dataclasses.replace(options, seed=options.seed + start), padding)
        results += [{**row, **out} for row, out in zip(part, generated)]
    if args.output:
        files.write_text(args.output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in results))
        print(f"wrote {len(results)} generations to {args.output}")
    elif args.prompt:
        for result in results:
            print(f"{result['prompt']}\u2502{result['text']}  [{result['finish_reason']}, {len(result['tokens'])} "
                  "tokens]")
    else:
        for result in results:
            print(json.dumps(result, ensure_ascii=False))


def _grad_segments(value):
    """--grad-segments: "all" -> 0, else a whole number >= 1."""
    if value == "all":
        return 0
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"'all' or a whole number >= 1, got {value!r}")
    return int(value)


def _positive_float(value):
    """A number > 0 (argparse type)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number > 0, got {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"a number > 0, got {value!r}")
    return number


def _add_runner_flag(parser, what):
    parser.add_argument("--runner", metavar="RUNNER",
                        help=f"run as an Apache Beam pipeline ({what}) on this runner: DirectRunner (this machine), "
                             "DataflowRunner, FlinkRunner, SparkRunner, ...; Beam's own pipeline options (--project, "
                             "--temp_location, --direct_num_workers, ...) follow on the command line; needs "
                             "pip install 'xlnet-tf[beam]'")


def build_parser():
    from xlnet_tf.arguments import Parser

    parser = Parser(prog="xlnet-tf", description="XLNet on Keras 3 / TensorFlow 2.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from xlnet_tf.sample_data import SAMPLES
    from xlnet_tf.tasks import TASK_NAMES

    sample = commands.add_parser("sample-data", help="write a small dataset made from Python's bundled documentation: "
                                                     "a corpus or a task's train and dev files (nothing downloaded)")
    sample.add_argument("--task", required=True, choices=sorted(SAMPLES),
                        help="corpus (corpus.txt for train-spm / create-pretraining-data) or a finetune --task's "
                             "train and dev files in its usual format (TSV, SQuAD JSON, RACE JSON files, CoNLL)")
    sample.add_argument("--output-dir", required=True, metavar="DIR", help="the folder to write into (created)")
    sample.add_argument("--seed", type=int, default=0, help="the shuffle of the train / dev split")
    sample.set_defaults(run=_sample_data)

    spm = commands.add_parser("train-spm", help="train a SentencePiece model with XLNet's special ids and rules")
    spm.add_argument("--input", nargs="+", required=True, metavar="FILE", help="plain-text files, one sentence per line")
    spm.add_argument("--model-prefix", required=True, metavar="PREFIX", help="writes PREFIX.model and PREFIX.vocab")
    spm.add_argument("--vocab-size", type=int, required=True, metavar="N")
    spm.add_argument("--lower-case", action="store_true", help="an uncased model (lower-cases before training)")
    spm.set_defaults(run=_train_spm)

    data = commands.add_parser("create-pretraining-data", help="plain text -> sharded pretraining TFRecords")
    data.add_argument("--input", nargs="+", required=True, metavar="FILE_OR_GLOB",
                      help="UTF-8 text, one sentence (or paragraph) per line, blank lines between documents "
                           "(paths or globs; gs:// and other filesystems TensorFlow, or with --runner Beam, reads)")
    data.add_argument("--spm-model", required=True)
    data.add_argument("--output-dir", required=True)
    data.add_argument("--seq-len", type=int, default=512)
    data.add_argument("--reuse-len", type=int, default=256)
    data.add_argument("--num-shards", type=int, default=1)
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--bi-data", action="store_true", help="also write records of the reversed text")
    data.add_argument("--lower-case", action="store_true", help="the SentencePiece model is uncased (default: inferred)")
    data.add_argument("--skip-bad-lines", action="store_true", help="skip and count lines that are not UTF-8")
    _add_runner_flag(data, "the same records as without it")
    data.set_defaults(run=_create_pretraining_data)

    pretrain = commands.add_parser("pretrain", help="permutation-LM pretraining on tf.distribute")
    pretrain.add_argument("--data-dir", required=True, help="output of create-pretraining-data")
    size = pretrain.add_mutually_exclusive_group(required=True)
    size.add_argument("--config", help="xlnet_config.json (the architecture)")
    size.add_argument("--model-size", choices=["tiny", "base", "large"])
    _add_training_flags(pretrain)
    pretrain.add_argument("--seq-len", type=int, help="must equal the data's (checked)")
    pretrain.add_argument("--mem-len", type=int, help="memory length (default: the data's reuse_len)")
    pretrain.add_argument("--num-predict", type=int, help="targets per sequence (default: seq_len / 6)")
    pretrain.add_argument("--clamp-len", type=int, default=-1)
    pretrain.add_argument("--objective", choices=["plm", "mlm"], default="plm")
    pretrain.set_defaults(run=_pretrain)

    finetune = commands.add_parser("finetune", help="fine-tune on classification, regression, SQuAD, RACE or token "
                                   "classification")
    finetune.add_argument("--task", required=True, choices=TASK_NAMES,
                          help="token-classification: tagged words (named entities, part of speech, slots) from "
                               "CoNLL-style files (a word per line, the tag in --tag-column, blank lines between "
                               "sentences) or JSONL ({\"tokens\": [...], \"tags\": [...]}); multi-label: texts "
                               "with any number of labels (JSONL: a list; TSV / CSV: --label-separator), each label "
                               "its own sigmoid and binary cross-entropy")
    finetune.add_argument("--train-file", required=True)
    finetune.add_argument("--eval-file", help="evaluated after training (metrics in MODEL_DIR/eval_results.json)")
    finetune.add_argument("--spm-model", help="default: INIT_CHECKPOINT/spiece.model")
    finetune.add_argument("--lower-case", action="store_true", help="the SentencePiece model is uncased")
    finetune.add_argument("--init-checkpoint",
                          help="a pretrained directory (pretrain's --model-dir or convert's OUT); the clamp_len, "
                               "same_length and attn_type it records (run_options.json) apply to fine-tuning and are "
                               "recorded in --model-dir for evaluate, predict and export (its mem_len, reuse_len "
                               "and bi_data are not: fine-tuning carries no memory and reads every row forward)")
    arch = finetune.add_mutually_exclusive_group()
    arch.add_argument("--config", help="xlnet_config.json, for random initialisation")
    arch.add_argument("--model-size", choices=["tiny", "base", "large"], help="for random initialisation")
    _add_training_flags(finetune, steps_required=False)
    finetune.add_argument("--epochs", type=float, help="instead of --train-steps")
    finetune.add_argument("--max-seq-len", type=int, default=128)
    finetune.add_argument("--layer-decay", type=float, default=1.0, help="layer-wise learning-rate decay")
    finetune.add_argument("--doc-stride", type=int,
                          help="windows over long texts: SQuAD, context tokens between windows (default 128); "
                               "token-classification, pieces between the starts of a long sentence's windows "
                               "(default (--max-seq-len - 2) / 2; every word is predicted once, from the window "
                               "where it has the most context)")
    finetune.add_argument("--max-query-len", type=int, default=64, help="SQuAD question tokens kept")
    finetune.add_argument("--bucket-boundaries", default="auto", metavar="auto|none|L1,L2,...",
                          help="padding by length: every batch holds rows of each length stratum, each part "
                               "padded to its stratum's width (auto: up to 4 strata chosen from the training "
                               "file; none: every row padded to --max-seq-len; L1,L2,...: these widths); "
                               "evaluate and predict batch by the same widths")
    finetune.add_argument("--packing", default="auto", metavar="auto|none",
                          help="auto (the default): classification, regression, multi-label and race pack a step's "
                               "examples into rows of a fixed width (the longest training row), each example "
                               "attending only to itself, when that computes no more positions than the length "
                               "strata; evaluate and predict pack the same way. none: length strata only. SQuAD, "
                               "token classification and --long-doc memory never pack")
    finetune.add_argument("--long-doc", choices=["truncate", "memory"], default="truncate",
                          help="texts longer than --max-seq-len: truncate (one window, the original's) or memory "
                               "(classification, regression, race: up to --max-doc-len tokens read as segments of "
                               "--max-seq-len, each attending to the Transformer-XL memory of the ones before)")
    finetune.add_argument("--max-doc-len", type=int, help="with --long-doc memory: tokens kept per document")
    finetune.add_argument("--mem-len", type=int, default=0,
                          help="with --long-doc memory: memory positions per layer (default: every earlier segment)")
    finetune.add_argument("--grad-segments", type=_grad_segments, default=0, metavar="all|K",
                          help="with --long-doc memory: the last K segments' memory keeps its gradient (all, the "
                               "default: every segment learns, as in one window over the document; 1: the last "
                               "only, memory without gradient as the paper's stop_gradient: less memory and time)")
    finetune.add_argument("--squad-head", choices=["beam", "simple"], default="beam",
                          help="squad: beam (the original's: end logits conditioned on the start, top 5 x 5 spans, "
                               "an answerability head) or simple (transformers' XLNetForQuestionAnsweringSimple: "
                               "start / end logits from one dense layer, spans scored by start + end logit, the "
                               "null answer by the <cls> score)")
    finetune.add_argument("--max-answer-length", type=int, default=64,
                          help="squad: pieces of a predicted answer at most (predict, evaluate, export)")
    finetune.add_argument("--label-separator", default=",",
                          help="multi-label, TSV / CSV: what separates the labels of one field (an empty field: no "
                               "label)")
    finetune.add_argument("--tune-thresholds", action="store_true",
                          help="multi-label: tune each label's threshold on --eval-file for its best F1 (default "
                               "0.5 each); recorded, used by evaluate, predict and export")
    for part, default in (("text-a", "text_a, or the file's one column named text, sentence, review, content, "
                                     "comment or document (any case)"), ("text-b", "text_b when there is one"),
                          ("label", "label")):
        finetune.add_argument(f"--{part}-column", metavar="NAME|N",
                              help=f"classification, regression, multi-label: the TSV / CSV column (its header's name, "
                                   f"or its number, 0 = first, in a file without a header row) or JSONL key of the "
                                   f"{part.replace('-', ' ')} (default: {default}); recorded for evaluate and predict")
    finetune.add_argument("--skip-bad-rows", action="store_true", help="skip bad rows (questions, sentences) of "
                          "--train-file and --eval-file, each logged with its line, instead of stopping at the first")
    finetune.add_argument("--tag-column", type=int, default=-1,
                          help="token-classification, CoNLL files: the tag's column (0 = the word's, -1 = the last)")
    finetune.add_argument("--label-all-pieces", action="store_true",
                          help="token-classification: every piece of a word carries the word's tag in the loss "
                               "(default: the word's first piece only, the others ignored; predictions are read "
                               "from the first piece either way)")
    finetune.set_defaults(run=_finetune, learning_rate=2e-5, batch_size=32, save_every=500)

    evaluate = commands.add_parser("evaluate", help="metrics of a fine-tuned model on a labelled file")
    evaluate.add_argument("--model-dir", required=True,
                          help="a fine-tuned directory (computed with the run options it records, run_options.json)")
    evaluate.add_argument("--eval-file", required=True)
    evaluate.add_argument("--batch-size", type=int, default=32)
    evaluate.add_argument("--skip-bad-rows", action="store_true", help="skip bad rows (questions, sentences) of "
                          "--eval-file, each logged with its line, instead of stopping at the first")
    _add_strategy_flags(evaluate, " (each batch split across its replicas)")
    evaluate.set_defaults(run=_evaluate)

    predict = commands.add_parser("predict", help="predictions of a fine-tuned model (JSONL; SQuAD: {id: answer}), "
                                  "or of an export as a Beam pipeline (--export-dir)")
    model = predict.add_mutually_exclusive_group(required=True)
    model.add_argument("--model-dir", help="a fine-tuned directory: predicts one --input file in this process "
                                           "(with the run options it records, run_options.json)")
    model.add_argument("--export-dir", metavar="BASE/NAME/VERSION",
                       help="an exported SavedModel (xlnet-tf export): batch prediction as an Apache Beam pipeline "
                            "(RunInference on serving_default; rows that fail go to dead letters)")
    predict.add_argument("--input", required=True, metavar="FILE_OR_GLOB",
                         help="--model-dir: one TSV / CSV / JSONL (SQuAD: JSON; token-classification: CoNLL or JSONL) file; --export-dir: a path or glob "
                              "of JSONL / TSV / CSV / TFRecord (tf.train.Example) files whose fields are the "
                              "export's inputs, and an optional id")
    predict.add_argument("--output", required=True, metavar="FILE_OR_PREFIX",
                         help="--model-dir: the JSONL file; --export-dir: PREFIX of PREFIX-SSSSS-of-NNNNN.jsonl "
                              "(predictions) and PREFIX-dead-letter-SSSSS-of-NNNNN.jsonl")
    predict.add_argument("--batch-size", type=int, default=32, help="rows per model call (--export-dir: at most)")
    predict.add_argument("--skip-bad-rows", action="store_true", help="--model-dir: skip bad rows (questions, "
                         "sentences) of --input, each logged with its line; they get no prediction (--export-dir: "
                         "bad rows always go to the dead letters)")
    predict.add_argument("--input-format", choices=["jsonl", "tsv", "csv", "tfrecord"],
                         help="--export-dir: the format of every input file (default: from each extension)")
    _add_runner_flag(predict, "with --export-dir; default DirectRunner, give it to pass Beam options")
    _add_strategy_flags(predict, " for --model-dir (each batch split across its replicas)")
    predict.set_defaults(run=_predict)

    generate = commands.add_parser("generate", help="continue text with a pretrained or converted LM (cached, "
                                   "left-to-right after the prompt)")
    generate.add_argument("--model-dir", required=True, help="a pretrained (xlnet-tf pretrain) or converted directory "
                          "with an LM head")
    prompt = generate.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", action="append", help="a prompt (repeat for a batch); prints prompt\u2502continuation")
    prompt.add_argument("--input", help="prompts: JSONL with a \"prompt\" field per line, or text, one prompt a line")
    generate.add_argument("--output", help="JSONL: each input row plus text, tokens, log_probs, finish_reason "
                          "(default: printed)")
    generate.add_argument("--max-new-tokens", type=int, default=32, help="tokens generated per prompt at most")
    generate.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the default); > 0: sample at "
                          "this temperature")
    generate.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    generate.add_argument("--top-p", type=float, default=1.0, help="sample among the most likely tokens whose "
                          "probability reaches p (1: all)")
    generate.add_argument("--seed", type=int, default=0, help="sampling seed: prompt i of the input samples with "
                          "seed + i, statelessly (the same seed, the same text)")
    generate.add_argument("--stop-ids", metavar="ID,ID,...", help="ids that end a continuation (default: </s>, "
                          "<eod>, <eop>; an empty string: none)")
    generate.add_argument("--padding-text", help="text read before every prompt, then <eod> (XLNet continues short "
                          "prompts better after a long context)")
    generate.add_argument("--padding-text-file", help="--padding-text from a file")
    generate.add_argument("--memory-window", type=int, default=0, help="positions each step attends to (0: the whole "
                          "prompt and continuation; M: the last M, as Transformer-XL memory)")
    generate.add_argument("--spm-model", help="SentencePiece model (default: MODEL_DIR/spiece.model)")
    generate.add_argument("--batch-size", type=int, default=8, help="prompts generated together")
    generate.set_defaults(run=_generate)

    demo = commands.add_parser("demo", help="raw text -> pretraining -> fine-tuning -> export -> serving, on one machine")
    demo.add_argument("--workdir", default="demo_work", help="where every step keeps its output (reused on rerun)")
    demo.add_argument("--quick", action="store_true", help="a smaller run (under 5 minutes on 2 CPU cores)")
    demo.set_defaults(run=_demo)

    export = commands.add_parser("export", help="a fine-tuned model -> SavedModel with built-in tokenization")
    export.add_argument("--model-dir", required=True, help="a fine-tuned model directory, or a pretrained / "
                        "converted language model (exported for text generation: task lm); the export computes "
                        "with the run options it records (run_options.json)")
    export.add_argument("--export-base", required=True, metavar="BASE/NAME", help="writes BASE/NAME/<version>/ (local, or gs://...: copied file by file, "
                                     "saved_model.pb last)")
    export.add_argument("--version", type=int, help="default: the next free integer")
    export.add_argument("--max-seq-len", type=int, help="default: the model's max_seq_len (a language model: the "
                        "prompt tokens kept, 512)")
    export.add_argument("--max-new-tokens", type=int, help="a language model's export: the most tokens one request "
                        "generates (default 64)")
    export.add_argument("--reusable", action="store_true",
                        help="export the encoder alone as a reusable, trainable SavedModel")
    export.add_argument("--packing", default="auto", metavar="auto|none",
                        help="auto (the default): classification, regression, multi-label and race exports pack "
                             "the rows of a request (several texts, or requests merged by --enable_batching) into "
                             "rows of the request's width, each text attending only to itself (the same answers, "
                             "fewer positions); none: every text its own row")
    export.add_argument("--precision", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="what the served graph computes in (float32 variables; softmax, layer norm and the "
                             "outputs in float32; text in, float32 out in every precision): bfloat16 for AVX512_BF16 "
                             "/ AMX CPUs, A100 / H100 and TPUs, float16 for GPUs with tensor cores (T4, V100)")
    export.set_defaults(run=_export)

    attention = commands.add_parser("plot-attention", help="attention maps of every layer and head as a PNG")
    attention.add_argument("--model-dir", required=True, help="a pretrained or fine-tuned directory (with the run "
                           "options it records, run_options.json; bi_data: the text reads forward)")
    attention.add_argument("--text", required=True)
    attention.add_argument("--output", required=True, metavar="FILE.png")
    attention.add_argument("--layers", type=int, nargs="+", help="layers to draw (default: all)")
    attention.set_defaults(run=_plot_attention)

    from xlnet_tf.serving.cli import add_query_arguments, add_serve_arguments, query_main, serve_main

    serve = commands.add_parser("serve", help="serve exported models over TensorFlow Serving's gRPC and REST APIs")
    add_serve_arguments(serve)
    serve.set_defaults(run=serve_main)
    query = commands.add_parser("query", help="query a TensorFlow-Serving-compatible server")
    add_query_arguments(query)
    query.set_defaults(run=query_main)

    bench = commands.add_parser(
        "benchmark", help="tokens/s, GFLOP/s and peak memory against keras-hub, Model Garden and transformers"
    )
    bench.add_argument("--output-dir", default="benchmark_results", help="results.json, report.md, throughput.png")
    bench.add_argument("--model-size", default="base", choices=("tiny", "base", "large"))
    bench.add_argument("--batch-size", type=int, default=8)
    bench.add_argument("--seq-len", type=int, default=128)
    bench.add_argument("--long-seq-len", type=int, default=512,
                       help="also inference, and pretraining memory, at this length (0: off)")
    bench.add_argument("--tasks", default="inference,finetune,pretrain,lengths",
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
                            "evaluated on CPUs with avx512_bf16 or amx_bf16 and on GPUs (float16: on GPUs); "
                            "generate (not by default): greedy tokens/s after one prompt of 128, 512 and 1,024 tokens "
                            "(128 new), against transformers' XLNetLMHeadModel.generate at 128; target >= 5x")
    bench.add_argument("--precisions", default="float32,bfloat16", help="of xlnet-tf (references: float32)")
    bench.add_argument("--xla", default="both", choices=("both", "on", "off"))
    bench.add_argument("--implementations", default="xlnet-tf,xlnet-tf-savedmodel,keras-hub,model-garden,transformers",
                       help="references that are not installed are reported as missing")
    bench.add_argument("--warmup", type=int, default=2, help="untimed steps before the timed ones")
    bench.add_argument("--iterations", type=int, default=5, help="timed steps (the median is reported)")
    bench.add_argument("--long-iterations", type=int, default=3, help="timed steps at --long-seq-len")
    bench.add_argument("--lengths-batch-size", type=int, default=32, help="batch of the lengths tasks")
    bench.add_argument("--lengths-steps", type=int, default=20,
                       help="timed fine-tuning steps of the lengths task (after warm-up steps of every bucket)")
    bench.add_argument("--squad-batch-size", type=int, default=8, help="windows per step of the squad-lengths task")
    bench.add_argument("--squad-steps", type=int, default=5,
                       help="timed fine-tuning steps of the squad-lengths task (after --warmup untimed)")
    bench.add_argument("--documents-batch-size", type=int, default=4,
                       help="documents per fine-tuning batch of the documents task")
    bench.add_argument("--memory-seq-len", type=int, default=512, help="length of the memory task's steps")
    bench.add_argument("--memory-pretrain-batch-size", type=int, default=8,
                       help="batch of the memory task's pretraining step")
    bench.add_argument("--memory-finetune-batch-size", type=int, default=4,
                       help="batch of the memory task's fine-tuning step")
    bench.add_argument("--memory-finetune-size", default="large", choices=("tiny", "base", "large"),
                       help="model size of the memory task's fine-tuning step")
    bench.add_argument("--serving-seconds", type=float, default=60.0,
                       help="seconds of the serving task's each client count, in-process run and overload run")
    bench.add_argument("--export-precisions", default="float32,bfloat16,float16",
                       help="the precision task's exports (export --precision; float32 is the reference of the "
                            "ratios and errors; TensorFlow emulates float16 on CPUs, slowly: raise --timeout or leave it out there)")
    bench.add_argument("--precision-batch-size", type=int, default=32, help="texts per batch of the precision task")
    bench.add_argument("--precision-batch-requests", type=int, default=20,
                       help="timed batch requests of the precision task, in process and served, after 1 untimed "
                            "(its one text: 50 requests after 10, --quick 10 after 3, as the lengths task's latency)")
    bench.add_argument("--timeout", type=float, default=1800.0, help="seconds per case")
    bench.add_argument("--quick", action="store_true",
                       help="3 timed steps after 1, no XLA, no long sequences, a few lengths steps and requests: "
                            "a smoke run")
    bench.set_defaults(run=_benchmark)

    convert = commands.add_parser(
        "convert", help="convert published TF1 checkpoints or transformers weights to an xlnet-tf directory"
    )
    sources = convert.add_subparsers(dest="source", required=True, metavar="SOURCE")
    hf = sources.add_parser("huggingface", help="a transformers XLNet directory (config.json + model.safetensors)")
    hf.add_argument("src", metavar="SRC")
    hf.add_argument("out", metavar="OUT")
    hf.add_argument("--allow-unused", action="store_true",
                    help="convert even when SRC holds tensors, heads or config.json / tokenizer_config.json values "
                         "that xlnet-tf does not implement (by default they stop the conversion, all listed); they "
                         "are left out and listed in the log. The run options config.json sets that xlnet-tf "
                         "implements (attn_type, bi_data, clamp_len, same_length, mem_len, reuse_len) are recorded "
                         "in OUT/run_options.json, the defaults of whatever loads OUT (explicit arguments win)")
    official = sources.add_parser("official", help="a published TF1 checkpoint (model/transformer/...)")
    official.add_argument("src", metavar="CKPT_PREFIX")
    official.add_argument("out", metavar="OUT")
    official.add_argument("--config", required=True, help="the published xlnet_config.json")
    official.add_argument("--spm-model", help="spiece.model to copy into OUT")
    runs = official.add_argument_group(
        "run options", "the original's run flags (run_*.py / train.py), recorded in OUT/run_options.json: the "
                       "defaults of whatever loads OUT (from_pretrained's keyword arguments win)")
    runs.add_argument("--clamp_len", "--clamp-len", type=int, default=-1, metavar="N",
                      help="clamp relative distances to N (as the original: only when N > 0; default -1, none)")
    runs.add_argument("--same_length", "--same-length", action="store_true",
                      help="with attn_type 'uni', every position attends to the same number of keys")
    runs.add_argument("--bi_data", "--bi-data", action="store_true",
                      help="the second half of every batch reads backward relative positions (a pretrained "
                           "checkpoint only)")
    runs.add_argument("--mem_len", "--mem-len", type=int, default=0, metavar="N",
                      help="hidden states each layer caches for the next call (new_mems; default 0: none)")
    runs.add_argument("--reuse_len", "--reuse-len", type=int, default=0, metavar="N",
                      help="leading positions of a call that are cached (default 0: all)")
    for source in (hf, official):
        source.add_argument("--max-seq-len", type=int, default=512,
                            help="recorded for fine-tuned heads (the length export and predict use)")
    convert.set_defaults(run=_convert)
    where = {"train-spm": "PREFIX.log", "predict": "OUTPUT.log",
             **{k: f"{v.upper()}/xlnet-tf.log" for k, v in LOG_FOLDERS.items()}}
    for name, command in commands.choices.items():
        log = where.get(name, f"$TMPDIR/xlnet-tf-logs/{name}.log")
        # convert: before or after its SOURCE (SUPPRESS: the source's parser keeps a --verbose given before it)
        for leaf, default in [(command, False)] + [(s, argparse.SUPPRESS) for s in sources.choices.values()
                                                   if command is convert]:
            leaf.add_argument("--verbose", action="store_true", default=default, help="also show on the console "
                              "other libraries' log records (always written to the log file) and TensorFlow's C++ "
                              f"lines (else written there only); the log file: {log}" + (
                                  " (a local file under $TMPDIR/xlnet-tf-logs when that folder is remote)"
                                  if name in where else ""))
    return parser


# Where each command's third-party logs go (console.configure): a file in its work or model directory; a command
# that writes no folder: $TMPDIR/xlnet-tf-logs/COMMAND.log (train-spm: PREFIX.log, predict: OUTPUT.log).
LOG_FOLDERS = {"create-pretraining-data": "output_dir", "pretrain": "model_dir", "finetune": "model_dir",
               "export": "model_dir", "demo": "workdir"}


def _log_target(args):
    """Where the command's log file belongs (train-spm: PREFIX.log beside its model; predict: OUTPUT.log beside
    its outputs; a command without a work folder: COMMAND.log under the system's temporary folder)."""
    from xlnet_tf import files
    from xlnet_tf.console import LOG_FILE

    if args.command == "train-spm":
        return args.model_prefix + ".log"
    if args.command == "predict":  # PREFIX.log beside the outputs
        return args.output + ".log"
    if args.command in LOG_FOLDERS:
        return files.join(getattr(args, LOG_FOLDERS[args.command]), LOG_FILE)
    return _temporary_log(args.command)


def _temporary_log(command):
    import tempfile

    return os.path.join(tempfile.gettempdir(), "xlnet-tf-logs", f"{command}.log")


def _log_file(args):
    """The command's log file. A log is appended line by line, which object stores cannot do: where
    `_log_target` is remote (gs://...), a local file named after it under the system's temporary folder
    (`files.local_log_path`; the command says where); where its local folder exists but cannot be written,
    COMMAND.log under the temporary folder."""
    from xlnet_tf import files

    target = _log_target(args)
    if files.is_remote(target):
        return files.local_log_path(files.dirname(target), files.basename(target))
    folder = os.path.dirname(os.path.abspath(target))
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)  # the folders the log creates: writable where the first existing one is
    if not os.access(folder, os.W_OK) or os.path.exists(target) and not os.access(target, os.W_OK):
        return _temporary_log(args.command)
    return target


# Flags (by dest) of each command that name what must exist already: a file, a folder or a glob's matches.
INPUT_PATHS = {
    "train-spm": ("input",), "create-pretraining-data": ("input", "spm_model"), "pretrain": ("data_dir", "config"),
    "finetune": ("train_file", "eval_file", "spm_model", "init_checkpoint", "config"),
    "evaluate": ("model_dir", "eval_file"), "predict": ("model_dir", "export_dir", "input"),
    "generate": ("model_dir", "input", "spm_model", "padding_text_file"), "export": ("model_dir",),
    "plot-attention": ("model_dir",), "convert": ("src", "config", "spm_model"),
    "serve": ("model_config_file", "batching_parameters_file", "monitoring_config_file", "tfs_model_config_file",
              "tfs_batching_parameters_file", "tfs_monitoring_config_file", "tfs_ssl_config_file"),
    "query": ("ssl_ca_file", "ssl_cert_file", "ssl_key_file"),
}


def _check_inputs(args, command_parser):
    """Each path flag of INPUT_PATHS that names nothing that exists is an error naming the flag and the path
    (`files.require`), before the command does anything else."""
    from xlnet_tf import files

    names = {action.dest: action.option_strings[0] if action.option_strings else action.metavar or action.dest
             for action in command_parser._actions}
    for dest in INPUT_PATHS.get(args.command, ()):
        values = getattr(args, dest, None)
        for value in values if isinstance(values, list) else [values]:
            if not value:
                continue
            if args.command == "convert" and dest == "src" and args.source == "official":
                files.require(value, names[dest], also=(value + ".index",))  # a checkpoint prefix
            else:
                files.require(value, names[dest], pattern=dest == "input" and args.command in (
                    "create-pretraining-data", "predict"))


def main(argv=None):
    """Runs one command; returns its exit status (2: a user's mistake, named without a traceback).

    Unless --verbose, what native code writes to stderr goes to the command's log file
    (`console.QuietNativeOutput`). Called with `argv` (from Python, a test) the console is put back on return;
    as the program (`argv` None) it stays so to the end, where TensorFlow and gRPC may still write at exit."""
    from xlnet_tf.arguments import leaf_parser, option_strings
    from xlnet_tf.console import QuietNativeOutput, configure

    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    command_parser = leaf_parser(parser, args)
    if beam_args and not getattr(args, "runner", None):
        command_parser.unrecognized(beam_args)  # the command's own usage and "unrecognized arguments"
    args.beam_args = beam_args
    native = None if args.verbose else QuietNativeOutput()
    if native is not None and argv is None:
        import faulthandler

        faulthandler.enable(sys.stderr)  # a crash in native code still shows where, on the console
    try:
        _check_inputs(args, command_parser)
        log_file = _log_file(args)
        configure(log_file, args.verbose)
        if native is not None:
            native.into(log_file)
        if log_file != _log_target(args):
            import logging

            logging.getLogger("xlnet_tf").info("other libraries' log lines go to %s (%s is remote or not "
                                               "writable)", log_file, _log_target(args))
        return args.run(args) or 0
    except (UserError, FileNotFoundError) as error:
        message = error.for_command(option_strings(command_parser)) if isinstance(error, UserError) else error
        print(f"xlnet-tf {args.command}: error: {message}", file=sys.stderr)
        return 2
    finally:
        if native is not None and argv is not None:
            native.close()


if __name__ == "__main__":
    sys.exit(main())
