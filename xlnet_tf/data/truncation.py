"""The original XLNet's pair truncation (`_truncate_seq_pair`, also its A/B trimming in pretraining data)."""


def truncated_pair_lengths(len_a, len_b, max_len):
    """Lengths kept when the last token of the longer sequence (of B on a tie) is dropped until
    ``A + B <= max_len``; in closed form: the longer one shrinks until both are equal, then B and A
    alternate, leaving ``A = ceil(max_len / 2)`` and ``B = floor(max_len / 2)``."""
    excess = len_a + len_b - max_len
    if excess <= 0:
        return len_a, len_b
    if excess <= abs(len_a - len_b):
        return (len_a - excess, len_b) if len_a > len_b else (len_a, len_b - excess)
    return (max_len + 1) // 2, max_len // 2
