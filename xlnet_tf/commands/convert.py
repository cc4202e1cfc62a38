"""xlnet-tf convert: published TF1 checkpoints (official) or transformers weights (huggingface) to an
xlnet-tf directory."""

from __future__ import annotations

from xlnet_tf.commands.common import Command
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


def _checkpoint_index(args, dest):
    """A TF1 checkpoint prefix (official SRC) exists where its .index file does."""
    return (args.src + ".index",) if dest == "src" and args.source == "official" else ()


def add_convert_arguments(parser):
    sources = parser.add_subparsers(dest="source", required=True, metavar="SOURCE")
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


CONVERT = Command(
    "convert", "convert published TF1 checkpoints or transformers weights to an xlnet-tf directory",
    add_convert_arguments, _convert, input_paths=("src", "config", "spm_model"), companions=_checkpoint_index)
