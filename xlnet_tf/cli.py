"""`xlnet-tf` command line: parses flags and calls the library (nothing else lives here)."""

from __future__ import annotations

import argparse
import logging
import sys


def _convert(args):
    from xlnet_tf import convert

    if args.source == "huggingface":
        convert.convert_transformers(args.src, args.out)
    else:
        convert.convert_official(args.src, args.out, args.config, args.spm_model)
    print(f"wrote {args.out}")


def _train_spm(args):
    from xlnet_tf.tokenization import train_spm

    path = train_spm(args.input, args.model_prefix, args.vocab_size, lower_case=args.lower_case)
    print(f"wrote {path} and {args.model_prefix}.vocab")


def build_parser():
    parser = argparse.ArgumentParser(prog="xlnet-tf", description="XLNet on Keras 3 / TensorFlow 2.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    spm = commands.add_parser("train-spm", help="train a SentencePiece model with XLNet's special ids and rules")
    spm.add_argument("--input", nargs="+", required=True, metavar="FILE", help="plain-text files, one sentence per line")
    spm.add_argument("--model-prefix", required=True, metavar="PREFIX", help="writes PREFIX.model and PREFIX.vocab")
    spm.add_argument("--vocab-size", type=int, required=True, metavar="N")
    spm.add_argument("--lower-case", action="store_true", help="an uncased model (lower-cases before training)")
    spm.set_defaults(run=_train_spm)

    convert = commands.add_parser(
        "convert", help="convert published TF1 checkpoints or transformers weights to an xlnet-tf directory"
    )
    sources = convert.add_subparsers(dest="source", required=True, metavar="SOURCE")
    hf = sources.add_parser("huggingface", help="a transformers XLNet directory (config.json + model.safetensors)")
    hf.add_argument("src", metavar="SRC")
    hf.add_argument("out", metavar="OUT")
    official = sources.add_parser("official", help="a published TF1 checkpoint (model/transformer/...)")
    official.add_argument("src", metavar="CKPT_PREFIX")
    official.add_argument("out", metavar="OUT")
    official.add_argument("--config", required=True, help="the published xlnet_config.json")
    official.add_argument("--spm-model", help="spiece.model to copy into OUT")
    convert.set_defaults(run=_convert)
    return parser


def main(argv=None):
    from xlnet_tf.errors import UserError

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        args.run(args)
    except (UserError, FileNotFoundError) as error:
        print(f"xlnet-tf {args.command}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
