"""XLNet building blocks: masks and positions (pure functions), dropout, attention, feed-forward, block."""

from xlnet_tf.layers.attention import TwoStreamRelativeAttention, relative_shift, shift_at_positions
from xlnet_tf.layers.block import XLNetBlock
from xlnet_tf.layers.dropout import Dropout
from xlnet_tf.layers.feedforward import PositionwiseFeedForward
from xlnet_tf.layers.masks import attention_blocked, causal_blocked, segment_different, target_positions
from xlnet_tf.layers.positions import relative_positional_encoding

__all__ = [
    "Dropout",
    "PositionwiseFeedForward",
    "TwoStreamRelativeAttention",
    "XLNetBlock",
    "attention_blocked",
    "causal_blocked",
    "relative_positional_encoding",
    "relative_shift",
    "segment_different",
    "shift_at_positions",
    "target_positions",
]
