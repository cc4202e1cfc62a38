"""xlnet-tf export: a fine-tuned model (or a language model) as a SavedModel with its tokenizer built in."""

from __future__ import annotations

from xlnet_tf.commands.common import Command, UNRECORD_HINT
from xlnet_tf.commands.evaluate import add_checkpoint_flag
from xlnet_tf.errors import UserError


def _export(args):
    from xlnet_tf.export import export_model
    from xlnet_tf.generation import RecordedRunOptionsError

    from xlnet_tf import files
    from xlnet_tf.heads import FINETUNE_FILE

    if files.exists(files.join(args.model_dir, FINETUNE_FILE)):  # a fine-tuned directory (not a language model)
        from xlnet_tf.commands.evaluate import checkpoint_used

        _, line = checkpoint_used(args.model_dir, args.checkpoint)
        if line:
            print(line)
    elif args.checkpoint:
        raise UserError(f"--checkpoint is for a fine-tuned directory; {args.model_dir} has no {FINETUNE_FILE}")
    try:
        print(export_model(args.model_dir, args.export_base, args.version, args.max_seq_len, args.reusable,
                           precision=args.precision, max_new_tokens=args.max_new_tokens, packing=args.packing,
                           checkpoint=args.checkpoint))
    except RecordedRunOptionsError as error:  # a language model's export generates
        raise UserError(error.explain(UNRECORD_HINT)) from None


def add_export_arguments(parser):
    parser.add_argument("--model-dir", required=True, help="a fine-tuned model directory, or a pretrained / "
                        "converted language model (exported for text generation: task lm); the export computes "
                        "with the run options it records (run_options.json)")
    parser.add_argument("--export-base", required=True, metavar="BASE/NAME", help="writes BASE/NAME/<version>/ (local, or gs://...: copied file by file, "
                                     "saved_model.pb last)")
    parser.add_argument("--version", type=int, help="default: the next free integer")
    parser.add_argument("--max-seq-len", type=int, help="default: the model's max_seq_len (a language model: the "
                        "prompt tokens kept, 512)")
    parser.add_argument("--max-new-tokens", type=int, help="a language model's export: the most tokens one request "
                        "generates (default 64)")
    add_checkpoint_flag(parser)
    parser.add_argument("--reusable", action="store_true",
                        help="export the encoder alone as a reusable, trainable SavedModel")
    parser.add_argument("--packing", default="auto", metavar="auto|none",
                        help="auto (the default): classification, regression, multi-label and race exports pack "
                             "the rows of a request (several texts, or requests merged by --enable_batching) into "
                             "rows of the request's width, each text attending only to itself (the same answers, "
                             "fewer positions); none: every text its own row")
    parser.add_argument("--precision", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="what the served graph computes in (float32 variables; softmax, layer norm and the "
                             "outputs in float32; text in, float32 out in every precision): bfloat16 for AVX512_BF16 "
                             "/ AMX CPUs, A100 / H100 and TPUs, float16 for GPUs with tensor cores (T4, V100)")


EXPORT = Command(
    "export", "a fine-tuned model -> SavedModel with built-in tokenization",
    add_export_arguments, _export, input_paths=("model_dir",), log_folder="model_dir")
