"""One loaded model version: a SavedModel in a TF1 Session, run SignatureDef by SignatureDef.

This is what TensorFlow Serving's C++ server does with a SavedModel bundle: load the MetaGraphDef tagged
"serve" into a Session on its own graph (`tf.compat.v1.saved_model.loader.load`, which restores the
variables and runs the init op, e.g. vocabulary tables), then feed and fetch tensors by the names the
SignatureDef gives. `tensorflow_text` is imported first so its ops are registered.

Request checks (before anything runs): the gate's (gate.checked_inputs: names, dtypes, UTF-8 text, shapes
against the SignatureDef, the request's elements and bytes), then output_filter names exist and are not
repeated. What the graph checks beyond them comes back as the request's status; a run in pieces (below) says
which rows of the request the piece that failed held.

Deadlines: a run with a deadline whose inputs share dim 0 and whose outputs all have a known size beyond dim
0 (so that parts concatenate) runs in pieces of rows that each take about `PIECE_SECONDS` (from this
signature's time per row on its earlier runs, warmup included; a request shorter than that is one piece), and is
abandoned between pieces once the deadline passes: a Session cannot stop a function call of these exports once
it runs (RunOptions.timeout_in_ms is checked between ops, and a SavedModel signature is one op), so this bounds
what an abandoned request keeps using to one piece.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from . import errors, gate, inference
from .deadline import NONE
from .methods import CLASSIFY_METHOD, DEFAULT_SIGNATURE, PREDICT_METHOD, REGRESS_METHOD
from .tensors import shape_of, to_ndarray

log = logging.getLogger("xlnet_tf.serving")

WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"
MAX_WARMUP_RECORDS = 1000  # TensorFlow Serving's WarmupConsts::kMaxNumRecords
PIECE_SECONDS = 0.25  # the time one piece of a long run with a deadline takes (see the module docstring)
FIRST_PIECE_ROWS = 4  # rows of the first piece, before this signature's time per row is known


class Prepared:
    """A checked request: which signature, the input arrays (by alias) and the outputs to fetch."""

    __slots__ = ("signature_name", "inputs", "output_aliases", "batch_size")

    def __init__(self, signature_name, inputs, output_aliases, batch_size):
        self.signature_name = signature_name
        self.inputs = inputs
        self.output_aliases = output_aliases
        self.batch_size = batch_size  # common dim 0 of all inputs, or None (scalars / differing sizes)

    def batch_key(self):
        """Requests with equal keys can be concatenated along dim 0."""
        return (self.signature_name, self.output_aliases,
                tuple((alias, a.dtype.str, a.shape[1:]) for alias, a in sorted(self.inputs.items())))


def _read_export_metadata(path):
    """The version's assets.extra/xlnet_export.json (a dict), or None when it has none or it is not a JSON object
    (a SavedModel from elsewhere: it is served all the same)."""
    from xlnet_tf import files
    from xlnet_tf.errors import UserError

    from .methods import EXPORT_METADATA_FILE

    where = files.join(path, EXPORT_METADATA_FILE)
    if not files.exists(where):
        return None
    try:
        value = files.read_json(where)
    except UserError as error:
        log.warning("%s; GetModelMetadata will not offer xlnet_export", error)
        return None
    return value if isinstance(value, dict) else None


class Servable:
    """A SavedModel version loaded in its own graph and Session."""

    def __init__(self, name, version, path, session_config=None, validate_utf8=True, tags=("serve",)):
        self.name = name
        self.version = int(version)
        self.path = str(path)
        self.validate_utf8 = validate_utf8
        self.tags = list(tags)
        self._session_config = session_config
        self.session = None
        self.signatures = {}
        self._callables = {}
        self._row_seconds = {}  # (signature, outputs) -> measured seconds per row (pieces of deadline runs)
        self._lock = threading.Lock()
        self.warmup_requests_run = 0
        self.pieces_run = 0  # pieces of runs with a deadline (see the module docstring)
        self.export_metadata = None  # assets.extra/xlnet_export.json of an xlnet-tf export (a dict), else None

    # -- lifecycle ------------------------------------------------------------------------------------

    def load(self):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 - registers the TF Text ops the graph may use

        graph = tf.Graph()
        session = tf.compat.v1.Session(graph=graph, config=self._session_config)
        try:
            try:
                from tensorflow.python.util import deprecation

                silence = deprecation.silence()
            except (ImportError, AttributeError):  # pragma: no cover - older/newer TF
                import contextlib

                silence = contextlib.nullcontext()
            with silence:
                meta_graph = tf.compat.v1.saved_model.loader.load(session, self.tags, self.path)
        except Exception:
            session.close()
            raise
        self.session = session
        self.signatures = {k: v for k, v in meta_graph.signature_def.items() if not k.startswith("__")}
        if not self.signatures:
            raise ValueError(f"{self.path} has no SignatureDefs")
        self.export_metadata = _read_export_metadata(self.path)
        return self

    def close(self):
        if self.session is not None:
            self.session.close()
            self.session = None
        self._callables.clear()

    # -- requests -------------------------------------------------------------------------------------

    def signature(self, signature_name):
        name = signature_name or DEFAULT_SIGNATURE
        try:
            return name, self.signatures[name]
        except KeyError:
            # TensorFlow Serving's code and wording (predict_util.cc).
            raise errors.failed_precondition(f'Serving signature key "{name}" not found.') from None

    def prepare(self, signature_name, inputs, output_filter=(), limits=gate.DEFAULT_LIMITS) -> Prepared:
        """Checks a request against the SignatureDef and `limits` (gate.checked_inputs) -> Prepared."""
        name, signature = self.signature(signature_name)
        if signature.method_name not in ("", PREDICT_METHOD, CLASSIFY_METHOD, REGRESS_METHOD):
            raise errors.ServingError("INTERNAL", f"signature {name!r} has method_name "
                                      f"{signature.method_name!r}, which Predict cannot run")
        text_inputs = self.validate_utf8 and signature.method_name in ("", PREDICT_METHOD)
        arrays = gate.checked_inputs(name, signature, inputs, limits, text_inputs)
        outputs = tuple(output_filter) if output_filter else tuple(sorted(signature.outputs))
        seen = set()
        for alias in outputs:
            if alias not in signature.outputs:
                raise errors.invalid_argument(
                    f"output tensor alias not found in signature: {alias} Outputs expected to be in the set "
                    f"{{{','.join(sorted(signature.outputs))}}}.")
            if alias in seen:
                raise errors.invalid_argument(f"duplicate output tensor alias: {alias}")
            seen.add(alias)
        sizes = {a.shape[0] if a.ndim else None for a in arrays.values()}
        batch = sizes.pop() if len(sizes) == 1 else None
        return Prepared(name, arrays, outputs, batch)

    def run(self, prepared: Prepared, inputs=None, deadline=NONE):
        """Runs the signature on `inputs` (default: the prepared ones) -> {output alias: ndarray} of the prepared
        outputs; with a `deadline`, in pieces when it can (see the module docstring), DEADLINE_EXCEEDED between
        them."""
        inputs = prepared.inputs if inputs is None else inputs
        aliases = tuple(sorted(inputs))
        key = (prepared.signature_name, aliases)
        function = self._callable(key)
        fetched = sorted(self.signatures[prepared.signature_name].outputs)
        wanted = [fetched.index(alias) for alias in prepared.output_aliases]
        rows = _common_rows(inputs)
        if deadline.at is None or rows is None or rows <= 1 or not self._splittable(prepared):
            values = self._timed(key, function, inputs, aliases, rows)
            return {alias: values[i] for alias, i in zip(prepared.output_aliases, wanted)}
        parts, start, size = [], 0, None
        while start < rows:
            deadline.check(f"a request of {rows} rows ({start} run)")
            seconds = self._row_seconds.get(key)
            wanted_rows = FIRST_PIECE_ROWS if seconds is None else max(1, int(PIECE_SECONDS / max(seconds, 1e-9)))
            size = min(wanted_rows, rows - start, wanted_rows if size is None else 2 * size)  # grows at most 2x
            piece = {a: inputs[a][start:start + size] for a in aliases}
            try:
                parts.append(self._timed(key, function, piece, aliases, size))
            except errors.ServingError as error:  # the graph counts rows from the piece's first
                if size == rows:
                    raise
                raise errors.ServingError(error.code, f"rows {start} to {start + size - 1} of the request of "
                                          f"{rows}: {error.message}") from None
            self.pieces_run += 1
            start += size
        return {alias: parts[0][i] if len(parts) == 1 else np.concatenate([part[i] for part in parts])
                for alias, i in zip(prepared.output_aliases, wanted)}

    def _timed(self, key, function, inputs, aliases, rows):
        """Calls the signature; keeps a running mean of its seconds per row (sizes the pieces of runs with a
        deadline)."""
        began = time.monotonic()
        values = self._call(function, [inputs[a] for a in aliases])
        if rows:
            took = (time.monotonic() - began) / rows
            seconds = self._row_seconds.get(key)
            self._row_seconds[key] = took if seconds is None else 0.5 * (seconds + took)
        return values

    def _callable(self, key):
        """The Session's C++ callable (Session::MakeCallable, what TensorFlow Serving's Session::Run amounts to)
        of signature `key[0]` fed inputs `key[1]`, fetching every output in alias order: one per signature and
        input set, made once (1-2 s of graph optimisation each), whatever outputs requests filter. Python's
        `Session.run` / `make_callable(feed_list=...)` would refuse feeds whose shape differs from the
        placeholder's; the gate has checked shapes against the signature already."""
        function = self._callables.get(key)
        if function is not None:
            return function
        from tensorflow.core.protobuf import config_pb2

        with self._lock:
            if self.session is None:
                raise errors.failed_precondition(f"version {self.version} of {self.name} is unloaded")
            function = self._callables.get(key)
            if function is None:
                inputs, outputs = self.signatures[key[0]].inputs, self.signatures[key[0]].outputs
                options = config_pb2.CallableOptions(feed=[inputs[a].name for a in key[1]],
                                                     fetch=[outputs[a].name for a in sorted(outputs)])
                function = self._callables[key] = self.session._make_callable_from_options(options)
            return function

    def _splittable(self, prepared):
        """Whether the signature's outputs have dim 0 and known sizes beyond it (parts concatenate)."""
        outputs = self.signatures[prepared.signature_name].outputs
        for alias in prepared.output_aliases:
            shape = shape_of(outputs[alias].tensor_shape)
            if not shape or shape[0] >= 0 or any(size < 0 for size in shape[1:]):
                return False
        return True

    @staticmethod
    def _call(function, values):
        import tensorflow as tf

        try:
            return function(*values)
        except tf.errors.OpError as error:
            raise errors.ServingError.from_tf_error(error) from None
        except (ValueError, TypeError) as error:
            raise errors.invalid_argument(str(error)) from None

    # -- warmup ---------------------------------------------------------------------------------------

    def warmup(self, iterations=1):
        """Replays assets.extra/tf_serving_warmup_requests (PredictionLog TFRecords); returns the count.

        Like TensorFlow Serving: more than 1000 records or a failing request fails the load. predict_log,
        classify_log and regress_log records are replayed; others (multi_inference_log, session_run_log) are
        skipped with a warning.
        """
        from xlnet_tf import files

        path = files.join(self.path, WARMUP_FILE)
        if not files.exists(path):  # the version's directory may be a URL (gs://...)
            return 0
        import tensorflow as tf
        from tensorflow_serving.apis import prediction_log_pb2

        count = skipped = 0
        for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
            count += 1
            if count > MAX_WARMUP_RECORDS:
                raise errors.invalid_argument(
                    f"more than {MAX_WARMUP_RECORDS} warmup records in {path}")
            entry = prediction_log_pb2.PredictionLog.FromString(record)
            kind = entry.WhichOneof("log_type")
            if kind == "predict_log":
                request = entry.predict_log.request
                arrays = {alias: to_ndarray(tensor) for alias, tensor in request.inputs.items()}
                prepared = self.prepare(request.model_spec.signature_name, arrays, tuple(request.output_filter))
            elif kind in ("classify_log", "regress_log"):
                request = getattr(entry, kind).request
                name, signature = self.signature(request.model_spec.signature_name)
                method = CLASSIFY_METHOD if kind == "classify_log" else REGRESS_METHOD
                alias, outputs = inference.signature_io(method, name, signature)
                prepared = self.prepare(name, {alias: inference.serialized_examples(request.input)}, outputs)
            else:
                skipped += 1
                continue
            for _ in range(max(1, iterations)):
                self.run(prepared)
                self.warmup_requests_run += 1
        if skipped:
            log.warning("%s version %d: skipped %d warmup records that are not predict_log, classify_log or "
                        "regress_log",
                        self.name, self.version, skipped)
        return self.warmup_requests_run


def _common_rows(inputs):
    """The dim 0 every input shares (None: a scalar, or sizes that differ)."""
    sizes = {a.shape[0] if a.ndim else None for a in inputs.values()}
    return sizes.pop() if len(sizes) == 1 else None
