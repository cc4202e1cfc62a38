"""Text generation with an XLNet language model under a fixed factorization order, cached exactly.

The order: the prompt is non-target context (its tokens see each other in both directions and never a generated
token), then the generated tokens left to right (each sees the prompt, the tokens generated before it and itself
in the content stream). Under this order every layer's content-stream keys and values are final once computed:
the prompt's from one prefill pass (padding masked), each generated token's when it is fed. So the decoder keeps
per layer the key / value heads of everything read so far and, per step, feeds the last token plus one query
stream slot for the next position: [B, 2] positions, whatever the prefix length. The next token's logits are the
LM head over that query stream, which sees the prompt and every token generated so far, never its own.

The cache is a fixed window of W positions per row (every position of prompt and output when no memory window is
given): each step appends one position and drops the oldest, so shapes stay the same across steps, and the
relative positions are projected once per layer. Left-padded prompts are masked, so a row of a batch computes
what it computes alone.

Choosing a token (`choose_tokens`) is a pure function of the logits and per-row settings: temperature 0 is greedy,
otherwise the distribution at that temperature, cut to the `top_k` most likely tokens (0: no cut) and to the
smallest set whose probability reaches `top_p` (1: no cut), sampled by inverse CDF from one uniform number per
row and step, drawn statelessly from the row's seed: the same seed gives the same text, whatever the batch.
"""

from __future__ import annotations

import dataclasses
import json

import tensorflow as tf

from xlnet_tf.config import ConfigError
from xlnet_tf.layers.positions import relative_positional_encoding

FINISH_REASONS = ("length", "stop")  # index = the `finish_reason` code


@dataclasses.dataclass(frozen=True)
class GenerationOptions:
    """How `generate` decodes (run options of one generation call).

    max_new_tokens: tokens generated per row at most; temperature: 0 = greedy, > 0 = sampling at that
    temperature; top_k: keep the k most likely tokens (0: all); top_p: keep the smallest set of most likely
    tokens whose probability reaches p (1.0: all); seed: the stateless sampling seed (row b uses seed + b unless
    per-row seeds are given); stop_ids: ids that end a row (None: the tokenizer's `</s>`, `<eod>`, `<eop>`);
    memory_window: positions of context each step sees (0: the whole prompt and output; M > 0: the last M, as
    Transformer-XL memory, for outputs longer than one wants to attend over).
    """

    max_new_tokens: int = 32
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    stop_ids: tuple | None = None
    memory_window: int = 0

    def __post_init__(self):
        checks = [(self.max_new_tokens >= 1, "max_new_tokens must be at least 1"),
                  (self.temperature >= 0, "temperature must be >= 0 (0: greedy)"),
                  (self.top_k >= 0, "top_k must be >= 0 (0: no top-k cut)"),
                  (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
                  (self.memory_window >= 0, "memory_window must be >= 0 (0: everything)")]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"GenerationOptions: {message}, got {dataclasses.asdict(self)}")


# What generation needs of the encoder's run options: the order's masks are given explicitly, so it must attend
# bidirectionally ('bi'; same_length then changes nothing), one direction for every row (no bi_data).
GENERATION_RUN_OPTIONS = {"attn_type": "bi", "bi_data": False}


def check_generation_model(run_options):
    """Refuses run options that generation cannot run with (GENERATION_RUN_OPTIONS)."""
    if any(getattr(run_options, name) != value for name, value in GENERATION_RUN_OPTIONS.items()):
        raise ConfigError("generation needs RunOptions(attn_type='bi', bi_data=False) (same_length changes only "
                          f"'uni' masks), got attn_type={run_options.attn_type!r}, bi_data={run_options.bi_data}, "
                          f"same_length={run_options.same_length}")


class RecordedRunOptionsError(ConfigError):
    """A model directory records run options (run_options.json) that generation cannot run with. `path` is the
    file, `options` those run options; `explain(remedy)` words the message with another way to override."""

    def __init__(self, path, options):
        self.path, self.options = path, options
        keywords = ", ".join(f"{k}={GENERATION_RUN_OPTIONS[k]!r}" for k in options)
        super().__init__(self.explain(f"pass {keywords} to load_generator (or XLNetPretrainer.from_pretrained)"))

    def explain(self, remedy):
        recorded = ", ".join(f"{k} = {json.dumps(v)}" for k, v in self.options.items())
        return (f"{self.path} records {recorded}, which generation cannot run with: it reads the prompt and the "
                "continuation with bidirectional attention ('bi'), every row forward (no bi_data). To generate with "
                f"these weights anyway, {remedy}.")


def choose_tokens(logits, temperature, top_k, top_p, uniforms):
    """The next token of each row: logits [B, V] float32; temperature, top_p, uniforms [B] float32 (uniforms in
    [0, 1)); top_k [B] int32. -> int32 [B]. Greedy (argmax, the lowest id among ties) where temperature is 0;
    top_k = 1 gives the same token as greedy."""
    vocab = tf.shape(logits)[1]
    greedy = tf.argmax(logits, axis=-1, output_type=tf.int32)
    scaled = logits / tf.maximum(temperature, 1e-6)[:, None]
    ranked, order = tf.math.top_k(scaled, k=vocab)  # descending; ties keep the lower id first
    probs = tf.nn.softmax(ranked, axis=-1)
    rank = tf.range(vocab)[None, :]
    within_k = tf.logical_or(top_k[:, None] <= 0, rank < top_k[:, None])
    before = tf.math.cumsum(probs, axis=-1, exclusive=True)  # probability of the tokens ranked above
    within_p = tf.logical_or(rank == 0, before < top_p[:, None])
    kept = tf.where(tf.logical_and(within_k, within_p), probs, 0.0)
    cdf = tf.math.cumsum(kept, axis=-1)
    threshold = uniforms[:, None] * cdf[:, -1:]
    index = tf.minimum(tf.reduce_sum(tf.cast(cdf <= threshold, tf.int32), axis=-1),
                       tf.reduce_sum(tf.cast(kept > 0, tf.int32), axis=-1) - 1)
    sampled = tf.gather(order, index[:, None], batch_dims=1)[:, 0]
    return tf.where(temperature > 0, sampled, greedy)


def row_uniforms(seeds, step):
    """One uniform number in [0, 1) per row for `step`: seeds [B] int64 -> [B] float32, row b's drawn from
    (seeds[b], step) alone, so that it does not depend on the batch (a loop over the rows: stateless random ops
    take one seed per call)."""
    seeds = tf.cast(seeds, tf.int64)
    batch = tf.shape(seeds)[0]

    def draw(b, out):
        value = tf.random.stateless_uniform([], seed=tf.stack([seeds[b], tf.cast(step, tf.int64)]))
        return b + 1, tf.where(tf.equal(tf.range(batch), b), value, out)

    return tf.while_loop(lambda b, _: b < batch, draw, (tf.constant(0), tf.zeros([batch], tf.float32)))[1]


def _query_inputs(ids, mask):
    """ids / mask [B, T] -> model inputs for T positions plus one query-stream slot at position T: the slot is
    padding in the content stream (no position sees it) and the only target."""
    batch, length = tf.shape(ids)[0], tf.shape(ids)[1]
    slot = tf.zeros([batch, 1], tf.int32)
    return {"input_ids": tf.concat([tf.cast(ids, tf.int32), slot], 1),
            "padding_mask": tf.concat([tf.cast(mask, tf.int32), slot], 1),
            "target_mapping": tf.cast(tf.equal(tf.range(length + 1), length), tf.float32)[None, None] *
                              tf.ones([batch, 1, 1])}


def decode(pretrainer, prompt_ids, prompt_mask, cap, *, temperature, top_k, top_p, seeds, stop_ids,
           max_new_tokens=None, memory_window=0, return_logits=False):
    """Generates up to `cap` (a Python int: the static bound) tokens per row with the cached order.

    prompt_ids, prompt_mask: [B, P] int, left-padded (1 = real token; every row needs one); temperature, top_p
    [B] float32, top_k [B] int32, seeds [B] int64, max_new_tokens [B] int32 (None: `cap` each); stop_ids [S]
    int32; memory_window: 0 = every position, M > 0 = the last M positions.
    Returns tokens [B, cap] int32 (0 after a row ends; a stop token is not included), log_probs [B, cap]
    float32 (the model's log-probability of each token, at temperature 1), lengths [B] int32 and
    finish_reason [B] int32 (an index into FINISH_REASONS); with `return_logits` also `logits` [B, cap, V],
    each step's next-token logits. Runs eagerly or in a tf.function (one while loop).
    """
    transformer = pretrainer.transformer
    check_generation_model(transformer.run_options)
    prompt_ids = tf.cast(prompt_ids, tf.int32)
    prompt_mask = tf.cast(prompt_mask, tf.int32)
    batch, prompt_len = tf.shape(prompt_ids)[0], tf.shape(prompt_ids)[1]
    width = prompt_len + cap if memory_window <= 0 else tf.constant(memory_window)
    stop_ids = tf.cast(tf.reshape(stop_ids, [-1]), tf.int32)
    limits = tf.fill([batch], cap) if max_new_tokens is None else tf.minimum(tf.cast(max_new_tokens, tf.int32), cap)
    temperature, top_p = tf.cast(temperature, tf.float32), tf.cast(top_p, tf.float32)
    top_k, seeds = tf.cast(top_k, tf.int32), tf.cast(seeds, tf.int64)

    # Prefill: the prompt in both directions and the first query slot; keep the last `width` positions' heads.
    nothing = tf.zeros([batch, 0], tf.int32)
    out = transformer(_query_inputs(prompt_ids, prompt_mask), return_heads=True, output_positions=nothing)
    logits = pretrainer.lm_logits(out["query_output"])[:, 0]
    fill = tf.maximum(width - prompt_len, 0)  # empty (masked) slots left of the prompt

    def left_filled(h):  # [B, N, P, H] -> [B, N, width, H]: the last `width` positions, empty slots first
        empty = tf.zeros(tf.stack([batch, tf.shape(h)[1], fill, tf.shape(h)[3]]), h.dtype)
        return tf.concat([empty, h[:, :, :prompt_len]], axis=2)[:, :, -width:]

    cache = [tuple(left_filled(h) for h in heads) for heads in out["heads"]]
    valid = tf.concat([tf.zeros(tf.stack([batch, fill]), tf.int32), prompt_mask], axis=1)[:, -width:]
    encoding = relative_positional_encoding(2, width + 2, transformer.config.d_model, "bi", False,
                                            transformer.run_options.clamp_len)
    encoding = tf.cast(encoding, transformer.compute_dtype)
    position_heads = [block.attention.project_positions(encoding) for block in transformer.blocks]
    step_mask = tf.ones([batch, 1], tf.int32)

    def step(last, cache, valid):
        """Feeds `last` [B] after the cache -> (next logits [B, V], the cache with `last` appended)."""
        out = transformer(_query_inputs(last[:, None], step_mask), memory_heads=cache, mems_valid=valid,
                          position_heads=position_heads, return_heads=True, output_positions=nothing)
        cache = [tuple(h[:, :, 1:width + 1] for h in heads) for heads in out["heads"]]
        valid = tf.concat([valid[:, 1:], step_mask], axis=1)
        return pretrainer.lm_logits(out["query_output"])[:, 0], cache, valid

    def body(i, logits, cache, valid, tokens, log_probs, done, lengths, stopped, seen):
        if return_logits:
            seen = tf.where(tf.equal(tf.range(cap), i)[None, :, None], logits[:, None], seen)
        chosen = tf.cond(tf.reduce_any(temperature > 0),  # all greedy: no sort, no random numbers
                         lambda: choose_tokens(logits, temperature, top_k, top_p, row_uniforms(seeds, i)),
                         lambda: tf.argmax(logits, axis=-1, output_type=tf.int32))
        log_prob = tf.gather(tf.nn.log_softmax(logits), chosen[:, None], batch_dims=1)[:, 0]
        is_stop = tf.reduce_any(tf.equal(chosen[:, None], stop_ids[None, :]), axis=1)
        emit = tf.logical_and(tf.logical_not(done), tf.logical_not(is_stop))
        at_i = tf.logical_and(tf.equal(tf.range(cap), i)[None, :], emit[:, None])  # [B, cap]
        tokens = tf.where(at_i, chosen[:, None], tokens)
        log_probs = tf.where(at_i, log_prob[:, None], log_probs)
        lengths += tf.cast(emit, tf.int32)
        stopped = tf.logical_or(stopped, tf.logical_and(tf.logical_not(done), is_stop))
        done = tf.logical_or(tf.logical_or(done, is_stop), lengths >= limits)
        logits, cache, valid = tf.cond(tf.logical_and(i + 1 < cap, tf.logical_not(tf.reduce_all(done))),
                                       lambda: step(chosen, cache, valid), lambda: (logits, cache, valid))
        return i + 1, logits, cache, valid, tokens, log_probs, done, lengths, stopped, seen

    def running(i, logits, cache, valid, tokens, log_probs, done, *_):
        return tf.logical_and(i < cap, tf.logical_not(tf.reduce_all(done)))

    state = (tf.constant(0), logits, cache, valid, tf.zeros([batch, cap], tf.int32),
             tf.zeros([batch, cap], tf.float32), limits <= 0, tf.zeros([batch], tf.int32), tf.zeros([batch], tf.bool),
             tf.zeros([batch, cap, tf.shape(logits)[1]] if return_logits else [0], tf.float32))
    *_, tokens, log_probs, _, lengths, stopped, seen = tf.while_loop(running, body, state)
    result = {"tokens": tokens, "log_probs": log_probs, "lengths": lengths, "finish_reason": tf.cast(stopped, tf.int32)}
    if return_logits:
        result["logits"] = seen
    return result


def left_padded(rows, mask=None):
    """Prompts as int [B, P] with mask, or a list of id lists -> (ids, mask) numpy int32, left-padded with 0."""
    import numpy as np

    if isinstance(rows, (list, tuple)) and (not rows or isinstance(rows[0], (list, tuple))):
        from xlnet_tf.data.graph_features import pad_rows

        if mask is not None:
            raise ValueError("prompt_mask goes with a padded [B, P] array, not with lists of ids")
        ragged = tf.ragged.constant([list(row) for row in rows], tf.int32, ragged_rank=1, inner_shape=())
        width = max((len(row) for row in rows), default=0)
        return (pad_rows(ragged, width, 0, left=True).numpy(),
                pad_rows(tf.ones_like(ragged), width, 0, left=True).numpy())
    ids = np.asarray(rows, np.int32)
    mask = np.ones_like(ids) if mask is None else np.asarray(mask, np.int32)
    if ids.ndim != 2 or mask.shape != ids.shape:
        raise ValueError(f"prompt_ids must be [B, P] with a mask of the same shape, got {ids.shape} and {mask.shape}")
    return ids, mask


def generate_ids(pretrainer, prompt_ids, prompt_mask=None, options=None, seeds=None, **overrides):
    """`XLNetPretrainer.generate`: runs `decode` (traced once per cap and window) -> numpy results, with
    `finish_reason` as strings. `seeds` [B] (optional) gives each row its own seed, else row b uses
    options.seed + b."""
    import numpy as np

    options = dataclasses.replace(options or GenerationOptions(), **overrides)
    ids, mask = left_padded(prompt_ids, prompt_mask)
    empty = np.flatnonzero(mask.sum(axis=1) == 0)
    if len(empty):
        raise ValueError(f"prompt rows {empty.tolist()} have no tokens: every row needs at least one (a padding "
                         "text gives context to an empty prompt)")
    batch = len(ids)
    seeds = options.seed + np.arange(batch) if seeds is None else np.asarray(seeds)
    key = (options.max_new_tokens, options.memory_window)
    functions = pretrainer.__dict__.setdefault("_generate_functions", {})
    if key not in functions:
        spec = lambda dtype: tf.TensorSpec([None], dtype)  # noqa: E731
        functions[key] = tf.function(
            lambda ids, mask, temperature, top_k, top_p, seeds, stop_ids: decode(
                pretrainer, ids, mask, options.max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                seeds=seeds, stop_ids=stop_ids, memory_window=options.memory_window),
            input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2 + [spec(tf.float32), spec(tf.int32),
                                                                          spec(tf.float32), spec(tf.int64),
                                                                          spec(tf.int32)],
            autograph=False)
    out = functions[key](ids, mask, np.full([batch], options.temperature, np.float32),
                         np.full([batch], options.top_k, np.int32), np.full([batch], options.top_p, np.float32),
                         seeds.astype(np.int64), np.asarray(options.stop_ids or (), np.int32))
    result = {k: v.numpy() for k, v in out.items()}
    result["finish_reason"] = np.array([FINISH_REASONS[code] for code in result["finish_reason"]])
    return result
