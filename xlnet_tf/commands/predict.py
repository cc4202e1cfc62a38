"""xlnet-tf predict: a fine-tuned model's predictions of one file in this process, or an export's as a Beam
pipeline."""

from __future__ import annotations

from xlnet_tf.commands.common import (Command, add_runner_flag, add_strategy_flags, beam_console,
                                     distribution_strategy)
from xlnet_tf.commands.evaluate import CHECKPOINT_HELP
from xlnet_tf.errors import UserError


def _predict(args):
    if args.model_dir:
        for flag, value in (("--runner", args.runner), ("--input-format", args.input_format)):
            if value:
                raise UserError(f"{flag} goes with --export-dir (a Beam pipeline over an exported SavedModel), not "
                                f"with --model-dir (predicts one file in this process)")
        from xlnet_tf.commands.evaluate import checkpoint_used
        from xlnet_tf.training.finetune import predict

        _, line = checkpoint_used(args.model_dir, args.checkpoint)
        if line:
            print(line)
        from xlnet_tf.commands.common import column

        count = predict(args.model_dir, args.input, args.output, args.batch_size, distribution_strategy(args),
                        skip_bad_rows=args.skip_bad_rows, checkpoint=args.checkpoint,
                        id_column=None if args.id_column is None else column(args.id_column))
        print(f"wrote {count} predictions to {args.output}")
        return
    if args.checkpoint:
        raise UserError("--checkpoint goes with --model-dir (an export holds the weights it was exported with)")
    if args.skip_bad_rows:
        raise UserError("--skip-bad-rows goes with --model-dir; with --export-dir bad rows go to the dead letters "
                        "(PREFIX-dead-letter-*.jsonl) and the pipeline goes on")
    with beam_console(args):
        from xlnet_tf.pipelines.common import pipeline_options
        from xlnet_tf.pipelines.predict import predict_beam

        predict_beam(args.export_dir, args.input, args.output, pipeline_options(args.runner or "DirectRunner",
                                                                                args.beam_args),
                     batch_size=args.batch_size, input_format=args.input_format, id_column=args.id_column)


def add_predict_arguments(parser):
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--model-dir", help="a fine-tuned directory: predicts one --input file in this process "
                                           "(with the run options it records, run_options.json)")
    model.add_argument("--export-dir", metavar="BASE/NAME/VERSION",
                       help="an exported SavedModel (xlnet-tf export): batch prediction as an Apache Beam pipeline "
                            "(RunInference on serving_default; rows that fail go to dead letters)")
    parser.add_argument("--input", required=True, metavar="FILE_OR_GLOB",
                         help="--model-dir: one TSV / CSV / JSONL (SQuAD: JSON; token-classification: CoNLL or JSONL) file; --export-dir: a path or glob "
                              "of JSONL / TSV / CSV / TFRecord (tf.train.Example) files whose fields are the "
                              "export's inputs, and an optional id")
    parser.add_argument("--output", required=True, metavar="FILE_OR_PREFIX",
                         help="--model-dir: the JSONL file; --export-dir: PREFIX of PREFIX-SSSSS-of-NNNNN.jsonl "
                              "(predictions) and PREFIX-dead-letter-SSSSS-of-NNNNN.jsonl")
    parser.add_argument("--batch-size", type=int, default=32, help="rows per model call (--export-dir: at most)")
    parser.add_argument("--skip-bad-rows", action="store_true", help="--model-dir: skip bad rows (questions, "
                         "sentences) of --input, each logged with its line; each gets an output line with its "
                         "\"error\" instead of a prediction (--export-dir: bad rows always go to the dead letters)")
    parser.add_argument("--id-column", metavar="NAME|N",
                        help="the input rows' id column (a TSV / CSV header name or JSONL key; --model-dir: a "
                             "column number for a file without a header row), copied to each output line as "
                             "\"id\"; default: a column named id, else one named guid, when there is one")
    parser.add_argument("--input-format", choices=["jsonl", "tsv", "csv", "tfrecord"],
                         help="--export-dir: the format of every input file (default: from each extension)")
    parser.add_argument("--checkpoint", metavar="best|last|PATH", help="--model-dir: " + CHECKPOINT_HELP)
    add_runner_flag(parser, "with --export-dir; default DirectRunner, give it to pass Beam options")
    add_strategy_flags(parser, " for --model-dir (each batch split across its replicas)")


PREDICT = Command(
    "predict", "predictions of a fine-tuned model (JSONL; SQuAD: {id: answer}), or of an export as a Beam "
    "pipeline (--export-dir)",
    add_predict_arguments, _predict,
    input_paths=("model_dir", "export_dir", "input"), input_globs=("input",), log_beside=("output", "OUTPUT"))
