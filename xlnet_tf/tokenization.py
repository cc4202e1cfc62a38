"""XLNet SentencePiece tokenization as TensorFlow graph ops.

The XLNet reference pipeline is ``preprocess_text`` followed by ``encode_pieces`` and ``PieceToId``:

1. whitespace runs are collapsed to one space and the ends stripped (Python ``str.split()`` whitespace;
   not with ``remove_space=False``);
2. ````` `` ````` and ``''`` become ``"``;
3. accents are removed: NFKD, then every character with a non-zero canonical combining class is dropped
   (not with ``keep_accents=True``);
4. the text is lower-cased (uncased models only), with Python's ``str.lower`` rules (incl. final sigma);
5. SentencePiece encodes the text; a piece that ends in ``<digit>,`` is re-encoded without the comma
   (dropping the dummy-prefix ``▁`` when the original piece had none) and ``,`` is appended as a piece;
6. every piece is looked up with ``PieceToId`` (unknown pieces give ``<unk>``).

Everything here is built from core TensorFlow ops plus TF Text's SentencePiece and ``NormalizeUTF8`` ops,
so the same code runs eagerly, inside ``tf.function``, inside ``tf.data`` and in an exported SavedModel.
Steps 1-4 run per character (code point) so that every output character remembers the input character it
came from; that is what maps token offsets back to the original, unprocessed string. The character
properties (whitespace, combining class, case mapping, cased / case-ignorable, digits) are tables taken
from the running Python's ``unicodedata`` / ``str`` and embedded as constants, so graph and reference agree
and nothing depends on the process locale (``tf.strings.lower`` is not used: it follows the process's ICU
locale, e.g. Turkish dotless i, and stops at NUL).

Known differences from the Python reference: NFKD is ICU's (``tensorflow_text.normalize_utf8``), so
characters newer than the Python's Unicode database can decompose differently; TF Text's SentencePiece
breaks exact Viterbi score ties (runs like ``=====``) as sentencepiece 0.1.99 does, the 0.2.x Python
package the other way (both segmentations are optimal); invalid UTF-8 bytes are read as U+FFFD.

The three switches are those of transformers' ``XLNetTokenizer`` (``do_lower_case``, ``remove_space``,
``keep_accents``); the published XLNet uses ``remove_space=True, keep_accents=False``. A model directory
records them in ``xlnet_tokenizer.json`` beside its ``spiece.model`` (``xlnet-tf convert huggingface`` writes
it from the source's ``tokenizer_config.json``) and a fine-tuned one in ``finetune_config.json`` too.

Public API: ``XLNetTokenizer``, ``preprocess_text``, ``train_spm``, ``tokenizer_settings``,
``read_tokenizer_settings``; ``row_ids``, ``substrings``, ``search_sorted``, ``element_index`` and ``kept`` (ragged
row ids and byte slices in memory linear in their values; 1-D ``tf.searchsorted``, ``tf.range`` and
``tf.boolean_mask`` in few graph ops), which the feature builders use too.
"""

import collections
import functools
import itertools
import os
import re
import unicodedata

import numpy as np
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text

from xlnet_tf import files
from xlnet_tf.errors import Spelling, UserError

SPIECE_UNDERLINE = "\u2581"
CONTROL_SYMBOLS = ("<cls>", "<sep>", "<pad>", "<mask>", "<eod>")
USER_DEFINED_SYMBOLS = ("<eop>", ".", "(", ")", '"', "-", "\u2013", "\u00a3", "\u20ac")
# Ids of the published XLNet vocabulary (spiece.model): spm's <unk>/<s>/</s>, then the control symbols,
# then the user-defined symbols, in the order given to spm_train.
SPECIAL_PIECES = ("<unk>", "<s>", "</s>") + CONTROL_SYMBOLS + ("<eop>",)
# The preprocessing switches and their published defaults; where a model directory records them.
TOKENIZER_DEFAULTS = {"lower_case": False, "keep_accents": False, "remove_space": True}
TOKENIZER_FILE = "xlnet_tokenizer.json"
_FINETUNE_FILE = "finetune_config.json"  # xlnet_tf.heads.FINETUNE_FILE (not imported: no Keras here)

_Tables = collections.namedtuple(
    "_Tables", "space combining ignorable cased lower_keys lower_values digit_class")
_Alignment = collections.namedtuple("_Alignment", "text row_bytes row_base char_pos src_start src_end")


# ----------------------------------------------------------------------------------------------------
# Unicode tables


def _ranges(codepoints):
    """Sorted code points -> int32 arrays ``(lo, hi)`` of the inclusive runs they form."""
    runs = []
    for c in codepoints:
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    runs = np.array(runs or [[-1, -1]], dtype=np.int32)
    return runs[:, 0], runs[:, 1]


@functools.lru_cache(maxsize=None)
def _unicode_tables():
    """Character properties of this Python's Unicode database, as the reference preprocessing sees them.

    Scans planes 0-3 and 14 (planes 4-13 are unassigned, 15-16 private use: no property applies there).
    ``ignorable``/``cased`` are the Case_Ignorable / Cased sets that ``str.lower`` uses for final sigma,
    read back from ``str.lower`` itself; ``cased`` excludes ignorable characters (they are skipped first).
    """
    space, combining, ignorable, cased, digits, lower = [], [], [], [], [], []
    for c in itertools.chain(range(0xD800), range(0xE000, 0x40000), range(0xE0000, 0xF0000)):
        ch = chr(c)
        if ch.isspace():
            space.append(c)
        if unicodedata.combining(ch):
            combining.append(c)
        if ch.isdigit():
            digits.append(c)
        low = ch.lower()
        if low != ch and len(low) == 1:  # only U+0130 maps to two code points; NFKD removed it already
            lower.append((c, ord(low)))
        if (ch + "\u03a3").lower()[-1] == "\u03c2":  # a cased, non-ignorable character before a final Σ
            cased.append(c)
        elif ("A" + ch + "\u03a3").lower()[-1] == "\u03c2":  # skipped over: case-ignorable
            ignorable.append(c)
    lo, hi = _ranges(digits)
    digit_class = "[" + "".join(f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in zip(lo, hi)) + "]"
    lower = np.array(lower, dtype=np.int32)
    return _Tables(_ranges(space), _ranges(combining), _ranges(ignorable), _ranges(cased),
                   lower[:, 0], lower[:, 1], digit_class)


def _in_ranges(codepoints, ranges):
    """Membership of int32 code points ``[N]`` in inclusive ``(lo, hi)`` runs -> bool ``[N]``."""
    lo, hi = ranges
    i = search_sorted(tf.constant(lo), codepoints, side="right", out_type=tf.int32) - 1
    return (i >= 0) & (codepoints <= tf.gather(tf.constant(hi), tf.maximum(i, 0)))


def _lower(codepoints, tables):
    """Python ``str.lower`` per code point (int32 ``[N]``), without the final-sigma context."""
    keys, values = tf.constant(tables.lower_keys), tf.constant(tables.lower_values)
    i = tf.minimum(search_sorted(keys, codepoints, out_type=tf.int32), tf.size(keys) - 1)
    return tf.where(tf.gather(keys, i) == codepoints, tf.gather(values, i), codepoints)


def _final_sigmas(codepoints, rows, tables):
    """Which code points (int32 ``[M]``, row ids ``[M]``) are a capital sigma in Final_Sigma context.

    As in CPython: the nearest non-case-ignorable character before it is cased, and the nearest one
    after it (if any) is not. Returns bool ``[M]``.
    """
    solid = ~_in_ranges(codepoints, tables.ignorable)
    pos = tf.concat([tf.where(solid)[:, 0], [0]], 0)  # positions of non-ignorable chars (+ sentinel)
    rank = tf.cumsum(tf.cast(solid, tf.int64))  # rank of a non-ignorable char among them, 1-based
    n_solid = tf.size(pos, out_type=tf.int64) - 1
    prev, nxt = tf.gather(pos, tf.maximum(rank - 2, 0)), tf.gather(pos, tf.minimum(rank, n_solid))
    is_cased = _in_ranges(codepoints, tables.cased)
    prev_cased = (rank >= 2) & tf.gather(is_cased, prev) & (tf.gather(rows, prev) == rows)
    next_cased = (rank < n_solid) & tf.gather(is_cased, nxt) & (tf.gather(rows, nxt) == rows)
    return (codepoints == 0x3A3) & prev_cased & ~next_cased


# ----------------------------------------------------------------------------------------------------
# Ragged rows and byte slices in linear memory (also the feature builders')


def search_sorted(sorted_values, values, side="left", out_type=tf.int64):
    """``tf.searchsorted`` of 1-D ``values [N]`` in the 1-D ascending ``sorted_values [M]`` -> ``out_type [N]``: the
    same indices in 7 graph ops, where tf.searchsorted's reshapes (for inputs of any rank) build 19; the text
    signatures of an export trace it dozens of times."""
    search = tf.raw_ops.UpperBound if side == "right" else tf.raw_ops.LowerBound
    found = search(sorted_inputs=tf.expand_dims(sorted_values, 0), values=tf.expand_dims(values, 0), out_type=out_type)
    return tf.reshape(found, [-1])


def _count_up(limit):
    """0, 1, ..., ``limit`` - 1 for an int64 scalar ``limit``: int64, in 3 graph ops (``tf.range`` casts its bounds)."""
    return tf.raw_ops.Range(start=tf.constant(0, tf.int64), limit=limit, delta=tf.constant(1, tf.int64))


def element_index(tensor):
    """0, 1, ..., N - 1 for the N elements of ``tensor``: int64 ``[N]``, in 4 graph ops (``tf.range`` casts its
    bounds: 6)."""
    return _count_up(tf.size(tensor, out_type=tf.int64))


def kept(values, mask):
    """``values[mask]`` for ``values [N, ...]`` and a bool ``mask [N]``, in 5 graph ops (``tf.boolean_mask``: 27)."""
    return tf.gather(values, tf.reshape(tf.where(mask), [-1]))


def row_ids(rt):
    """The row of every value of ragged ``rt [B, None]``, int64 ``[N]`` (``rt.value_rowids()``), in memory linear in
    N: TensorFlow's own (and ``tf.ragged.boolean_mask``'s) tiles each row's index to the longest row's length, so a
    batch of many short rows and one long one costs rows x longest."""
    splits = tf.cast(rt.row_splits, tf.int64)
    # the splits at or before a value, less the leading 0
    return search_sorted(splits, _count_up(splits[-1]), side="right") - 1


def substrings(text, rows, starts, lengths):
    """Byte slices ``text[rows[k]][starts[k]:starts[k] + lengths[k]]``: string ``[K]``, from the texts ``[B]`` and
    int64 ``[K]`` ``rows``, ``starts`` and ``lengths``. The texts are joined once and sliced in place (one ``Substr``
    broadcasting the joined text over the slices): the cost is the texts' and the slices' bytes, where gathering each
    slice's text first copies a whole text per slice."""
    base = tf.cumsum(tf.cast(tf.strings.length(text), tf.int64), exclusive=True)
    joined = tf.strings.unsorted_segment_join(text, tf.zeros_like(base), 1)[0]
    return tf.strings.substr(joined, tf.gather(base, rows) + starts, lengths, unit="BYTE")


# ----------------------------------------------------------------------------------------------------
# Preprocessing


def _preprocess_with_alignment(strings, lower_case, keep_accents=False, remove_space=True):
    """XLNet ``preprocess_text`` on a batch, remembering where every output character came from.

    Args:
      strings: string ``[B]``, UTF-8 (invalid bytes are read as U+FFFD).
      lower_case, keep_accents, remove_space: Python bools (see the module docstring).
    Returns:
      ``_Alignment`` with ``text`` string ``[B]`` (the preprocessed text) and, for the ``M`` output code
      points of the whole batch in order: ``char_pos`` int64 ``[M]`` byte position in the batch's
      concatenated output, ``src_start``/``src_end`` int64 ``[M]`` byte span in its ORIGINAL row of the
      input character it came from (extended over dropped non-space characters right after it); plus
      ``row_bytes``/``row_base`` int64 ``[B]``: byte length of each output row and its position in the
      concatenation.
    """
    tables = _unicode_tables()
    strings = tf.convert_to_tensor(strings, tf.string)
    decoded, starts = tf.strings.unicode_decode_with_offsets(strings, "UTF-8", errors="replace")
    cps, splits = decoded.values, decoded.row_splits
    rows = row_ids(decoded)
    idx = element_index(cps)
    row_start, row_limit = tf.gather(splits, rows), tf.gather(splits[1:], rows)
    first, last = idx == row_start, idx + 1 == row_limit
    n_bytes = tf.gather(tf.cast(tf.strings.length(strings), tf.int64), rows)
    src_start = starts.values

    # 1. ' '.join(text.strip().split()): the first char of an inner whitespace run becomes ' ', the rest go.
    space = _in_ranges(cps, tables.space)
    solid = tf.cast(~space, tf.int64)
    solid_through = tf.cumsum(solid)
    row_offset = tf.gather(solid_through - solid, row_start)
    solid_through -= row_offset  # non-space chars of the row up to and including this one
    row_total = tf.gather(solid_through, row_limit - 1)
    keep_space = space & ~(~first & tf.roll(space, 1, 0)) & (solid_through > 0) & (solid_through < row_total)

    # 2. `` -> " and '' -> ": left-to-right pairs inside each run of the same quote character.
    quote = (cps == ord("`")) | (cps == ord("'"))
    same_prev = ~first & (cps == tf.roll(cps, 1, 0))
    run_first = quote & ~same_prev
    run_starts = tf.concat([tf.where(run_first)[:, 0], [0]], 0)
    in_run = idx - tf.gather(run_starts, tf.maximum(tf.cumsum(tf.cast(run_first, tf.int64)) - 1, 0))
    opens = quote & (in_run % 2 == 0) & tf.roll(same_prev, -1, 0) & ~last
    closes = quote & (in_run % 2 == 1)

    # 3. NFKD, per character (combining marks are dropped next, so canonical reordering cannot matter).
    chars = tf.raw_ops.UnicodeEncode(  # one string per code point (tf.strings.unicode_encode of cps[:, None]: 43 ops)
        input_values=cps, input_splits=_count_up(tf.size(cps, out_type=tf.int64) + 1),
        output_encoding="UTF-8", errors="replace", replacement_char=0xFFFD)
    if keep_accents:  # no NFKD; str.lower's one two-character result (İ -> i + U+0307) is made here
        if lower_case:
            chars = tf.where(cps == 0x130, "i\u0307", chars)
    else:
        chars = tf_text.normalize_utf8(chars, "NFKD")
    quoted = tf.where(opens, '"', tf.where(closes, "", chars))
    chars = tf.where(space, tf.where(keep_space, " ", ""), quoted) if remove_space else quoted
    out = tf.strings.unicode_decode(chars, "UTF-8")
    keep = tf.ones_like(out.values, tf.bool) if keep_accents else ~_in_ranges(out.values, tables.combining)
    out_cps = kept(out.values, keep)
    out_src = row_ids(out)  # the input char of each char NFKD made
    src = kept(out_src, keep)  # input char of each output char
    out_rows = tf.gather(rows, src)

    # A dropped non-space char (closing quote, separate combining mark) joins the span of the char before
    # it: each char's span is extended up to the next char that is output or whitespace (or the row end).
    anchor = space | (tf.math.unsorted_segment_sum(tf.cast(keep, tf.int32), out_src, tf.size(cps)) > 0)
    anchors = tf.concat([tf.where(anchor)[:, 0], [0]], 0)
    nxt = tf.gather(anchors, tf.cumsum(tf.cast(anchor, tf.int64)))
    has_next = (nxt > idx) & (nxt < row_limit)
    src_end = tf.where(has_next, tf.gather(src_start, nxt), n_bytes)

    # 4. str.lower(), with CPython's final-sigma rule.
    if lower_case:
        final = _final_sigmas(out_cps, out_rows, tables)
        out_cps = tf.where(final, 0x3C2, _lower(out_cps, tables))

    nrows = tf.size(strings, out_type=tf.int64)
    width = tf.cast(1 + tf.cast(out_cps >= 0x80, tf.int32) + tf.cast(out_cps >= 0x800, tf.int32)
                    + tf.cast(out_cps >= 0x10000, tf.int32), tf.int64)
    row_bytes = tf.math.unsorted_segment_sum(width, out_rows, nrows)
    text = tf.strings.unicode_encode(
        tf.RaggedTensor.from_value_rowids(out_cps, out_rows, nrows=nrows, validate=False), "UTF-8")
    return _Alignment(text=text, row_bytes=row_bytes, row_base=tf.cumsum(row_bytes, exclusive=True),
                      char_pos=tf.cumsum(width, exclusive=True),
                      src_start=tf.gather(src_start, src), src_end=tf.gather(src_end, src))


def _as_batch(strings):
    """-> (string ``[B]``, whether the input was a scalar). Other ranks are rejected."""
    strings = tf.convert_to_tensor(strings, tf.string)
    if strings.shape.rank not in (0, 1):
        raise ValueError(f"Expected a scalar or a vector of strings, got shape {strings.shape}.")
    return (strings[None], True) if strings.shape.rank == 0 else (strings, False)


def preprocess_text(strings, lower_case=False, keep_accents=False, remove_space=True):
    """XLNet's ``preprocess_text`` as TF ops: string ``[B]`` (or scalar) -> string ``[B]`` (or scalar)."""
    strings, scalar = _as_batch(strings)
    text = _preprocess_with_alignment(strings, lower_case, keep_accents, remove_space).text
    return text[0] if scalar else text


# ----------------------------------------------------------------------------------------------------
# Tokenizer


def _splice_order(size, where, kept, kept_rows):
    """Where the values of a splice come from: each element ``where[j]`` (int64 ``[P]``, ascending) of a flat
    ``[T]`` (``size`` = T) is replaced by the kept (bool ``[V]``) values of its new row ``j`` (``kept_rows``, int64
    ``[V]``, ascending: the row of each new value) followed by one closing value of its own. -> (``order``, int64
    ``[N]``: indices into ``concat([old [T], new [V], closing [P]])``; ``count``, int64 ``[T]``: the values each old
    element becomes). Index arithmetic alone, so that one result serves every array that shares the structure."""
    rows = tf.size(where, out_type=tf.int64)
    kept_count = tf.math.unsorted_segment_sum(tf.cast(kept, tf.int64), kept_rows, rows)  # [P]
    count = tf.tensor_scatter_nd_update(tf.ones([size], tf.int64), where[:, None], kept_count + 1)
    first = tf.cumsum(count, exclusive=True)  # where each old element's values start
    row_first = tf.gather(first, where)  # [P]
    replaced = tf.scatter_nd(where[:, None], tf.ones_like(where), [size]) > 0
    old = tf.where(~replaced)[:, 0]
    new = tf.where(kept)[:, 0]
    new_rows = tf.gather(kept_rows, new)
    rank = tf.gather(tf.cumsum(tf.cast(kept, tf.int64), exclusive=True), new)  # among every kept value
    rank -= tf.gather(tf.cumsum(kept_count, exclusive=True), new_rows)  # ... and among its row's
    positions = tf.concat([tf.gather(first, old), tf.gather(row_first, new_rows) + rank, row_first + kept_count], 0)
    sources = tf.concat([old, size + new, size + tf.size(kept, out_type=tf.int64) + tf.range(rows)], 0)
    return tf.scatter_nd(positions[:, None], sources, [tf.reduce_sum(count)]), count


class XLNetTokenizer(tf.Module):
    """XLNet SentencePiece tokenizer (preprocessing + digit-comma rule) built from TF / TF Text ops.

    ``XLNetTokenizer(model_file, lower_case=False)`` or ``XLNetTokenizer.from_bytes(model_proto, ...)``;
    ``keep_accents=True`` skips the accent removal, ``remove_space=False`` the whitespace collapsing
    (transformers' ``XLNetTokenizer`` switches; the defaults are the published XLNet's).
    It is a ``tf.Module``: attach it to the module you export and the SentencePiece model travels with it.
    """

    def __init__(self, model_file=None, lower_case=False, *, keep_accents=False, remove_space=True,
                 model_proto=None, name=None):
        super().__init__(name=name)
        if (model_file is None) == (model_proto is None):
            raise ValueError("Pass exactly one of model_file and model_proto.")
        if model_proto is None:
            model_proto = files.read_bytes(model_file)  # any filesystem (gs://, ...)
        self._model_bytes = bytes(model_proto)
        self._lower_case = bool(lower_case)
        self._keep_accents = bool(keep_accents)
        self._remove_space = bool(remove_space)
        self._sp = tf_text.SentencepieceTokenizer(model=self._model_bytes, out_type=tf.string)
        processor = spm.SentencePieceProcessor(model_proto=self._model_bytes)
        self._vocab_size = processor.get_piece_size()
        self._longest_piece = max((len(processor.id_to_piece(i)) for i in range(self._vocab_size)
                                   if not (processor.is_control(i) or processor.is_unknown(i)
                                           or processor.is_unused(i) or processor.is_byte(i))), default=1)
        self._special = {piece: processor.piece_to_id(piece) for piece in SPECIAL_PIECES}
        self._digit_comma = "(?s).*" + _unicode_tables().digit_class + ","
        self._encode_fn = None

    @classmethod
    def from_bytes(cls, model_proto, lower_case=False, name=None, *, keep_accents=False, remove_space=True):
        """Build from the serialized SentencePiece model (``model_bytes`` of another tokenizer)."""
        return cls(model_proto=model_proto, lower_case=lower_case, keep_accents=keep_accents,
                   remove_space=remove_space, name=name)

    # -- properties ---------------------------------------------------------------------------------
    model_bytes = property(lambda self: self._model_bytes, doc="Serialized SentencePiece ModelProto.")
    lower_case = property(lambda self: self._lower_case, doc="Whether input is lower-cased (uncased).")
    keep_accents = property(lambda self: self._keep_accents, doc="Whether accents are kept (no NFKD).")
    remove_space = property(lambda self: self._remove_space, doc="Whether whitespace runs are collapsed.")
    settings = property(lambda self: {"lower_case": self._lower_case, "keep_accents": self._keep_accents,
                                      "remove_space": self._remove_space},
                        doc="The preprocessing switches, as recorded in xlnet_tokenizer.json / finetune_config.json.")
    vocab_size = property(lambda self: self._vocab_size, doc="Number of pieces in the vocabulary.")
    longest_piece = property(lambda self: self._longest_piece,
                             doc="Characters of the longest piece text can be encoded to (normal and user-defined "
                                 "pieces; a leading ▁ counts as one).")
    unk_id = property(lambda self: self._special["<unk>"])
    bos_id = property(lambda self: self._special["<s>"])
    eos_id = property(lambda self: self._special["</s>"])
    cls_id = property(lambda self: self._special["<cls>"])
    sep_id = property(lambda self: self._special["<sep>"])
    pad_id = property(lambda self: self._special["<pad>"])
    mask_id = property(lambda self: self._special["<mask>"])
    eod_id = property(lambda self: self._special["<eod>"])
    eop_id = property(lambda self: self._special["<eop>"])

    # -- graph code ---------------------------------------------------------------------------------
    def preprocess(self, strings):
        """This tokenizer's ``preprocess_text``: string ``[B]`` -> string ``[B]``."""
        return preprocess_text(strings, self._lower_case, self._keep_accents, self._remove_space)

    def _encode_pieces(self, text):
        """SentencePiece + XLNet's digit-comma re-split on preprocessed ``text [B]``.

        Returns ragged ``[B, None]`` pieces (string) and start/end byte offsets (int64) into ``text``.
        """
        pieces, starts, ends = self._sp.tokenize_with_offsets(text)
        p, s, e = pieces.values, starts.values, ends.values
        where = tf.where(tf.strings.regex_full_match(p, self._digit_comma))[:, 0]
        piece, p_start, p_end = tf.gather(p, where), tf.gather(s, where), tf.gather(e, where)
        row = tf.gather(row_ids(pieces), where)  # each piece's text, read in place (not copied per piece)

        # Re-encode the piece without its comma and without any "▁".
        n_bytes = tf.strings.length(piece)
        inner = tf.strings.regex_replace(
            tf.strings.substr(piece, tf.zeros_like(n_bytes), n_bytes - 1), SPIECE_UNDERLINE, "")
        sub, sub_start, sub_end = self._sp.tokenize_with_offsets(inner)
        # If the piece had no leading "▁" but re-encoding added one, strip it (or drop a bare "▁").
        values, sub_rows = sub.values, row_ids(sub)
        is_first = element_index(values) == tf.gather(sub.row_splits, sub_rows)
        had_prefix = tf.strings.substr(piece, 0, 3) == SPIECE_UNDERLINE  # "▁" is 3 bytes
        fix = (is_first & ~tf.gather(had_prefix, sub_rows)
               & (tf.strings.substr(values, 0, 3) == SPIECE_UNDERLINE))
        kept = ~(fix & (values == SPIECE_UNDERLINE))  # [V]
        sub_pieces = tf.where(fix, tf.strings.regex_replace(values, "^" + SPIECE_UNDERLINE, ""), values)

        # Offsets: the piece's text normally sits right before the comma; else use the piece's span.
        comma = tf.maximum(p_end - 1, 0)
        inner_len = tf.cast(tf.strings.length(inner), tf.int64)
        base = comma - inner_len
        has_comma = substrings(text, row, comma, tf.ones_like(comma)) == ","
        aligned = has_comma & (base >= p_start) & (
            substrings(text, row, tf.maximum(base, 0), inner_len) == inner)
        digits_end = tf.where(has_comma, comma, p_end)
        row_aligned, row_base = tf.gather(aligned, sub_rows), tf.gather(base, sub_rows)
        sub_start = tf.where(row_aligned, row_base + sub_start.values, tf.gather(p_start, sub_rows))
        sub_end = tf.where(row_aligned, row_base + sub_end.values, tf.gather(digits_end, sub_rows))

        # Each matched piece becomes its kept sub-pieces and then the comma; pieces, starts and ends share one
        # order of values and one set of row splits.
        order, count = _splice_order(tf.size(p, out_type=tf.int64), where, kept, sub_rows)
        splits = tf.gather(tf.concat([tf.zeros([1], tf.int64), tf.cumsum(count)], 0), pieces.row_splits)

        def spliced(values, new, comma_values):
            return tf.RaggedTensor.from_row_splits(tf.gather(tf.concat([values, new, comma_values], 0), order),
                                                   splits, validate=False)

        return (spliced(p, sub_pieces, tf.fill(tf.shape(piece), ",")),
                spliced(s, sub_start, tf.where(has_comma, comma, p_start)),
                spliced(e, sub_end, p_end))

    def _tokenize(self, strings, with_offsets):
        """Ids (and offsets into ``strings``) for a string ``[B]`` tensor."""
        align = _preprocess_with_alignment(strings, self._lower_case, self._keep_accents, self._remove_space)
        pieces, starts, ends = self._encode_pieces(align.text)
        ids = self._sp.string_to_id(pieces)  # PieceToId, exactly like the reference
        if not with_offsets:
            return ids
        # Token spans never include the whitespace that a leading "▁" stands for.
        rows = row_ids(starts)
        s, e = starts.values, ends.values
        surface = substrings(align.text, rows, s, e - s)
        lead = "^ +" if self._remove_space else "^[\\s\\p{Z}]+"  # kept whitespace may be any kind
        s = e - tf.cast(tf.strings.length(tf.strings.regex_replace(surface, lead, "")), tf.int64)
        # Preprocessed byte offset -> output character -> original character's byte span.
        row_base = tf.gather(align.row_base, rows)
        at_end = s >= tf.gather(align.row_bytes, rows)  # empty span at the very end of the text
        k = search_sorted(align.char_pos, row_base + s - tf.cast(at_end, tf.int64), side="right") - 1
        k = tf.maximum(k, 0)
        orig_start = tf.where(at_end, tf.gather(align.src_end, k), tf.gather(align.src_start, k))
        k = search_sorted(align.char_pos, row_base + e - 1, side="right") - 1
        orig_end = tf.where(e > s, tf.gather(align.src_end, tf.maximum(k, 0)), orig_start)
        return ids, starts.with_flat_values(orig_start), ends.with_flat_values(orig_end)

    def tokenize(self, strings):
        """Token ids without special tokens.

        Args:
          strings: string ``[B]`` (or a scalar), raw text.
        Returns:
          int32 ``RaggedTensor [B, None]`` (``[None]`` for a scalar).
        """
        strings, scalar = _as_batch(strings)
        ids = self._tokenize(strings, False)
        return ids[0] if scalar else ids

    def tokenize_with_offsets(self, strings):
        """Token ids plus where each token came from in the ORIGINAL (unpreprocessed) string.

        Offsets are UTF-8 BYTE offsets (no character offsets are provided): ``original[start:end]`` is the
        text a token came from, also across collapsed whitespace, removed accents and ``` `` ``` -> ``"``.
        Spans exclude the whitespace a leading ``▁`` stands for, so a bare ``▁`` token gets an empty span.
        Pieces from the digit-comma re-split get spans inside their original piece's span. Characters that
        expand (e.g. ``ﬁ`` -> ``fi``) cannot be split, so tokens sharing one get overlapping spans.

        Args:
          strings: string ``[B]`` (or a scalar), raw text.
        Returns:
          ``(ids, starts, ends)``: int32 / int64 / int64 ``RaggedTensor [B, None]`` (``[None]`` for scalars).
        """
        strings, scalar = _as_batch(strings)
        out = self._tokenize(strings, True)
        return tuple(t[0] for t in out) if scalar else out

    def detokenize(self, ids):
        """int ids ``[B, None]`` (ragged, dense or nested lists) -> string ``[B]``; ``[None]`` -> scalar.

        SentencePiece decoding: gives preprocessed text (accents, case and quotes are not restored);
        control ids (``<cls>``, ``<sep>``, ``<pad>``, ...) are skipped.
        """
        if isinstance(ids, (list, tuple)):
            ids = tf.ragged.constant(ids, dtype=tf.int32)
        elif not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        return self._sp.detokenize(tf.cast(ids, tf.int32))

    def id_to_piece(self, ids):
        """Piece strings for ids: a Python int gives a ``str``, a tensor gives a string tensor."""
        if isinstance(ids, (int, np.integer)):
            return self._sp.id_to_string(tf.constant(int(ids), tf.int32)).numpy().decode("utf-8")
        return self._sp.id_to_string(ids)

    # -- Python convenience -------------------------------------------------------------------------
    def encode(self, texts):
        """``list[str] -> list[list[int]]`` (one ``str`` gives ``list[int]``), via the ``tokenize`` graph."""
        if self._encode_fn is None:
            self._encode_fn = tf.function(
                self.tokenize, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
        if isinstance(texts, str):
            return self.encode([texts])[0]
        texts = list(texts)
        if not texts:
            return []
        return self._encode_fn(tf.constant(texts, tf.string)).to_list()


def tokenizer_settings(recorded=None, **given):
    """``XLNetTokenizer``'s preprocessing keyword arguments (``lower_case``, ``keep_accents``,
    ``remove_space``): each one ``given`` (None = not given) over the one ``recorded`` (a dict such as
    ``read_tokenizer_settings``' or a ``finetune_config.json``'s; other keys are ignored) over
    ``TOKENIZER_DEFAULTS``."""
    unknown = sorted(set(given) - set(TOKENIZER_DEFAULTS))
    if unknown:
        raise TypeError(f"tokenizer_settings: unknown setting(s) {unknown}")
    recorded = recorded or {}
    settings = {}
    for key, default in TOKENIZER_DEFAULTS.items():
        value = given.get(key)
        value = recorded.get(key) if value is None else value
        value = default if value is None else value
        if not isinstance(value, (bool, int)) or isinstance(value, int) and value not in (0, 1):
            raise UserError(f"tokenizer setting {key} must be true or false, got {value!r}")
        settings[key] = bool(value)
    return settings


def read_tokenizer_settings(folder):
    """The preprocessing switches a model directory records (any filesystem): those in its
    ``xlnet_tokenizer.json``, else those in its ``finetune_config.json``, else ``{}`` (the defaults)."""
    for name in (TOKENIZER_FILE, _FINETUNE_FILE):
        path = files.join(folder, name)
        if files.exists(path):
            data = files.read_json(path)
            found = {key: data[key] for key in TOKENIZER_DEFAULTS if isinstance(data, dict) and key in data}
            if found or name == TOKENIZER_FILE:
                try:
                    tokenizer_settings(found)
                except UserError as error:
                    raise UserError(f"{path}: {error}") from None
                return found
    return {}


# ----------------------------------------------------------------------------------------------------
# Training


def _check_input_file(path):
    """Raise UserError if ``path`` is missing, holds no non-whitespace text or a line that is not UTF-8 (naming
    the line and the byte)."""
    if not files.isfile(path):
        raise FileNotFoundError(f"SentencePiece training input not found: {path}")
    text = False
    with files.open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise UserError(f"{path}, line {number}: not valid UTF-8 (byte 0x{line[error.start]:02x} at byte "
                                f"{error.start} of the line)") from None
            text = text or bool(line.strip())
    if not text:
        raise UserError(f"SentencePiece training input is empty: {path}")


_VOCAB_SIZE = Spelling("vocab_size", "--vocab-size", hint=False)
_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def _vocab_size_error(error, paths, character_coverage):
    """The UserError of a SentencePiece trainer error about the vocabulary size (None for another error)."""
    high, low = _TOO_HIGH.search(str(error)), _TOO_LOW.search(str(error))
    corpus = ", ".join(paths)
    if high:
        return UserError(_VOCAB_SIZE, f" {high.group(1)} is more than {corpus} allows: SentencePiece finds at most "
                         f"{high.group(2)} pieces in it; give ", _VOCAB_SIZE,
                         f" {high.group(2)} or less (or more text)")
    if low:
        return UserError(_VOCAB_SIZE, f" {low.group(1)} is too small for {corpus}: its pieces need at least "
                         f"{low.group(2)} ({len(SPECIAL_PIECES) + len(USER_DEFINED_SYMBOLS) - 1} special and "
                         f"user-defined symbols, and the characters that cover {character_coverage:.3%} of the "
                         "text); give ", _VOCAB_SIZE, f" {low.group(2)} or more",
                         Spelling(" (or a lower character_coverage=)"))
    return None


def _preprocessed_lines(paths, lower_case, batch_size=1024):
    """Yield the non-empty preprocessed lines of ``paths``, streamed in batches through the TF graph."""
    fn = tf.function(lambda x: preprocess_text(x, lower_case),
                     input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    batch = []
    for path in paths:
        with files.open(path, "rb") as f:
            for line in f:
                batch.append(line)
                if len(batch) == batch_size:
                    yield from (t.decode("utf-8") for t in fn(tf.constant(batch)).numpy() if t)
                    batch = []
    if batch:
        yield from (t.decode("utf-8") for t in fn(tf.constant(batch)).numpy() if t)


def train_spm(input_files, model_prefix, vocab_size, lower_case=False, *, character_coverage=0.99995,
              input_sentence_size=10_000_000, num_threads=None, log_file=None, **trainer_kwargs):
    """Train an XLNet-style SentencePiece unigram model; returns the path of ``PREFIX.model``.

    Each line of the input files (one sentence per line, XLNet's pretraining format) goes through the
    same preprocessing as ``XLNetTokenizer(..., lower_case)`` (the ``preprocess_text`` graph, in batches),
    streamed to the trainer. Options follow the XLNet README (``--model_type=unigram
    --character_coverage=0.99995 --control_symbols=<cls>,<sep>,<pad>,<mask>,<eod>
    --user_defined_symbols=<eop>,.,(,),",-,–,£,€ --shuffle_input_sentence --input_sentence_size=10000000``),
    which gives the published XLNet ids: ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2 (spm defaults), control
    ``<cls>`` 3, ``<sep>`` 4, ``<pad>`` 5, ``<mask>`` 6, ``<eod>`` 7, user-defined ``<eop>`` 8 and
    ``. ( ) " - – £ €`` 9-16 (checked after training). ``PREFIX.vocab`` is written too.

    Args:
      input_files: a path or a list of paths to UTF-8 text, one sentence per line.
      model_prefix: output prefix (``PREFIX.model``, ``PREFIX.vocab``); its folder is created.
      vocab_size: number of pieces.
      lower_case: train an uncased model (input lower-cased by the shared preprocessing).
      num_threads: trainer threads (default: all CPUs).
      log_file: where the trainer's own log (its configuration and progress, written by its C++ code to
        stderr) is appended instead of the console; None keeps it on stderr.
      **trainer_kwargs: more ``SentencePieceTrainer.train`` options (override the ones above).
    Raises:
      FileNotFoundError / UserError naming the file, for a missing or empty input file or a line that is not
      UTF-8 (its line and byte); UserError for a vocab_size SentencePiece cannot make from the input (the
      largest it allows, or the smallest that holds the symbols and characters).
    """
    paths = [os.fspath(input_files)] if isinstance(input_files, (str, os.PathLike)) else [
        os.fspath(p) for p in input_files]
    if not paths:
        raise UserError("train_spm needs at least one input file (--input).")
    for path in paths:
        _check_input_file(path)
    model_prefix = os.fspath(model_prefix)
    if files.dirname(model_prefix):
        files.makedirs(files.dirname(model_prefix))
    if files.is_remote(model_prefix):  # the trainer writes local files: train into a scratch folder, then copy
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            local = train_spm(paths, os.path.join(scratch, files.basename(model_prefix)), vocab_size, lower_case,
                              character_coverage=character_coverage, input_sentence_size=input_sentence_size,
                              num_threads=num_threads, log_file=log_file, **trainer_kwargs)
            for suffix in (".model", ".vocab"):
                files.copy(local[: -len(".model")] + suffix, model_prefix + suffix)
        return model_prefix + ".model"
    options = dict(
        model_type="unigram", vocab_size=vocab_size, character_coverage=character_coverage,
        control_symbols=list(CONTROL_SYMBOLS), user_defined_symbols=list(USER_DEFINED_SYMBOLS),
        shuffle_input_sentence=True, input_sentence_size=input_sentence_size,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=num_threads or os.cpu_count() or 1,
        minloglevel=0)  # the trainer's log level is process-wide in SentencePiece: set it on every call
    options.update(trainer_kwargs)
    from xlnet_tf.console import native_output_to

    with native_output_to(log_file):
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=_preprocessed_lines(paths, lower_case), model_prefix=model_prefix, **options)
        except RuntimeError as error:
            mistake = _vocab_size_error(error, paths, options["character_coverage"])
            if mistake is None:
                raise
            raise mistake from None
    model_file = model_prefix + ".model"
    processor = spm.SentencePieceProcessor(model_file=model_file)
    got = [processor.id_to_piece(i) for i in range(len(SPECIAL_PIECES))]
    if got != list(SPECIAL_PIECES):
        raise ValueError(f"{model_file}: special pieces are {got}, expected {list(SPECIAL_PIECES)}")
    return model_file
