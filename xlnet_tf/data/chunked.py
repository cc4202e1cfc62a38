"""Whole files through the graph functions: tokenization in chunks of texts, and the feature builders of
``xlnet_tf.data.graph_features`` traced once and run over a file in chunks of examples. Shared by the
feature builders of every task (``xlnet_tf.data.finetuning``, ``xlnet_tf.data.token_classification``)."""

import functools
import weakref

import numpy as np
import tensorflow as tf

from xlnet_tf.data import graph_features as gf

CHUNK = 1024  # examples per builder call (bounds the builders' intermediate tensors)
_TOKENIZE_CHUNK = 2048  # texts per tokenizer call
_TOKENIZE_FNS = weakref.WeakKeyDictionary()


def _tokenize_fns(tokenizer):
    """Cached ``tf.function``s: string [B] -> ragged ids; and ids with code point offsets into the text."""
    fns = _TOKENIZE_FNS.get(tokenizer)
    if fns is None:
        ref = weakref.ref(tokenizer)  # the cached functions must not keep their tokenizer alive
        spec = [tf.TensorSpec([None], tf.string)]

        def with_offsets(strings):
            ids, starts, ends = ref().tokenize_with_offsets(strings)
            return ids, gf.byte_to_char_offsets(strings, starts), gf.byte_to_char_offsets(strings, ends)

        fns = (tf.function(lambda strings: ref().tokenize(strings), input_signature=spec, autograph=False),
               tf.function(with_offsets, input_signature=spec, autograph=False))
        _TOKENIZE_FNS[tokenizer] = fns
    return fns


def as_strings(texts):
    if isinstance(texts, tf.Tensor):
        return texts
    return tf.constant([t.encode("utf-8", "surrogatepass") for t in texts], tf.string, shape=[len(texts)])


def _tokenize_in_chunks(fn, texts):
    """``fn`` (one of ``_tokenize_fns``) over ``texts`` in chunks of ``_TOKENIZE_CHUNK``, its ragged outputs
    concatenated (no texts: one call on the empty batch, which gives empty rows)."""
    strings = as_strings(texts)
    n = int(strings.shape[0])
    parts = [fn(strings[i:i + _TOKENIZE_CHUNK]) for i in range(0, max(n, 1), _TOKENIZE_CHUNK)]
    return tf.nest.map_structure(lambda *chunks: tf.concat(chunks, 0), *parts) if len(parts) > 1 else parts[0]


def token_ids(tokenizer, texts):
    """Token ids of ``texts`` (a list of ``str`` or a string ``[N]`` tensor): ragged int32 ``[N, None]``."""
    return _tokenize_in_chunks(_tokenize_fns(tokenizer)[0], texts)


def tokens_with_char_offsets(tokenizer, texts):
    """``(ids, starts, ends)`` ragged ``[N, None]``: ``text[starts[k]:ends[k]]`` (Python ``str`` indices, code
    points) is token ``k``'s source text."""
    return _tokenize_in_chunks(_tokenize_fns(tokenizer)[1], texts)


def traced(builder, **static):
    """``builder`` with its static (Python) arguments bound, as a cached ``tf.function`` that accepts chunks of
    any size (one trace serves every chunk: about 8x faster than running the ops eagerly)."""
    return _traced_cached(builder, tuple(sorted(static.items())))


@functools.lru_cache(maxsize=None)
def _traced_cached(builder, static):
    return one_trace_per_structure(tf.function(functools.partial(builder, **dict(static)), autograph=False),
                                   any_count)


def one_trace_per_structure(function, relax):
    """`function` (a ``tf.function``) as a plain function that traces it once per structure of its arguments: with
    the specs ``relax(argument)`` gives (the axes that vary from call to call unknown), before the first call of
    each structure, so that every later call of that structure runs the same trace (``reduce_retracing`` would
    trace the first call's exact shapes, then again relaxed: two or three traces of a large graph)."""
    structures = set()

    def call(*args, **kwargs):
        args_spec, kwargs_spec = tf.nest.map_structure(relax, (args, kwargs))
        key = repr((args_spec, kwargs_spec))
        if key not in structures:
            function.get_concrete_function(*args_spec, **kwargs_spec)
            structures.add(key)
        return function(*args, **kwargs)

    return call


def any_count(value, unknown_axes=(0,)):
    """The type spec of a tensor, ragged tensor or numpy argument with `unknown_axes` (default: the first, the
    examples) unknown; other values (and scalars) as they are."""
    if not isinstance(value, (tf.Tensor, tf.RaggedTensor, np.ndarray)) or (
            isinstance(value, np.ndarray) and value.dtype == object):  # Python objects: tf.function's own rules
        return value
    shape = tf.TensorShape(value.shape)
    if shape.rank in (None, 0):
        return value
    shape = tf.TensorShape([None if axis in unknown_axes or axis - shape.rank in unknown_axes else size
                            for axis, size in enumerate(shape.as_list())])
    if isinstance(value, tf.RaggedTensor):
        return tf.RaggedTensorSpec(shape, value.dtype, value.ragged_rank, value.row_splits.dtype)
    return tf.TensorSpec(shape, tf.as_dtype(value.dtype))


def build_in_chunks(n, build, chunk=CHUNK):
    """``build(lo, hi)`` -> dict of tensors over examples ``lo:hi``; numpy arrays concatenated over chunks."""
    out = {}
    for lo in range(0, max(n, 1), chunk):
        for key, value in build(lo, min(lo + chunk, n)).items():
            out.setdefault(key, []).append(np.asarray(value))
    return {key: np.concatenate(parts) for key, parts in out.items()}
