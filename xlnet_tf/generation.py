"""Text generation at the text level: prompts in, text out (`generate_text`), a model directory loaded for it
(`load_generator`), prompt files (`read_prompts`), the tokenizer's stop ids. The decoding itself (the order, the
cache, choosing tokens) is `xlnet_tf.decoding`, below the model; its names are importable from here too.
"""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.config import ConfigError
from xlnet_tf.decoding import (  # noqa: F401  (this module's public names since it was one module)
    FINISH_REASONS, GENERATION_RUN_OPTIONS, GenerationOptions, RecordedRunOptionsError, check_generation_model,
    choose_tokens, decode, generate_ids, left_padded, row_uniforms)


def default_stop_ids(tokenizer):
    """`</s>`, `<eod>` and `<eop>`: where XLNet's pretraining text ends a document or a paragraph."""
    return (tokenizer.eos_id, tokenizer.eod_id, tokenizer.eop_id)


def generate_text(pretrainer, tokenizer, prompts, options=None, padding_text=None, **overrides):
    """Continues each prompt string -> one dict per prompt: `prompt`, `text` (the continuation), `tokens`,
    `log_probs`, `finish_reason`. `padding_text` (optional) is read before every prompt, followed by `<eod>`,
    as context (XLNet continues short prompts much better after a long text); stop ids default to
    `default_stop_ids`."""
    options = options or GenerationOptions()
    if options.stop_ids is None and "stop_ids" not in overrides:
        overrides["stop_ids"] = default_stop_ids(tokenizer)
    prefix = tokenizer.encode(padding_text) + [tokenizer.eod_id] if padding_text else []
    rows = [prefix + ids for ids in tokenizer.encode(list(prompts))]
    result = generate_ids(pretrainer, rows, options=options, **overrides)
    outputs = []
    for b, prompt in enumerate(prompts):
        n = int(result["lengths"][b])
        tokens = result["tokens"][b, :n].tolist()
        text = tokenizer.detokenize(tf.constant([tokens], tf.int32) if tokens else tf.zeros([1, 0], tf.int32))
        outputs.append({"prompt": prompt, "text": text.numpy()[0].decode("utf-8"), "tokens": tokens,
                        "log_probs": [round(float(x), 6) for x in result["log_probs"][b, :n]],
                        "finish_reason": str(result["finish_reason"][b])})
    return outputs


def load_generator(model_dir, spm_model=None, dtype=None, **run_options):
    """A pretrained (`xlnet-tf pretrain`) or converted (`convert`, with an LM head) directory, on any
    filesystem -> (XLNetPretrainer, XLNetTokenizer); the tokenizer from `spm_model` or the directory's
    spiece.model, with the preprocessing switches the directory records; `dtype` a Keras dtype policy.
    The model computes with the run options the directory records (run_options.json; clamp_len applies to
    generation), keyword arguments (RunOptions fields) winning; recorded ones that generation cannot run with
    (attn_type 'uni', bi_data) raise a RecordedRunOptionsError naming them."""
    from xlnet_tf import files
    from xlnet_tf.errors import Spelling, UserError
    from xlnet_tf.model import RUN_OPTIONS_FILE, SPM_FILE, XLNetPretrainer, read_run_options
    from xlnet_tf.tokenization import XLNetTokenizer, read_tokenizer_settings, tokenizer_settings

    spm_model = spm_model or files.join(model_dir, SPM_FILE)
    if not files.exists(spm_model):
        raise UserError(f"{spm_model}: no SentencePiece model",
                        Spelling(" (give spm_model=)", " (give --spm-model)"))
    blocking = {k: v for k, v in read_run_options(model_dir).items()
                if k in GENERATION_RUN_OPTIONS and k not in run_options and v != GENERATION_RUN_OPTIONS[k]}
    if blocking:
        raise RecordedRunOptionsError(files.join(model_dir, RUN_OPTIONS_FILE), blocking)
    try:
        model = XLNetPretrainer.from_pretrained(model_dir, dtype=dtype, **run_options)
    except ConfigError as error:
        raise UserError(str(error)) from None
    tokenizer = XLNetTokenizer(spm_model, **tokenizer_settings(read_tokenizer_settings(model_dir)))
    if tokenizer.vocab_size != model.config.n_token:
        raise UserError(f"{spm_model}: {tokenizer.vocab_size} pieces, but the model in {model_dir} has n_token "
                        f"{model.config.n_token}")
    return model, tokenizer


def read_prompts(path):
    """Prompts from a file on any filesystem: JSONL (`{"prompt": ...}` per line; other fields are kept and
    returned) or plain text (one prompt per non-empty line) -> list of dicts with `prompt`."""
    import json

    from xlnet_tf import files
    from xlnet_tf.errors import UserError

    rows = []
    for number, line in enumerate(files.read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        if path.endswith(".jsonl"):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise UserError(f"{path}:{number}: not JSON ({error.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                raise UserError(f'{path}:{number}: a JSONL line needs a string field "prompt"')
            rows.append(row)
        else:
            rows.append({"prompt": line})
    if not rows:
        raise UserError(f"{path}: no prompts")
    return rows
