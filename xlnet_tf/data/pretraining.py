"""Pretraining data: text files -> TFRecord shards in XLNet's record layout -> batched training features.

Writing (`create_pretraining_data`)
-----------------------------------
The input is plain UTF-8 text, one sentence (or paragraph) per line, documents separated by blank lines. Every
line is tokenized with `XLNetTokenizer` (its TF graph, in batches of lines) and the token ids form ONE stream:
the lines of a document one after another, each document followed by `<eod>`. Every line, and every `<eod>`,
carries a sentence parity bit that flips from one to the next, as in the original XLNet data; a change of
parity between two neighbouring tokens is a sentence boundary.

Record k of a stream (k = 0, 1, ...) starts at token i = k * reuse_len and holds `seq_len` ids:

    stream[i : i + reuse_len]  A  <sep>  B  <sep>  <cls>        segment ids  0...0  0..0 0  1..1 1  2

A starts right after the prefix (it continues the text) and B is either the real continuation of A
(`is_next` = 1) or a random piece of the corpus (`is_next` = 0), chosen with the rules of the original
`_split_a_and_b`: A ends at a randomly chosen sentence boundary within `seq_len - reuse_len - 3` tokens of its
start; with probability 1/2 (and always when there is no such boundary) B starts at a uniformly random
position of the whole corpus, is widened to whole sentences, and gets the length left over by A; otherwise B is
the text after A up to the first sentence boundary past the budget. A and B are then trimmed from the right
(always the longer one, B on ties) until |A| + |B| = seq_len - reuse_len - 3. Record k + 1's prefix is record
k's prefix's continuation (the stream advances by reuse_len per record): reading records in order gives
Transformer-XL memory that continues the text. Records exist for every i with i + seq_len <= number of tokens
(the original's rule); the few tokens after the last record's window (fewer than reuse_len) are not used and
are reported as `unused_tail_tokens`: no padded last record is written.

With `bi_data`, the same is done on the REVERSED token stream and written to separate `records-bwd-*` shards:
the training input takes the second half of every batch from them, as the original does.

Bounded memory: the tokens are written to a temporary file in the output directory (4 bytes per token: the
id and the parity bit) while the input is read line by line and tokenized in calls of at most 1024 lines /
64 KiB (the tokenizer's graph needs several hundred bytes per character; lines over 8192 characters are cut
at spaces into pieces, which tokenize like the whole line since no piece spans whitespace, up to
SentencePiece's choice between equally scored segmentations). The records are then built by reading small
windows of that file (about 3 * seq_len tokens per record, plus block-wise scans back to a sentence start).
So the random B is drawn from the WHOLE corpus like the original (not from a window), memory does not grow
with the corpus, and the temporary file (deleted at the end) costs 4 bytes of disk per token. One input line
is held in memory at a time.

Files in the output directory: `records-IIIII-of-NNNNN.tfrecord` (and `records-bwd-...` with bi_data), each a
contiguous range of records in stream order (shard i holds records [i*n//N, (i+1)*n//N)), tf.train.Example
with int64 features `input_ids` [seq_len], `segment_ids` [seq_len], `is_next` [1]; then `metadata.json`. Every
file is written under a temporary name and renamed; metadata.json is written last.

Reading (`pretraining_dataset`)
-------------------------------
The record sequence of each direction is cut into contiguous streams, one per batch row of every replica
(the original's `batchify`); row r of consecutive batches reads consecutive records, so the model's new
memory of batch t is the right memory for batch t + 1. Targets are sampled per record with
`sampling.sample_features` from stateless seeds of (seed, record, epoch), which makes batch b a pure function
of (seed, b) and lets training resume its data position with `start_batch`.
"""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf

from xlnet_tf.data import sampling
from xlnet_tf.data.truncation import truncated_pair_lengths
from xlnet_tf.errors import UserError

FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"
CLS_ID, SEP_ID, PAD_ID, EOD_ID = sampling.CLS_ID, sampling.SEP_ID, sampling.PAD_ID, sampling.EOD_ID
_SPECIAL = {"<cls>": CLS_ID, "<sep>": SEP_ID, "<pad>": PAD_ID, "<eod>": EOD_ID}
_TOKENS_FILE = ".tokens.tmp"
_BATCH_LINES = 1024  # texts tokenized per TF call ...
_BATCH_BYTES = 64 << 10  # ... or fewer, holding this many bytes: the tokenizer's peak memory grows with it
_PIECE_CHARS = 8192  # longer lines are tokenized in pieces cut at spaces (bounds the tokenizer's memory)
_SCAN_BLOCK = 4096  # tokens read per step when looking back for a sentence start
_SEED_SALT = 0x584C4E54  # second word of the stateless seeds ("XLNT")


def shard_name(index, num_shards, backward=False):
    """File name of shard `index` of `num_shards` (forward or backward records)."""
    kind = "records-bwd" if backward else "records"
    return f"{kind}-{index:05d}-of-{num_shards:05d}.tfrecord"


# ----------------------------------------------------------------------------------------------------
# Writing


def _as_paths(input_files):
    if isinstance(input_files, (str, os.PathLike)):
        return [os.fspath(input_files)]
    return [os.fspath(p) for p in input_files]


def _check_inputs(paths, spm_model):
    if not paths:
        raise UserError("create-pretraining-data needs at least one --input file")
    for path in paths:
        if not os.path.isfile(path):
            raise UserError(f"input file not found: {path}")
        with open(path, "rb") as f:
            if not any(line.strip() for line in f):
                raise UserError(f"input file is empty (no text): {path}")
    if not os.path.isfile(spm_model):
        raise UserError(f"SentencePiece model not found: {spm_model}")


def _infer_lower_case(tokenizer):
    """A model is taken as uncased when no piece of its vocabulary holds an upper-case letter."""
    pieces = tokenizer.id_to_piece(tf.range(tokenizer.vocab_size)).numpy()
    return not any(p.decode("utf-8") != p.decode("utf-8").lower() for p in pieces[9:])


def _load_tokenizer(spm_model, lower_case):
    from xlnet_tf.tokenization import XLNetTokenizer

    try:
        tokenizer = XLNetTokenizer(spm_model, lower_case=bool(lower_case))
    except Exception as error:  # a corrupt model file
        raise UserError(f"cannot load the SentencePiece model {spm_model}: {error}") from error
    for piece, wanted in _SPECIAL.items():
        got = getattr(tokenizer, piece.strip("<>") + "_id")
        if got != wanted:
            raise UserError(f"{spm_model}: {piece} has id {got}; XLNet records need id {wanted} "
                            "(train the model with `xlnet-tf train-spm`)")
    if tokenizer.vocab_size >= 1 << 30:
        raise UserError(f"{spm_model}: vocabulary of {tokenizer.vocab_size} pieces is too large")
    if lower_case is None:
        tokenizer = XLNetTokenizer(spm_model, lower_case=_infer_lower_case(tokenizer))
    return tokenizer


class _TokenFile:
    """Appends (id, parity) pairs to the temporary token file as int32 `id << 1 | parity`."""

    def __init__(self, path):
        self.path = path
        self.file = open(path, "wb")
        self.count = 0

    def write(self, ids, parity):
        packed = (ids.astype(np.int64) << 1) | parity.astype(np.int64)
        self.file.write(packed.astype("<i4").tobytes())
        self.count += ids.size

    def close(self):
        self.file.close()


def _pieces(line, limit):
    """`line` cut at spaces into pieces of at most `limit` characters (a word longer than that is cut too).

    Pieces cut at whitespace tokenize exactly like the whole line (no SentencePiece piece spans whitespace),
    and they bound the tokenizer's memory, which grows with the characters of one call.
    """
    while len(line) > limit:
        cut = line.rfind(" ", 1, limit + 1)
        cut = cut if cut > 0 else limit
        yield line[:cut]
        line = line[cut:]
    yield line


class _Tokenizing:
    """Reads the input files line by line and writes the token stream, counting what it saw.

    Pending entries are (text index or -1 for <eod>, whether it begins a sentence); a long line is several
    text entries of which only the first begins its sentence, and a flush may fall inside such a line.
    """

    def __init__(self, tokenizer, token_file, skip_bad_lines, progress_bar):
        self.encode = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)],
                                  autograph=False)
        self.out = token_file
        self.skip_bad_lines = skip_bad_lines
        self.bar = progress_bar
        self.parity, self.open = 1, False  # parity of the last sentence; whether it has tokens yet
        self.documents = self.lines = self.input_lines = self.skipped_lines = 0
        self.texts, self.entries, self.pending_bytes, self.read_bytes = [], [], 0, 0

    def run(self, path):
        """Tokenizes one file; returns how many text lines it gave."""
        in_document, text_lines = False, 0
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                self.input_lines += 1
                self.read_bytes += len(raw)
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    if not self.skip_bad_lines:
                        raise UserError(
                            f"{path}:{number}: line is not valid UTF-8 ({error.reason} at byte {error.start}); "
                            "fix the file or skip such lines with skip_bad_lines (--skip-bad-lines)") from None
                    self.skipped_lines += 1
                    continue
                if number == 1:
                    line = line.lstrip("\ufeff")
                line = line.strip()
                if not line:
                    if in_document:
                        self.entries.append((-1, True))  # <eod>, a sentence of its own
                        self.documents += 1
                        in_document = False
                    continue
                in_document = True
                text_lines += 1
                for i, piece in enumerate(_pieces(line, _PIECE_CHARS)):
                    data = piece.encode("utf-8")
                    self.texts.append(data)
                    self.entries.append((len(self.texts) - 1, i == 0))
                    self.pending_bytes += len(data)
                    if len(self.texts) >= _BATCH_LINES or self.pending_bytes >= _BATCH_BYTES:
                        self.flush()
        if in_document:
            self.entries.append((-1, True))
            self.documents += 1
        self.flush()
        self.lines += text_lines
        return text_lines

    def flush(self):
        """Tokenizes the pending texts and appends them, with the pending <eod>s, to the stream."""
        if self.entries:
            values, lengths = np.zeros([0], np.int64), np.zeros([0], np.int64)
            if self.texts:
                ragged = self.encode(tf.constant(self.texts, tf.string))
                values = ragged.values.numpy().astype(np.int64)
                lengths = np.diff(ragged.row_splits.numpy())
            sizes = np.empty(len(self.entries), np.int64)
            parity = np.empty(len(self.entries), np.int64)
            for e, (text, new_sentence) in enumerate(self.entries):
                sizes[e] = 1 if text < 0 else lengths[text]
                if new_sentence:
                    self.open = False
                if sizes[e] and not self.open:  # the parity flips from one sentence with tokens to the next
                    self.parity, self.open = 1 - self.parity, True
                parity[e] = self.parity
            ids = np.full(int(sizes.sum()), EOD_ID, np.int64)
            is_eod = np.array([text < 0 for text, _ in self.entries])
            ids[~np.repeat(is_eod, sizes)] = values
            self.out.write(ids, np.repeat(parity, sizes))
        self.bar.update(self.read_bytes)
        self.texts, self.entries, self.pending_bytes, self.read_bytes = [], [], 0, 0


class _Stream:
    """Random access to the token stream on disk, forward or reversed: `read(lo, hi)` -> (ids, parity)
    of positions [lo, hi) in this direction, as int64 / int8 arrays."""

    def __init__(self, path, size, reverse):
        self.file = open(path, "rb")
        self.size, self.reverse = size, reverse

    def read(self, lo, hi):
        start, stop = (self.size - hi, self.size - lo) if self.reverse else (lo, hi)
        self.file.seek(4 * start)
        packed = np.frombuffer(self.file.read(4 * (stop - start)), "<i4").astype(np.int64)
        if self.reverse:
            packed = packed[::-1]
        return packed >> 1, (packed & 1).astype(np.int8)

    def sentence_start(self, pos):
        """Start of the sentence holding `pos` (the original widens a random B back to it)."""
        while pos > 0:
            lo = max(0, pos - _SCAN_BLOCK)
            _, parity = self.read(lo, pos + 1)
            changes = np.flatnonzero(parity[1:] != parity[:-1])
            if changes.size:
                return lo + int(changes[-1]) + 1
            pos = lo
        return 0

    def close(self):
        self.file.close()


def _pair(stream, begin, total, rng):
    """A, B and is_next for the record whose A starts at `begin` (the original `_split_a_and_b`).

    Only the window [begin, begin + 2 * total] is scanned for A's sentence boundaries: any continuation
    beyond it only matters through its length, and lengths over `total` trim to the same result.
    """
    size = stream.size
    hi = min(size, begin + 2 * total + 1)
    ids, parity = stream.read(begin, hi)
    boundaries = np.flatnonzero(parity[1:] != parity[:-1]) + 1  # offsets from begin, all >= 1
    cuts = boundaries[boundaries < total]
    later = boundaries[boundaries >= total]
    end = int(later[0]) if later.size else hi - begin  # first boundary at or past the budget (or the window end)

    if cuts.size and rng.random() >= 0.5:
        cut = int(cuts[rng.integers(cuts.size)])
        a_len, b_len = truncated_pair_lengths(cut, end - cut, total)
        return ids[:a_len], ids[cut:cut + b_len], 1

    a_end = int(cuts[rng.integers(cuts.size)]) if cuts.size else end
    want = max(1, total - a_end)
    b_first = int(rng.integers(0, size - 1 - want, endpoint=True))
    b_begin = stream.sentence_start(b_first)
    b_end = b_first + want
    limit = min(size - 1, b_begin + total)  # widening past b_begin + total trims to the same result
    b_ids, b_parity = stream.read(b_begin, min(size, b_begin + total + 1))
    if b_end < limit:
        rel = np.arange(b_end, limit) - b_begin
        changes = np.flatnonzero(b_parity[rel] != b_parity[rel - 1])
        b_end = b_begin + int(rel[changes[0]]) if changes.size else limit
    a_len, b_len = truncated_pair_lengths(a_end, b_end - b_begin, total)
    return ids[:a_len], b_ids[:b_len], 0


def _record(stream, index, seq_len, reuse_len, rng):
    """(input_ids [seq_len], segment_ids [seq_len], is_next) of record `index` of `stream`."""
    start = index * reuse_len
    prefix, _ = stream.read(start, start + reuse_len)
    a, b, is_next = _pair(stream, start + reuse_len, seq_len - reuse_len - 3, rng)
    ids = np.concatenate([prefix, a, [SEP_ID], b, [SEP_ID, CLS_ID]])
    segments = np.concatenate([np.zeros(reuse_len + a.size + 1, np.int64), np.ones(b.size + 1, np.int64), [2]])
    return ids, segments, is_next


def _example(ids, segments, is_next):
    def feature(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    return tf.train.Example(features=tf.train.Features(feature={
        "input_ids": feature(ids.tolist()),
        "segment_ids": feature(segments.tolist()),
        "is_next": feature([is_next]),
    })).SerializeToString()


def _write_direction(token_path, num_tokens, output_dir, num_records, num_shards, seq_len, reuse_len, seed,
                     backward, bar):
    """Writes the records of one direction into its shards; returns [{file, num_records}] and is_next count."""
    stream = _Stream(token_path, num_tokens, reverse=backward)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, int(backward)])))
    shards, positives = [], 0
    try:
        for shard in range(num_shards):
            lo, hi = shard * num_records // num_shards, (shard + 1) * num_records // num_shards
            name = shard_name(shard, num_shards, backward)
            final = os.path.join(output_dir, name)
            temporary = final + ".tmp"
            try:
                with tf.io.TFRecordWriter(temporary) as writer:
                    for index in range(lo, hi):
                        ids, segments, is_next = _record(stream, index, seq_len, reuse_len, rng)
                        positives += is_next
                        writer.write(_example(ids, segments, is_next))
                        bar.update(1)
            except BaseException:
                if os.path.exists(temporary):
                    os.remove(temporary)
                raise
            os.replace(temporary, final)
            shards.append({"file": name, "num_records": hi - lo})
    finally:
        stream.close()
    return shards, positives


def _write_json(path, value):
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(temporary, path)


def _check_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise UserError(f"--{name.replace('_', '-')} must be an integer >= {low}, got {value!r}")


def create_pretraining_data(input_files, spm_model, output_dir, seq_len=512, reuse_len=256, num_shards=1, seed=0,
                            bi_data=False, lower_case=None, skip_bad_lines=False, progress=True) -> dict:
    """Tokenizes text files and writes XLNet pretraining records (see the module docstring for the layout).

    Args:
      input_files: a path or paths: UTF-8 text, one sentence per line, blank lines between documents.
      spm_model: SentencePiece model with XLNet's special ids (`xlnet-tf train-spm`).
      output_dir: created if needed; gets the shards and metadata.json.
      seq_len, reuse_len: record length and reuse prefix (1 <= reuse_len <= seq_len - 5).
      num_shards: shards per direction, each a contiguous range of records.
      seed: the random choices of B (same inputs and seed -> identical files).
      bi_data: also write records of the reversed stream (`records-bwd-*`).
      lower_case: the tokenizer's lower-casing; None: uncased iff no vocabulary piece has an upper-case letter.
      skip_bad_lines: skip (and count) lines that are not valid UTF-8 instead of stopping.
      progress: progress bars (input bytes, then records).
    Returns:
      the metadata dict also written to metadata.json, plus `output_dir`.
    Raises:
      UserError naming the file (and line) for missing, empty or undecodable input, a missing spm model, or a
      corpus too short for one record.
    """
    from tqdm.auto import tqdm

    for name, value, low in (("seq_len", seq_len, 6), ("reuse_len", reuse_len, 1), ("num_shards", num_shards, 1),
                             ("seed", seed, 0)):
        _check_int(name, value, low)
    if reuse_len > seq_len - 5:
        raise UserError(f"--reuse-len ({reuse_len}) must be <= --seq-len - 5 ({seq_len - 5}): A and B need at "
                        "least one token each besides <sep> <sep> <cls>")
    paths = _as_paths(input_files)
    spm_model = os.path.abspath(os.fspath(spm_model))
    _check_inputs(paths, spm_model)
    tokenizer = _load_tokenizer(spm_model, lower_case)
    output_dir = os.fspath(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    metadata_path = os.path.join(output_dir, METADATA_FILE)
    if os.path.exists(metadata_path):
        os.remove(metadata_path)  # no stale metadata may describe a half-written directory
    token_path = os.path.join(output_dir, _TOKENS_FILE)

    try:
        token_file = _TokenFile(token_path)
        total_bytes = sum(os.path.getsize(p) for p in paths)
        with tqdm(total=total_bytes, unit="B", unit_scale=True, desc="tokenizing", disable=not progress) as bar:
            reader = _Tokenizing(tokenizer, token_file, skip_bad_lines, bar)
            try:
                for path in paths:
                    if reader.run(path) == 0:
                        raise UserError(f"input file has no usable text (all {reader.skipped_lines} non-empty "
                                        f"lines were skipped as invalid UTF-8): {path}")
            finally:
                token_file.close()
        num_tokens = token_file.count
        num_records = (num_tokens - seq_len) // reuse_len + 1 if num_tokens >= seq_len else 0
        if num_records < 1:
            raise UserError(f"the corpus is too short: {num_tokens} tokens, but one record needs --seq-len "
                            f"{seq_len} tokens ({', '.join(paths)})")
        if num_shards > num_records:
            raise UserError(f"--num-shards {num_shards} is more than the {num_records} records")

        directions = (False, True) if bi_data else (False,)
        outputs = {}
        with tqdm(total=num_records * len(directions), unit="rec", desc="writing records",
                  disable=not progress) as bar:
            for backward in directions:
                outputs[backward] = _write_direction(token_path, num_tokens, output_dir, num_records, num_shards,
                                                     seq_len, reuse_len, seed, backward, bar)
    finally:
        if os.path.exists(token_path):
            os.remove(token_path)

    metadata = {
        "format_version": FORMAT_VERSION,
        "seq_len": seq_len,
        "reuse_len": reuse_len,
        "bi_data": bool(bi_data),
        "vocab_size": tokenizer.vocab_size,
        "spm_model": spm_model,
        "lower_case": tokenizer.lower_case,
        "num_records": num_records,
        "num_shards": num_shards,
        "shards": outputs[False][0],
        "bwd_shards": outputs[True][0] if bi_data else [],
        "is_next_records": outputs[False][1],
        "documents": reader.documents,
        "lines": reader.lines,
        "input_lines": reader.input_lines,
        "skipped_lines": reader.skipped_lines,
        "tokens": num_tokens,
        "unused_tail_tokens": num_tokens - ((num_records - 1) * reuse_len + seq_len),
        "seed": seed,
        "input_files": [os.path.abspath(p) for p in paths],
    }
    _write_json(metadata_path, metadata)
    kinds = "forward + backward records each" if bi_data else "records"
    print(f"create-pretraining-data: {reader.documents} documents, {reader.lines} lines, {num_tokens} tokens "
          f"-> {num_records} {kinds}, is_next {metadata['is_next_records']}/{num_records}, in {num_shards} "
          f"shard(s) under {output_dir}; {reader.skipped_lines} bad lines skipped; "
          f"{metadata['unused_tail_tokens']} tail tokens unused")
    return dict(metadata, output_dir=output_dir)


# ----------------------------------------------------------------------------------------------------
# Reading

_REQUIRED = {"format_version": int, "seq_len": int, "reuse_len": int, "bi_data": bool, "vocab_size": int,
             "spm_model": str, "num_records": int, "num_shards": int, "shards": list, "bwd_shards": list}


def load_metadata(data_dir) -> dict:
    """metadata.json of a `create_pretraining_data` directory; UserError naming the file when it is missing,
    unreadable, of another format version or lacks fields."""
    path = os.path.join(os.fspath(data_dir), METADATA_FILE)
    if not os.path.isfile(path):
        raise UserError(f"no pretraining data here: {path} not found (write it with create-pretraining-data)")
    try:
        with open(path, encoding="utf-8") as f:
            metadata = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(metadata, dict):
        raise UserError(f"{path}: expected a JSON object")
    for key, kind in _REQUIRED.items():
        if not isinstance(metadata.get(key), kind) or (kind is int and isinstance(metadata.get(key), bool)):
            raise UserError(f"{path}: field {key!r} is missing or not a {kind.__name__}")
    if metadata["format_version"] != FORMAT_VERSION:
        raise UserError(f"{path}: format version {metadata['format_version']}, this code reads {FORMAT_VERSION}")
    for key in ("shards", "bwd_shards"):
        for shard in metadata[key]:
            if not isinstance(shard, dict) or not isinstance(shard.get("file"), str) or not isinstance(
                    shard.get("num_records"), int):
                raise UserError(f"{path}: bad entry in {key!r}: {shard!r}")
        if (key == "shards" or metadata["bi_data"]) and sum(s["num_records"] for s in metadata[key]) != \
                metadata["num_records"]:
            raise UserError(f"{path}: the {key!r} record counts do not add up to num_records")
    return metadata


def _default_word_start(metadata):
    import sentencepiece as spm

    model = metadata["spm_model"]
    if not os.path.isfile(model):
        raise UserError(f"SentencePiece model of the data not found: {model} (pass word_start explicitly)")
    processor = spm.SentencePieceProcessor(model_file=model)
    return sampling.word_start_from_pieces([processor.id_to_piece(i) for i in range(processor.get_piece_size())])


def _record_range(data_dir, shards, lo, hi):
    """Serialized records [lo, hi) of one direction's shards, as a dataset."""
    files, first, position = [], None, 0
    for shard in shards:
        end = position + shard["num_records"]
        if end > lo and position < hi:
            path = os.path.join(data_dir, shard["file"])
            if not os.path.isfile(path):
                raise UserError(f"pretraining shard not found: {path} (listed in {METADATA_FILE})")
            files.append(path)
            first = position if first is None else first
        position = end
    return tf.data.TFRecordDataset(files).skip(lo - first).take(hi - lo)


def _row_dataset(data_dir, shards, begin, length, first_step, key):
    """(serialized record, step, key) for steps first_step, first_step + 1, ... of one row that cycles over
    records [begin, begin + length); the record at step t is begin + t % length."""
    offset = first_step % length
    records = _record_range(data_dir, shards, begin, begin + length).repeat()
    if offset:
        records = _record_range(data_dir, shards, begin + offset, begin + length).concatenate(records)
    steps = tf.data.Dataset.range(first_step, np.iinfo(np.int64).max)
    keys = tf.data.Dataset.from_tensors(tf.constant(key, tf.int64)).repeat()
    return tf.data.Dataset.zip((records, steps, keys))


def pretraining_dataset(data_dir, batch_size, options: sampling.SamplingOptions, seed=0, input_context=None,
                        start_batch=0, word_start=None) -> tf.data.Dataset:
    """Endless dataset of batched training features from a `create_pretraining_data` directory.

    Yields dicts of `sampling.sample_features` outputs with a leading batch dimension `batch_size` (the
    per-replica batch), all shapes static: for PLM `input_ids`, `segment_ids` [B, T] int32, `padding_mask`
    [B, T], `perm_mask` [B, T, T], `target_mapping` [B, P, T], `target_ids` [B, P] int32, `target_mask` [B, P];
    for MLM `input_ids`, `segment_ids`, `padding_mask`, `target_ids`, `target_mask` [B, T]; plus `is_next` [B]
    int32. T = options.seq_len, P = options.num_predict.

    Streams: with P input pipelines of D replicas each (input_context; P = D = 1 without it), each direction's
    records are cut into G = P * D * H contiguous streams of L = num_records // G records (H = batch_size, or
    batch_size / 2 per direction with bi_data); row j of replica d on pipeline p reads stream
    (p * D + d) * H + j, record begin + t % L at step t. Pipelines read disjoint records. Elements come replica
    by replica, step by step (element t * D + d is replica d's batch of step t), as tf.distribute hands the
    elements of one pipeline to its replicas in turn. With bi_data the first half of each batch comes from
    forward records and the second half from backward ones.

    Args:
      data_dir: the output directory of `create_pretraining_data`.
      batch_size: per-replica batch (even with bi_data).
      options: `sampling.SamplingOptions`; its seq_len / reuse_len must be the data's.
      seed: sampling seed; targets of record k in pass e over its stream come from seeds of (seed, k, e).
      input_context: a `tf.distribute.InputContext`, or None for one pipeline with one replica.
      start_batch: steps already taken by every replica (micro-batches, with gradient accumulation): the
        dataset starts where it would be after them, i.e. equals skipping start_batch * D elements.
      word_start: bool [vocab] table (`sampling.word_start_from_pieces`); None builds it from the data's
        SentencePiece model.
    """
    data_dir = os.fspath(data_dir)
    metadata = load_metadata(data_dir)
    where = os.path.join(data_dir, METADATA_FILE)
    if (options.seq_len, options.reuse_len) != (metadata["seq_len"], metadata["reuse_len"]):
        raise UserError(f"sampling options have seq_len {options.seq_len}, reuse_len {options.reuse_len}, but the "
                        f"data ({where}) has seq_len {metadata['seq_len']}, reuse_len {metadata['reuse_len']}")
    _check_int("batch_size", batch_size, 1)
    _check_int("start_batch", start_batch, 0)
    _check_int("seed", seed, 0)
    bi_data = metadata["bi_data"]
    if bi_data and batch_size % 2:
        raise UserError(f"the data has bi_data (forward and backward halves), so the per-replica batch size "
                        f"must be even, got {batch_size}")
    pipelines, pipeline = 1, 0
    replicas = 1
    if input_context is not None:
        pipelines, pipeline = input_context.num_input_pipelines, input_context.input_pipeline_id
        replicas = max(1, input_context.num_replicas_in_sync // pipelines)
    half = batch_size // 2 if bi_data else batch_size
    streams = pipelines * replicas * half
    num_records = metadata["num_records"]
    length = num_records // streams
    if length < 1:
        raise UserError(f"{num_records} records in {data_dir} cannot fill {streams} streams "
                        f"({pipelines} pipelines x {replicas} replicas x {half} rows): use more data or smaller "
                        "batches")
    if word_start is None:
        word_start = _default_word_start(metadata)
    word_start = np.asarray(word_start, bool)
    vocab_size = metadata["vocab_size"]
    if word_start.shape != (vocab_size,):
        raise UserError(f"word_start has shape {word_start.shape}, the data's vocabulary has {vocab_size} ids")
    word_start = tf.constant(word_start)

    rows = []
    for replica in range(replicas):
        for row in range(batch_size):
            backward = bi_data and row >= half
            stream = (pipeline * replicas + replica) * half + (row - half if backward else row)
            shards = metadata["bwd_shards"] if backward else metadata["shards"]
            begin = stream * length
            rows.append(_row_dataset(data_dir, shards, begin, length, start_batch,
                                     key=begin + (num_records if backward else 0)))
    order = tf.data.Dataset.range(len(rows)).repeat()
    dataset = tf.data.Dataset.choose_from_datasets(rows, order)

    spec = {
        "input_ids": tf.io.FixedLenFeature([options.seq_len], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([options.seq_len], tf.int64),
        "is_next": tf.io.FixedLenFeature([1], tf.int64),
    }
    base_seed = tf.constant([seed, _SEED_SALT], tf.int64)

    def features(serialized, step, key):
        example = tf.io.parse_single_example(serialized, spec)
        record = key + step % length  # forward records 0..n-1, backward n..2n-1
        record_seed = tf.random.experimental.stateless_fold_in(base_seed, record)
        record_seed = tf.random.experimental.stateless_fold_in(record_seed, step // length)
        out = sampling.sample_features(example["input_ids"], example["segment_ids"], word_start, options,
                                       record_seed, vocab_size=vocab_size)
        out["is_next"] = tf.cast(example["is_next"][0], tf.int32)
        return out

    dataset = dataset.map(features, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    dataset = dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    dataset_options = tf.data.Options()
    dataset_options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset_options.deterministic = True
    return dataset.with_options(dataset_options)
