"""Pretraining data: text files -> TFRecord shards in XLNet's record layout.

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

Every record's random choices come from its own generator, seeded with (seed, direction, record index): any
process may write any record and get the same bytes, so the shards are the same whether one process writes
them in order or many workers of a Beam pipeline write them in parallel (`xlnet_tf.pipelines`).

The work is two steps, and the Beam pipeline runs the same two functions:
1. `tokenize_file`: every input file -> its token chunk in the temporary folder `.tokens/` of the output
   directory (4 bytes per token: the id and the parity bit), read line by line and tokenized in calls of at
   most 1024 lines / 64 KiB (the tokenizer's graph needs several hundred bytes per character; lines over 8192
   characters are cut at spaces into pieces, which tokenize like the whole line since no piece spans
   whitespace, up to SentencePiece's choice between equally scored segmentations). One input line is held in
   memory at a time. A file is one unit of work: a document never spans workers.
2. `write_shard`: the chunks in input order are one stream (`_Stream`, which aligns the files' parities so
   that the sentence boundaries are those of one reader over all files); each shard's records are built by
   reading small windows of it (about 3 * seq_len tokens per record, plus block-wise scans back to a sentence
   start). So the random B is drawn from the WHOLE corpus like the original (not from a window), memory does
   not grow with the corpus, and the chunks (deleted at the end) cost 4 bytes of disk per token.

Inputs are paths or globs on any filesystem TensorFlow reads (the Beam pipeline: any Beam reads); all I/O
goes through a `files` object (`TensorFlowFiles` here).

The files written, and how they are read back as training batches: `xlnet_tf.data.pretraining_records`
(its names `load_metadata`, `pretraining_dataset`, `shard_name`, `METADATA_FILE` import from here too).
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from xlnet_tf.data import sampling
# load_metadata and pretraining_dataset: public names of this module before the records' reading moved out.
from xlnet_tf.data.pretraining_records import (FORMAT_VERSION, METADATA_FILE, SPM_FILE, check_int,  # noqa: F401
                                               load_metadata, pretraining_dataset, shard_name)
from xlnet_tf.data.truncation import truncated_pair_lengths
from xlnet_tf.errors import Spelling, UserError
from xlnet_tf.files import TensorFlowFiles, absolute as absolute_path

CLS_ID, SEP_ID, PAD_ID, EOD_ID = sampling.CLS_ID, sampling.SEP_ID, sampling.PAD_ID, sampling.EOD_ID
_SPECIAL = {"<cls>": CLS_ID, "<sep>": SEP_ID, "<pad>": PAD_ID, "<eod>": EOD_ID}
_TOKENS_DIR = ".tokens"  # the token chunks while the records are written
_BATCH_LINES = 1024  # texts tokenized per TF call ...
_BATCH_BYTES = 64 << 10  # ... or fewer, holding this many bytes: the tokenizer's peak memory grows with it
_PIECE_CHARS = 8192  # longer lines are tokenized in pieces cut at spaces (bounds the tokenizer's memory)
_SCAN_BLOCK = 4096  # tokens read per step when looking back for a sentence start
SKIP_BAD_LINES = Spelling(" or skip such lines with skip_bad_lines=True", " or skip such lines with --skip-bad-lines")


# ----------------------------------------------------------------------------------------------------
# Files: every read and write of the writing side goes through a `files` object, so that the same steps run
# on TensorFlow's filesystems in one process and on Beam's in `xlnet_tf.pipelines`.


def _is_glob(pattern):
    return any(c in pattern for c in "*?[")


def expand_inputs(files, patterns):
    """The input files of `patterns` (paths or globs) in the given order, each glob's matches sorted."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    paths = []
    for pattern in (os.fspath(p) for p in patterns):
        if _is_glob(pattern):
            matches = files.glob(pattern)
            if not matches:
                raise UserError(f"no input file matches {pattern}")
        elif files.exists(pattern):
            matches = [pattern]
        else:
            raise UserError(f"input file not found: {pattern}")
        paths += matches
    if not paths:
        raise UserError("create-pretraining-data needs at least one --input file")
    return paths


def check_settings(seq_len, reuse_len, num_shards, seed):
    """UserError naming the flag for settings no record layout can have."""
    for name, value, low in (("seq_len", seq_len, 6), ("reuse_len", reuse_len, 1), ("num_shards", num_shards, 1),
                             ("seed", seed, 0)):
        check_int(name, value, low)
    if reuse_len > seq_len - 5:
        raise UserError(f"--reuse-len ({reuse_len}) must be <= --seq-len - 5 ({seq_len - 5}): A and B need at "
                        "least one token each besides <sep> <sep> <cls>")


# ----------------------------------------------------------------------------------------------------
# Step 1: every input file -> its token chunk


def _infer_lower_case(tokenizer):
    """A model is taken as uncased when no piece of its vocabulary holds an upper-case letter."""
    pieces = tokenizer.id_to_piece(tf.range(tokenizer.vocab_size)).numpy()
    return not any(p.decode("utf-8") != p.decode("utf-8").lower() for p in pieces[9:])


def load_tokenizer(files, spm_model, lower_case=None):
    """The records' tokenizer from a SentencePiece model file, checked for XLNet's special ids; `lower_case`
    None: uncased iff no vocabulary piece has an upper-case letter."""
    from xlnet_tf.tokenization import XLNetTokenizer

    if not files.exists(spm_model):
        raise UserError(f"SentencePiece model not found: {spm_model}")
    with files.open(spm_model, "rb") as f:
        model_bytes = f.read()
    try:
        tokenizer = XLNetTokenizer.from_bytes(model_bytes, lower_case=bool(lower_case))
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
        tokenizer = XLNetTokenizer.from_bytes(model_bytes, lower_case=_infer_lower_case(tokenizer))
    return tokenizer


def line_encoder(tokenizer):
    """A traced `tokenizer.tokenize` for [N] strings (traced once, reused for every file)."""
    return tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)


def chunk_path(files, tokens_dir, index):
    """Token chunk of input file `index`."""
    return files.join(tokens_dir, f"{index:06d}.tokens")


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
    """Reads one input file line by line and writes its token chunk (int32 `id << 1 | parity`), counting what
    it saw. The parity starts as if the file were the first; `_Stream` aligns the files' parities.

    Pending entries are (text index or -1 for <eod>, whether it begins a sentence); a long line is several
    text entries of which only the first begins its sentence, and a flush may fall inside such a line.
    """

    def __init__(self, encode, out, skip_bad_lines, on_bytes):
        self.encode, self.out, self.skip_bad_lines, self.on_bytes = encode, out, skip_bad_lines, on_bytes
        self.parity, self.open = 1, False  # parity of the last sentence; whether it has tokens yet
        self.first_parity = None
        self.tokens = self.documents = self.lines = self.input_lines = self.skipped_lines = 0
        self.texts, self.entries, self.pending_bytes, self.read_bytes = [], [], 0, 0

    def run(self, path, lines):
        in_document = False
        for number, raw in enumerate(lines, start=1):
            self.input_lines += 1
            self.read_bytes += len(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                if not self.skip_bad_lines:
                    raise UserError(
                        f"{path}:{number}: line is not valid UTF-8 ({error.reason} at byte {error.start}); fix the "
                        "file", SKIP_BAD_LINES) from None
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
            self.lines += 1
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

    def flush(self):
        """Tokenizes the pending texts and appends them, with the pending <eod>s, to the chunk."""
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
            parity = np.repeat(parity, sizes)
            if ids.size:
                self.first_parity = int(parity[0]) if self.first_parity is None else self.first_parity
                self.out.write(((ids << 1) | parity).astype("<i4").tobytes())
                self.tokens += ids.size
        if self.on_bytes is not None:
            self.on_bytes(self.read_bytes)
        self.texts, self.entries, self.pending_bytes, self.read_bytes = [], [], 0, 0


def tokenize_file(files, encode, path, chunk, skip_bad_lines=False, on_bytes=None) -> dict:
    """Tokenizes input file `path` into the token chunk `chunk` (written atomically).

    Args:
      files: `TensorFlowFiles` or the pipelines' Beam files.
      encode: `line_encoder(tokenizer)`.
      skip_bad_lines: skip (and count) lines that are not UTF-8 instead of raising UserError naming the line.
      on_bytes: called with the number of input bytes read since its last call (progress).
    Returns:
      {path, chunk, tokens, documents, lines, input_lines, skipped_lines, first_parity, last_parity}.
    """
    def write(temporary):
        with files.open(path, "rb") as lines, files.open(temporary, "wb") as out:
            reader.out = out
            reader.run(path, lines)

    reader = _Tokenizing(encode, None, skip_bad_lines, on_bytes)
    files.write_atomically(chunk, write)
    if reader.lines == 0:
        files.remove(chunk)
        if reader.skipped_lines:
            raise UserError(f"input file has no usable text (all {reader.skipped_lines} non-empty lines were "
                            f"skipped as invalid UTF-8): {path}")
        raise UserError(f"input file is empty (no text): {path}")
    return {"path": path, "chunk": chunk, "tokens": reader.tokens, "documents": reader.documents,
            "lines": reader.lines, "input_lines": reader.input_lines, "skipped_lines": reader.skipped_lines,
            "first_parity": reader.first_parity, "last_parity": reader.parity}


# ----------------------------------------------------------------------------------------------------
# Step 2: the chunks, in input order, as one token stream -> records -> shards


class _Stream:
    """Random access to the token stream (the chunks one after another), forward or reversed: `read(lo, hi)`
    -> (ids, parity) of positions [lo, hi) in this direction, as int64 / int8 arrays.

    Each chunk's parity is flipped where needed so that it changes where a file starts (a file's first token
    begins a sentence, its last is <eod>): the stream's sentence boundaries are those of one reader over all
    files."""

    _OPEN_FILES = 16

    def __init__(self, files, chunks, reverse):
        self.files, self.paths, self.reverse = files, [c["chunk"] for c in chunks], reverse
        sizes = np.array([c["tokens"] for c in chunks], np.int64)
        self.starts = np.concatenate([[0], np.cumsum(sizes)])
        self.size = int(self.starts[-1])
        self.flips, last = [], None
        for c in chunks:
            flip = 0 if last is None else c["first_parity"] ^ (1 - last)
            self.flips.append(flip)
            last = c["last_parity"] ^ flip
        self.handles = {}  # chunk index -> open file, oldest first

    def _handle(self, index):
        handle = self.handles.pop(index, None)
        if handle is None:
            if len(self.handles) >= self._OPEN_FILES:
                self.handles.pop(next(iter(self.handles))).close()
            handle = self.files.open_random(self.paths[index])
        self.handles[index] = handle
        return handle

    def _forward(self, lo, hi):
        pieces = []
        index = int(np.searchsorted(self.starts, lo, side="right")) - 1  # the chunk holding lo
        while lo < hi:
            begin, end = self.starts[index], self.starts[index + 1]
            stop = min(hi, end)
            handle = self._handle(index)
            handle.seek(4 * int(lo - begin))
            packed = np.frombuffer(handle.read(4 * int(stop - lo)), "<i4").astype(np.int64)
            pieces.append(packed ^ self.flips[index])
            lo, index = stop, index + 1
        return np.concatenate(pieces) if pieces else np.zeros([0], np.int64)

    def read(self, lo, hi):
        packed = self._forward(self.size - hi, self.size - lo) if self.reverse else self._forward(lo, hi)
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
        for handle in self.handles.values():
            handle.close()
        self.handles = {}


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


def _record_rng(seed, backward, index):
    """The random choices of one record: a generator of (seed, direction, record), so that any worker can
    write any record and get the same one."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, int(backward), index])))


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
    })).SerializeToString(deterministic=True)  # map keys sorted: the same bytes in every process


def count_records(chunks, seq_len, reuse_len, num_shards):
    """Records of the stream of `chunks` (i + seq_len <= tokens for each start i = k * reuse_len); UserError
    when there is none or fewer than shards."""
    num_tokens = sum(c["tokens"] for c in chunks)
    num_records = (num_tokens - seq_len) // reuse_len + 1 if num_tokens >= seq_len else 0
    if num_records < 1:
        raise UserError(f"the corpus is too short: {num_tokens} tokens, but one record needs --seq-len {seq_len} "
                        f"tokens ({', '.join(c['path'] for c in chunks)})")
    if num_shards > num_records:
        raise UserError(f"--num-shards {num_shards} is more than the {num_records} records")
    return num_records


def write_shard(files, chunks, output_dir, shard, num_shards, num_records, seq_len, reuse_len, seed, backward,
                on_record=None) -> dict:
    """Writes shard `shard` of one direction: records [shard * n // N, (shard + 1) * n // N) of the stream of
    `chunks` (in input order; reversed for `backward`), atomically. Returns {file, num_records, is_next}
    (is_next: positive records)."""
    lo, hi = shard * num_records // num_shards, (shard + 1) * num_records // num_shards
    name = shard_name(shard, num_shards, backward)
    stream = _Stream(files, chunks, reverse=backward)
    positives = 0

    def records():
        nonlocal positives
        for index in range(lo, hi):
            ids, segments, is_next = _record(stream, index, seq_len, reuse_len, _record_rng(seed, backward, index))
            positives += is_next
            yield _example(ids, segments, is_next)
            if on_record is not None:
                on_record()

    try:
        files.write_atomically(files.join(output_dir, name),
                               lambda temporary: files.write_records(temporary, records()))
    finally:
        stream.close()
    return {"file": name, "num_records": hi - lo, "is_next": positives}


def build_metadata(chunks, shards, bwd_shards, *, seq_len, reuse_len, num_shards, seed, bi_data, tokenizer_info):
    """metadata.json's content from the chunks' counts and the shards' results (each direction's shards in
    order); `tokenizer_info` = {vocab_size, spm_model, lower_case}."""
    num_tokens = sum(c["tokens"] for c in chunks)
    num_records = sum(s["num_records"] for s in shards)
    return dict(
        tokenizer_info,
        format_version=FORMAT_VERSION, seq_len=seq_len, reuse_len=reuse_len, bi_data=bool(bi_data),
        num_records=num_records, num_shards=num_shards,
        shards=[{"file": s["file"], "num_records": s["num_records"]} for s in shards],
        bwd_shards=[{"file": s["file"], "num_records": s["num_records"]} for s in bwd_shards],
        is_next_records=sum(s["is_next"] for s in shards),
        documents=sum(c["documents"] for c in chunks), lines=sum(c["lines"] for c in chunks),
        input_lines=sum(c["input_lines"] for c in chunks), skipped_lines=sum(c["skipped_lines"] for c in chunks),
        tokens=num_tokens, unused_tail_tokens=num_tokens - ((num_records - 1) * reuse_len + seq_len),
        seed=seed, input_files=[c["path"] for c in chunks],
    )


def tokenizer_info(tokenizer, spm_model):
    """metadata.json's tokenizer fields: `spm_model` is the copy inside the data directory (relative), and
    `spm_model_source` the file it was copied from."""
    return {"vocab_size": tokenizer.vocab_size, "spm_model": SPM_FILE, "spm_model_source": spm_model,
            "lower_case": tokenizer.lower_case}


def summary_line(metadata, output_dir):
    """The one-line report of a finished `create-pretraining-data`."""
    n = metadata["num_records"]
    kinds = "forward + backward records each" if metadata["bi_data"] else "records"
    return (f"create-pretraining-data: {metadata['documents']} documents, {metadata['lines']} lines, "
            f"{metadata['tokens']} tokens -> {n} {kinds}, is_next {metadata['is_next_records']}/{n}, in "
            f"{metadata['num_shards']} shard(s) under {output_dir}; {metadata['skipped_lines']} bad lines skipped; "
            f"{metadata['unused_tail_tokens']} tail tokens unused")


def tokens_dir(files, output_dir):
    """The temporary folder of the token chunks (removed when the records are written)."""
    return files.join(output_dir, _TOKENS_DIR)


def prepare_output_dir(files, output_dir):
    """Creates `output_dir` and removes a stale metadata.json (none may describe a half-written directory)."""
    files.makedirs(output_dir)
    metadata_path = files.join(output_dir, METADATA_FILE)
    if files.exists(metadata_path):
        files.remove(metadata_path)
    files.remove_tree(tokens_dir(files, output_dir))
    files.makedirs(tokens_dir(files, output_dir))


def write_spm_copy(files, output_dir, model_bytes):
    """The records' SentencePiece model as `SPM_FILE` inside the data directory, which metadata.json names by
    that relative path: the directory stays whole when it is copied elsewhere (a workstation's data to a
    bucket)."""
    def write(temporary):
        with files.open(temporary, "wb") as f:
            f.write(model_bytes)

    files.write_atomically(files.join(output_dir, SPM_FILE), write)


def create_pretraining_data(input_files, spm_model, output_dir, seq_len=512, reuse_len=256, num_shards=1, seed=0,
                            bi_data=False, lower_case=None, skip_bad_lines=False, progress=True) -> dict:
    """Tokenizes text files and writes XLNet pretraining records in this process (see the module docstring;
    `xlnet_tf.pipelines.pretraining_data` runs the same steps as a Beam pipeline).

    Args:
      input_files: paths or globs (any filesystem TensorFlow reads): UTF-8 text, one sentence per line, blank
        lines between documents.
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

    check_settings(seq_len, reuse_len, num_shards, seed)
    files = TensorFlowFiles()
    paths = [absolute_path(p) for p in expand_inputs(files, input_files)]
    spm_model = absolute_path(os.fspath(spm_model))
    tokenizer = load_tokenizer(files, spm_model, lower_case)
    output_dir = os.fspath(output_dir)
    prepare_output_dir(files, output_dir)
    write_spm_copy(files, output_dir, tokenizer.model_bytes)
    chunks_dir = tokens_dir(files, output_dir)
    try:
        encode = line_encoder(tokenizer)
        chunks = []
        with tqdm(total=sum(files.size(p) for p in paths), unit="B", unit_scale=True, desc="tokenizing",
                  disable=not progress) as bar:
            for index, path in enumerate(paths):
                chunks.append(tokenize_file(files, encode, path, chunk_path(files, chunks_dir, index),
                                            skip_bad_lines, bar.update))
        num_records = count_records(chunks, seq_len, reuse_len, num_shards)
        directions = (False, True) if bi_data else (False,)
        written = {False: [], True: []}
        with tqdm(total=num_records * len(directions), unit="rec", desc="writing records",
                  disable=not progress) as bar:
            for backward in directions:
                for shard in range(num_shards):
                    written[backward].append(write_shard(files, chunks, output_dir, shard, num_shards, num_records,
                                                         seq_len, reuse_len, seed, backward,
                                                         on_record=lambda: bar.update(1)))
    finally:
        files.remove_tree(chunks_dir)

    metadata = build_metadata(
        chunks, written[False], written[True], seq_len=seq_len, reuse_len=reuse_len, num_shards=num_shards,
        seed=seed, bi_data=bi_data,
        tokenizer_info=tokenizer_info(tokenizer, spm_model))
    files.write_json(files.join(output_dir, METADATA_FILE), metadata)
    print(summary_line(metadata, output_dir))
    return dict(metadata, output_dir=output_dir)
