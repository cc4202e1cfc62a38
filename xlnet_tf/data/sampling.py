"""Online sampling of pretraining targets, as pure TensorFlow functions for `tf.data.Dataset.map`.

A pretraining record holds `seq_len` ids laid out as the original XLNet data: a `reuse_len` prefix of
continuing text, then `A <sep> B <sep> <cls>` (segment ids 0 / 1 / 2), possibly followed by `<pad>` padding
(segment id 4) at the end of the corpus. From one record these functions build the model's features:

* `sample_plm_features`: permutation LM. Whole-word spans are chosen as targets (separately in the prefix and
  in the rest), a factorization order is sampled in blocks of `perm_size`, and `perm_mask` /
  `target_mapping` follow the original's `_local_perm` rules.
* `sample_mlm_features`: BERT-style masked LM on the same records (content stream only).

All randomness is stateless: the same `seed` ([2] int tensor) gives the same features. Per-example seeds can
come from `tf.data.Dataset.random(seed=...).batch(2)` zipped with the records. Shapes are static, so a
`Dataset.map` traces the function once.
"""

import dataclasses

import numpy as np
import tensorflow as tf

UNK_ID, BOS_ID, EOS_ID, CLS_ID, SEP_ID, PAD_ID, MASK_ID, EOD_ID, EOP_ID = range(9)
NUM_SPECIAL = 9  # ids below this are control symbols: never targets, never chosen by MLM
SEG_ID_PAD = 4
OBJECTIVES = ("plm", "mlm")

# Single-character pieces the original also treats as starting a word (its `_is_start_piece`).
_PUNCTUATION = frozenset('!"#$%&\'()*+,-./:;?@[\\]^_`{|}~')


@dataclasses.dataclass(frozen=True)
class SamplingOptions:
    """How targets are sampled from records of `seq_len` ids whose first `reuse_len` ids are the reuse prefix.

    num_predict: PLM target slots P per sequence. The budget is split between the halves in proportion to their
      lengths, rest = num_predict * (seq_len - reuse_len) // seq_len and prefix = num_predict - rest; with
      reuse_len = seq_len / 2 this is the original's split (rest num_predict // 2, prefix the remainder), with
      reuse_len = 0 everything goes to the rest.
    perm_size: block length of the factorization order (the order is a random permutation inside each block,
      blocks in sequence order). None means reuse_len (the original's recommendation), or seq_len when
      reuse_len is 0. It must divide both reuse_len and seq_len - reuse_len, as the original requires.
    max_span: longest span in words; a span of L words is drawn with probability proportional to 1 / L.
    span_context: K: one span of L words per context of K * L tokens (the original's mask_alpha / mask_beta).
    objective: "plm" or "mlm"; mlm_probability: the fraction of real non-special tokens MLM chooses.
    """

    seq_len: int
    reuse_len: int
    num_predict: int
    perm_size: int | None = None
    max_span: int = 5
    span_context: int = 6
    objective: str = "plm"
    mlm_probability: float = 0.15

    def __post_init__(self):
        def positive_int(name):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"SamplingOptions.{name} must be a positive integer, got {value!r}")

        for name in ("seq_len", "num_predict", "max_span", "span_context"):
            positive_int(name)
        if isinstance(self.reuse_len, bool) or not isinstance(self.reuse_len, (int, np.integer)):
            raise ValueError(f"SamplingOptions.reuse_len must be an integer, got {self.reuse_len!r}")
        if not 0 <= self.reuse_len < self.seq_len:
            raise ValueError(f"SamplingOptions.reuse_len must lie in [0, seq_len={self.seq_len}), got {self.reuse_len}")
        if self.num_predict > self.seq_len:
            raise ValueError(f"SamplingOptions.num_predict ({self.num_predict}) must be <= seq_len ({self.seq_len})")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"SamplingOptions.objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if not 0.0 < float(self.mlm_probability) < 1.0:
            raise ValueError(f"SamplingOptions.mlm_probability must lie in (0, 1), got {self.mlm_probability!r}")
        if self.perm_size is None:
            object.__setattr__(self, "perm_size", self.reuse_len if self.reuse_len > 0 else self.seq_len)
        positive_int("perm_size")
        rest = self.seq_len - self.reuse_len
        if self.reuse_len % self.perm_size or rest % self.perm_size:
            raise ValueError(
                f"SamplingOptions.perm_size ({self.perm_size}) must divide both reuse_len ({self.reuse_len}) and "
                f"seq_len - reuse_len ({rest}): the order is permuted in whole blocks inside each part"
            )

    @property
    def rest_budget(self) -> int:
        """Targets the part after the reuse prefix may hold."""
        return self.num_predict * (self.seq_len - self.reuse_len) // self.seq_len

    @property
    def prefix_budget(self) -> int:
        """Targets the reuse prefix may hold."""
        return self.num_predict - self.rest_budget


def word_start_from_pieces(pieces, punctuation=True) -> np.ndarray:
    """bool [len(pieces)]: True for pieces that begin a word, indexed by id, for `sample_plm_features`.

    A piece begins a word when it starts with '▁' (SentencePiece's word boundary) or is a control symbol
    (id < 9). With `punctuation`, single ASCII punctuation pieces also count, as the original does.
    """
    table = np.zeros(len(pieces), dtype=bool)
    for index, piece in enumerate(pieces):
        table[index] = (
            index < NUM_SPECIAL or piece.startswith("\u2581") or (punctuation and piece in _PUNCTUATION)
        )
    return table


def _record_flags(input_ids, segment_ids, seq_len):
    input_ids = tf.ensure_shape(tf.cast(input_ids, tf.int32), [seq_len])
    segment_ids = tf.ensure_shape(tf.cast(segment_ids, tf.int32), [seq_len])
    padding = tf.logical_or(tf.equal(segment_ids, SEG_ID_PAD), tf.equal(input_ids, PAD_ID))
    special = tf.less(input_ids, NUM_SPECIAL)
    return input_ids, segment_ids, padding, special


def _seed(seed):
    return tf.ensure_shape(tf.cast(seed, tf.int64), [2])


def _sample_spans(word_starts, eligible, lo, hi, budget, options, seed):
    """bool [T]: whole-word spans inside positions [lo, hi), at most `budget` positions.

    word_starts marks positions that begin a word; eligible marks positions that may be targets (the words
    of the part that end inside it). Repeatedly: draw L (p ~ 1/L, cut to the budget left), a context of
    K * L tokens and a left offset in it; mark the L words from the first eligible word start at/after the
    offset, stopping early at an ineligible position and cutting at the budget; resume after the context.
    """
    seq_len = options.seq_len
    positions = tf.range(seq_len)
    if budget == 0 or hi <= lo:
        return tf.zeros([seq_len], tf.bool)
    starts = tf.logical_and(word_starts, eligible)
    logits = tf.math.log(1.0 / tf.range(1, options.max_span + 1, dtype=tf.float32))[None, :]

    def body(step, cur, count, chosen, done):
        span_seed, offset_seed = tf.unstack(tf.random.experimental.stateless_split(
            tf.random.experimental.stateless_fold_in(seed, step), num=2))
        length = tf.cast(tf.random.stateless_categorical(logits, 1, span_seed)[0, 0], tf.int32) + 1
        length = tf.minimum(length, budget - count)
        context = length * options.span_context
        left = tf.random.stateless_uniform([], offset_seed, minval=0, maxval=context, dtype=tf.int32)
        candidates = tf.logical_and(starts, positions >= cur + left)
        found = tf.reduce_any(candidates)
        begin = tf.reduce_min(tf.where(candidates, positions, seq_len))
        after = positions >= begin
        stop = tf.reduce_min(tf.where(tf.logical_and(after, tf.logical_not(eligible)), positions, seq_len))
        words = tf.cumsum(tf.cast(tf.logical_and(word_starts, after), tf.int32))
        span = after & (positions < stop) & (words <= length) & (positions < begin + budget - count)
        span = tf.logical_and(span, found)
        size = tf.reduce_sum(tf.cast(span, tf.int32))
        return step + 1, begin + size + context - left, count + size, tf.logical_or(chosen, span), tf.logical_not(found)

    def cond(step, cur, count, chosen, done):
        return tf.logical_and(tf.logical_not(done), tf.logical_and(cur < hi, count < budget))

    state = (tf.constant(0), tf.constant(lo), tf.constant(0), tf.zeros([seq_len], tf.bool), tf.constant(False))
    _, _, _, chosen, _ = tf.while_loop(cond, body, state, maximum_iterations=hi - lo)
    return chosen


def _part_eligible(word_starts, allowed, lo, hi, seq_len):
    """Positions of [lo, hi) that may be targets: allowed and inside a word that ends within the part."""
    boundary = tf.concat([word_starts, [True]], axis=0)  # a word also ends at the end of the sequence
    index = tf.range(seq_len + 1)
    last_boundary = tf.reduce_max(tf.where((index > lo) & (index <= hi) & boundary, index, -1))
    positions = tf.range(seq_len)
    return allowed & (positions >= lo) & (positions < hi) & (positions < last_boundary)


def sample_plm_features(input_ids, segment_ids, word_start, options: SamplingOptions, seed):
    """Permutation-LM features for ONE record.

    input_ids, segment_ids: [T] int (T = options.seq_len); word_start: bool [n_token], True for ids that begin
    a word (see `word_start_from_pieces`); seed: [2] int. Returns a dict: `input_ids`, `segment_ids` [T] int32,
    `padding_mask` [T] float32 (1 = real token), `perm_mask` [T, T] float32 (1 = i may not attend to j),
    `target_mapping` [P, T] float32 (one-hot rows, targets in position order, then all-zero rows),
    `target_ids` [P] int32 (the target tokens themselves, 0 on padded rows), `target_mask` [P] float32.

    Targets are whole-word spans that never include control ids (< 9) or padding. <sep> and <cls> are
    "functional": in the order but never targets, and they see themselves. Other non-targets see each other
    (and nothing in the order). A target sees the non-targets and what comes before it in the order, never
    itself. The prefix never sees the rest; the rest sees the whole prefix. Nothing sees a padding position.
    """
    seq_len, reuse_len = options.seq_len, options.reuse_len
    input_ids, segment_ids, padding, special = _record_flags(input_ids, segment_ids, seq_len)
    seed = _seed(seed)
    prefix_seed, rest_seed, order_seed = tf.unstack(tf.random.experimental.stateless_split(seed, num=3))
    word_start = tf.cast(word_start, tf.bool)
    word_starts = tf.gather(word_start, input_ids) | special | padding
    allowed = tf.logical_not(special | padding)

    parts = ((0, reuse_len, options.prefix_budget, prefix_seed), (reuse_len, seq_len, options.rest_budget, rest_seed))
    is_target = tf.zeros([seq_len], tf.bool)
    for lo, hi, budget, part_seed in parts:
        eligible = _part_eligible(word_starts, allowed, lo, hi, seq_len)
        is_target |= _sample_spans(word_starts, eligible, lo, hi, budget, options, part_seed)

    # Factorization order: a random permutation inside each block of perm_size, blocks in sequence order.
    positions = tf.range(seq_len)
    keys = tf.cast(positions // options.perm_size, tf.float32) + tf.random.stateless_uniform([seq_len], order_seed)
    rank = tf.math.invert_permutation(tf.argsort(keys, stable=True))

    functional = (tf.equal(input_ids, SEP_ID) | tf.equal(input_ids, CLS_ID)) & tf.logical_not(padding)
    in_order = is_target | functional
    order = tf.where(in_order, rank, -1)
    own = tf.where(is_target, order, order + 1)  # a target may not see itself, a functional token may
    blocked = (own[:, None] <= order[None, :]) & in_order[None, :]
    in_rest = positions >= reuse_len
    same_part = tf.equal(in_rest[:, None], in_rest[None, :])
    prefix_to_rest = tf.logical_and(tf.logical_not(in_rest)[:, None], in_rest[None, :])
    blocked = tf.where(same_part, blocked, prefix_to_rest)
    blocked = blocked | padding[None, :] | padding[:, None]

    target_positions = tf.argsort(tf.where(is_target, positions, positions + seq_len), stable=True)
    target_positions = target_positions[: options.num_predict]
    valid = tf.gather(is_target, target_positions)
    valid_float = tf.cast(valid, tf.float32)
    return {
        "input_ids": input_ids,
        "segment_ids": segment_ids,
        "padding_mask": tf.cast(tf.logical_not(padding), tf.float32),
        "perm_mask": tf.cast(blocked, tf.float32),
        "target_mapping": tf.one_hot(target_positions, seq_len, dtype=tf.float32) * valid_float[:, None],
        "target_ids": tf.where(valid, tf.gather(input_ids, target_positions), 0),
        "target_mask": valid_float,
    }


def sample_mlm_features(input_ids, segment_ids, options: SamplingOptions, seed, vocab_size):
    """BERT-style masked-LM features for ONE record (content stream, no perm_mask / target_mapping).

    Chooses max(1, round(mlm_probability * n)) of the n real non-control tokens (none when n = 0); of those
    80% become <mask>, 10% a random ordinary id in [9, vocab_size) and 10% stay. input_ids, segment_ids:
    [T] int; seed: [2] int. Returns `input_ids` (corrupted), `segment_ids` [T] int32, `padding_mask` [T]
    float32, `target_ids` [T] int32 (the original ids) and `target_mask` [T] float32 (1 = chosen).
    """
    if int(vocab_size) <= NUM_SPECIAL:
        raise ValueError(f"vocab_size must exceed the {NUM_SPECIAL} control ids, got {vocab_size}")
    seq_len = options.seq_len
    input_ids, segment_ids, padding, special = _record_flags(input_ids, segment_ids, seq_len)
    choose_seed, action_seed, random_seed = tf.unstack(tf.random.experimental.stateless_split(_seed(seed), num=3))
    eligible = tf.logical_not(special | padding)
    count = tf.reduce_sum(tf.cast(eligible, tf.float32))
    wanted = tf.cast(tf.round(options.mlm_probability * count), tf.int32)
    wanted = tf.where(count > 0, tf.maximum(wanted, 1), 0)
    scores = tf.where(eligible, tf.random.stateless_uniform([seq_len], choose_seed), 2.0)
    chosen = tf.math.invert_permutation(tf.argsort(scores, stable=True)) < wanted

    action = tf.random.stateless_uniform([seq_len], action_seed)
    random_ids = tf.random.stateless_uniform(
        [seq_len], random_seed, minval=NUM_SPECIAL, maxval=int(vocab_size), dtype=tf.int32
    )
    corrupted = tf.where(chosen & (action < 0.8), MASK_ID, input_ids)
    corrupted = tf.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, corrupted)
    return {
        "input_ids": corrupted,
        "segment_ids": segment_ids,
        "padding_mask": tf.cast(tf.logical_not(padding), tf.float32),
        "target_ids": input_ids,
        "target_mask": tf.cast(chosen, tf.float32),
    }


def sample_features(input_ids, segment_ids, word_start, options: SamplingOptions, seed, vocab_size=None):
    """`sample_plm_features` or `sample_mlm_features` as `options.objective` says (MLM needs vocab_size)."""
    if options.objective == "mlm":
        if vocab_size is None:
            raise ValueError("the mlm objective needs vocab_size")
        return sample_mlm_features(input_ids, segment_ids, options, seed, vocab_size)
    return sample_plm_features(input_ids, segment_ids, word_start, options, seed)
