"""Which ops an exported SavedModel may use: the ones TensorFlow Serving's model server links.

TF Serving links every core TensorFlow kernel plus TF Text's ``ops_lib`` (and TF Decision Forests); it
cannot run ops that need a Python interpreter (``PyFunc``, ``EagerPyFunc``) or ops from libraries it does
not link. Older TF Serving builds bundle fewer TF Text ops than a current ``tensorflow-text`` wheel
(``RoundRobinTrimmer`` and other trimmers, fast tokenizers, ...), so the allowlist is deliberately narrow:

* ``CORE_OPS``: exactly the core TensorFlow ops (TF 2.21) the exports of this package contain -- every
  task, pair and single inputs, cased and uncased tokenizers, the three feed-forward activations, the
  reusable encoder -- grouped by what they do. A new op means a code change: check that it is a core op
  (not ``PyFunc`` / ``EagerPyFunc`` or a library op), then add it here.
* ``TF_TEXT_OPS``: the TF Text ops the tokenizer uses -- SentencePiece (model resource, tokenize with
  offsets, piece <-> id, detokenize) and ``NormalizeUTF8`` (NFKD) -- all long part of TF Serving.

``saved_model_ops(path)`` lists the ops of ``path/saved_model.pb`` (the graphs' nodes AND every function
of their function libraries, so nothing hides inside a ``tf.function``); ``disallowed_ops(path)`` the
ones outside ``ALLOWED_OPS``. ``export_model`` refuses to publish an export for which it is not empty.
``path`` may be a local path or a URL (gs://...): it is read through ``xlnet_tf.files``.
"""

import os

TF_TEXT_OPS = frozenset({
    "SentencepieceOp",  # the SentencePiece model resource (model proto embedded as an attribute)
    "SentencepieceTokenizeOp",
    "SentencepieceTokenizeWithOffsetsOp",
    "SentencepieceStringToIdOp",
    "SentencepieceIdToStringOp",
    "SentencepieceDetokenizeOp",
    "NormalizeUTF8",
    "NormalizeUTF8WithOffsetsMap",
})

CORE_OPS = frozenset({
    # graph plumbing, function calls, checkpoint restore / save
    "Const", "Identity", "IdentityN", "NoOp", "Placeholder", "PartitionedCall", "StatefulPartitionedCall", "If",
    "Assert", "EnsureShape", "StopGradient", "SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename",
    "StringJoin", "StaticRegexFullMatch", "Select", "SelectV2",
    # control flow: the segment loop of long-document models (tf.while_loop carrying the memory); the window
    # loop of token classification (a while loop without stateful ops is a StatelessWhile, core as While)
    "While", "StatelessWhile",
    # variables
    "VarHandleOp", "ReadVariableOp", "AssignVariableOp", "DisableCopyOnRead",
    # shapes, layout, indexing
    "Shape", "Size", "Reshape", "ExpandDims", "Squeeze", "Pack", "Unpack", "ConcatV2", "StridedSlice", "Slice",
    "SplitV", "Tile", "Transpose", "Fill", "ZerosLike", "OnesLike", "BroadcastTo", "Range", "Cast", "GatherV2",
    "GatherNd", "TensorScatterUpdate", "ScatterNd", "Where", "Cumsum", "Roll", "DenseBincount", "LowerBound",
    "UpperBound",
    # math (the encoder and heads; Relu / Erf for the "relu" / "gelu_exact" feed-forward activations)
    "Abs", "AddV2", "Sub", "Mul", "RealDiv", "FloorDiv", "FloorMod", "Maximum", "Minimum", "Neg", "Pow",
    "Rsqrt", "SquaredDifference", "Sin", "Cos", "Tanh", "Sigmoid", "Relu", "Erf", "Softmax", "LogSoftmax",
    "MatMul", "BatchMatMulV2", "Einsum", "BiasAdd", "Sum", "Prod", "Max", "Mean", "All", "Any", "ArgMax", "TopKV2",
    "UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentSum",
    "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr",
    "LogicalNot",
    # ragged tensors
    "RaggedGather", "RaggedRange",
    # strings and Unicode (the tokenizer's preprocessing, answers, RACE's cloze questions)
    "Substr", "StringLength", "StringSplitV2", "UnsortedSegmentJoin", "StaticRegexReplace", "UnicodeDecode",
    "UnicodeDecodeWithOffsets", "UnicodeEncode",
    # tf.Example parsing (the classification / regression signatures of TensorFlow Serving's Classify / Regress)
    "ParseExampleV2",
    # text generation (language models' generate signature): one uniform number per row and step for sampling,
    # and the all-greedy branch (an If without stateful ops is a StatelessIf, core as If)
    "StatelessRandomGetKeyCounter", "StatelessRandomUniformV2", "StatelessIf",
})

ALLOWED_OPS = CORE_OPS | TF_TEXT_OPS


def _read_saved_model(path):
    from tensorflow.core.protobuf import saved_model_pb2

    from xlnet_tf import files

    path = os.fspath(path)  # a local path or a URL (gs://...): read through the file layer
    pb = files.join(path, "saved_model.pb") if files.isdir(path) else path
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(files.read_bytes(pb))
    return saved


def saved_model_ops(path):
    """Every op type a SavedModel (directory or ``saved_model.pb``) uses, as a ``{op: count}`` dict.

    Walks each meta graph's ``graph_def.node`` and every ``FunctionDef`` of its function library; nodes
    that call a library function by name are function calls, not ops, and are left out.
    """
    counts = {}
    for meta in _read_saved_model(path).meta_graphs:
        library = meta.graph_def.library
        functions = {f.signature.name for f in library.function}
        nodes = list(meta.graph_def.node)
        for function in library.function:
            nodes.extend(function.node_def)
        for node in nodes:
            if node.op not in functions:
                counts[node.op] = counts.get(node.op, 0) + 1
    return counts


def disallowed_ops(path, allowed=ALLOWED_OPS):
    """The ops of the SavedModel at ``path`` that are not in ``allowed`` (a sorted list; empty = servable)."""
    return sorted(set(saved_model_ops(path)) - set(allowed))


def xla_functions(path):
    """Names of the SavedModel's functions marked for XLA compilation (``_XlaMustCompile``)."""
    names = []
    for meta in _read_saved_model(path).meta_graphs:
        for function in meta.graph_def.library.function:
            attr = function.attr.get("_XlaMustCompile")
            if attr is not None and attr.b:
                names.append(function.signature.name)
        for node in meta.graph_def.node:
            attr = node.attr.get("_XlaMustCompile")
            if attr is not None and attr.b:
                names.append(node.name)
    return names
