"""xlnet-tf generate: text continued by a pretrained or converted language model."""

from __future__ import annotations

import dataclasses
import json

from xlnet_tf.commands.common import Command, UNRECORD_HINT
from xlnet_tf.errors import UserError


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
        raise UserError(error.explain(UNRECORD_HINT)) from None
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


def add_generate_arguments(parser):
    parser.add_argument("--model-dir", required=True, help="a pretrained (xlnet-tf pretrain) or converted directory "
                          "with an LM head")
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", action="append", help="a prompt (repeat for a batch); prints prompt\u2502continuation")
    prompt.add_argument("--input", help="prompts: JSONL with a \"prompt\" field per line, or text, one prompt a line")
    parser.add_argument("--output", help="JSONL: each input row plus text, tokens, log_probs, finish_reason "
                          "(default: printed)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens generated per prompt at most")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the default); > 0: sample at "
                          "this temperature")
    parser.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="sample among the most likely tokens whose "
                          "probability reaches p (1: all)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed: prompt i of the input samples with "
                          "seed + i, statelessly (the same seed, the same text)")
    parser.add_argument("--stop-ids", metavar="ID,ID,...", help="ids that end a continuation (default: </s>, "
                          "<eod>, <eop>; an empty string: none)")
    parser.add_argument("--padding-text", help="text read before every prompt, then <eod> (XLNet continues short "
                          "prompts better after a long context)")
    parser.add_argument("--padding-text-file", help="--padding-text from a file")
    parser.add_argument("--memory-window", type=int, default=0, help="positions each step attends to (0: the whole "
                          "prompt and continuation; M: the last M, as Transformer-XL memory)")
    parser.add_argument("--spm-model", help="SentencePiece model (default: MODEL_DIR/spiece.model)")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts generated together")


GENERATE = Command(
    "generate", "continue text with a pretrained or converted LM (cached, left-to-right after the prompt)",
    add_generate_arguments, _generate, input_paths=("model_dir", "input", "spm_model", "padding_text_file"))
