"""Request logs: TensorFlow Serving's per-model `logging_config`, with a collector that writes TFRecord files.

A model's entry in `--model_config_file` may carry

    logging_config {
      sampling_config { sampling_rate: 0.1 }
      log_collector_config { type: "tfrecord" filename_prefix: "/var/log/tfs/sentiment" }
    }

Each finished request to that model is then logged with probability `sampling_rate` (0 or unset: none, 1: all)
as a `tensorflow.serving.PredictionLog` (predict_log / classify_log / regress_log / multi_inference_log: the
request and the response, REST requests as the gRPC protos TensorFlow Serving turns them into) whose
`log_metadata` holds the model spec (name, version served, signature), the sampling config and the
saved_model_tags. Records go to TFRecord files `PREFIX-<UTC YYYYmmddTHHMMSSZ>-<run id>-<seq>.tfrecord` (local,
gs://, ram://: anything tf.io writes), a file being closed and the next begun past
`request_log_max_file_bytes` or `request_log_max_file_seconds` (ServerOptions; flags --request-log-max-file-bytes
and --request-log-max-file-seconds). The run id (8 hex digits) tells two servers writing one prefix apart; within
a run the names sort in writing order.

Logging never slows or fails a request: a request hands its record to a bounded queue (`request_log_queue_size`
records, `request_log_queue_bytes` bytes) drained by one writer thread; a record that does not fit is dropped.
A writer that fails (an unwritable prefix, a full store) drops the records it cannot write, warns at most every
WARN_EVERY_S seconds and tries again after RETRY_S. `stop()` (the server's stop, SIGTERM included) writes what is
queued and closes the files. Records are counted per model in `:tensorflow:serving:request_log_count`
(monitoring.REQUEST_LOG_COUNT, TensorFlow Serving's name and labels: model_name, status_code): OK once its file
has been flushed or closed, RESOURCE_EXHAUSTED when the queue was full, UNAVAILABLE when the server was
stopping, else the failed write's error code (PERMISSION_DENIED, NOT_FOUND, ..., also for the records dropped
while the prefix rests; INTERNAL when the record could not be built). Local files are flushed whenever the
queue runs empty; remote ones only when they are closed (a flush re-uploads a whole object), so their records
count OK at rotation or stop.

The API for front ends (gRPC and REST here; any other, such as an Open Inference Protocol front end, logs the
same way):

    logger = core.request_log  # or ModelServer.request_log: a RequestLogger
    logger.wants(model_name)   # -> whether the model logs at all (cheap; optional)
    logger.log(model_name, version, signature_name, prediction_log)  # -> whether it was queued

`prediction_log` is a PredictionLog with its log_type set (predict_log for a v2 infer, for example), or a
function of no arguments returning one: it is called only for a sampled request, so a front end whose protos
cost something to build passes a function. `log` draws the sample itself, fills `log_metadata` (the logger owns
the message from then on), never raises and returns at once. Call it once per successful request, after the
response is built. `ServerCore.log` is the same call, doing nothing on a core without a logger.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import logging
import os
import random
import threading
import time

from xlnet_tf import files
from xlnet_tf.errors import UserError

log = logging.getLogger("xlnet_tf.serving")

COLLECTOR_TYPE = "tfrecord"
RETRY_S = 5.0  # after a failed write, records are dropped for this long before the target is tried again
WARN_EVERY_S = 30.0  # at most one warning per prefix in this time
_ERRNO_CODES = {errno.ENOSPC: "RESOURCE_EXHAUSTED", errno.EDQUOT: "RESOURCE_EXHAUSTED",
                errno.EACCES: "PERMISSION_DENIED", errno.EPERM: "PERMISSION_DENIED", errno.EROFS: "PERMISSION_DENIED",
                errno.ENOENT: "NOT_FOUND", errno.ENOTDIR: "FAILED_PRECONDITION"}


@dataclasses.dataclass(frozen=True)
class LoggingSettings:
    """A model's `logging_config`: the sampling rate, the SamplingConfig logged (serialized) and the prefix."""

    sampling_rate: float
    sampling_config: bytes
    filename_prefix: str


def logging_from_proto(config, where):
    """A ModelConfig's `logging_config` -> LoggingSettings (None without one); UserError naming `where` (the model)
    and the field for a collector type other than "tfrecord", no prefix or a rate outside [0, 1]."""
    if not config.HasField("logging_config"):
        return None
    logging_config = config.logging_config
    kind = logging_config.log_collector_config.type
    if kind != COLLECTOR_TYPE:
        raise UserError(f"{where}: logging_config.log_collector_config.type {kind!r}: Cannot find "
                        f"LogCollector::Factory for type: {kind} (xlnet-tf serve has one: \"{COLLECTOR_TYPE}\")")
    prefix = logging_config.log_collector_config.filename_prefix
    if not prefix:
        raise UserError(f"{where}: logging_config.log_collector_config.filename_prefix is required")
    sampling = type(logging_config.sampling_config)()
    sampling.CopyFrom(logging_config.sampling_config)
    for task in sampling.per_task_sampling_configs:  # this server has no dc or task index: rules for all apply
        if not task.dc and not task.HasField("task_index"):
            sampling.sampling_rate = task.sampling_rate
            break
    if not 0.0 <= sampling.sampling_rate <= 1.0:
        raise UserError(f"{where}: logging_config.sampling_config.sampling_rate must be in [0, 1], got "
                        f"{sampling.sampling_rate}")
    return LoggingSettings(sampling.sampling_rate, sampling.SerializeToString(), files.absolute(prefix))


# --- the records --------------------------------------------------------------------------------------------


def prediction_log(kind, request, response):
    """PredictionLog with `kind` (predict_log, classify_log, regress_log, multi_inference_log) of the two protos."""
    from tensorflow_serving.apis import prediction_log_pb2

    entry = prediction_log_pb2.PredictionLog()
    part = getattr(entry, kind)
    part.request.CopyFrom(request)
    part.response.CopyFrom(response)
    return entry


def _model_spec(spec, name, version, label, signature_name):
    spec.name = name
    if version is not None:
        spec.version.value = version
    elif label:
        spec.version_label = label
    if signature_name:
        spec.signature_name = signature_name


def rest_predict_log(name, version, label, signature_name, arrays, served, signature, outputs,
                     tensor_content=False):
    """A REST predict as TensorFlow Serving runs it: the PredictRequest of the tensors it ran (the path's model,
    version or label, the body's signature_name) and the PredictResponse of its outputs. The Open Inference
    Protocol's infer calls (REST and gRPC) are logged the same way."""
    from tensorflow_serving.apis import predict_pb2

    from .tensors import from_ndarray

    request, response = predict_pb2.PredictRequest(), predict_pb2.PredictResponse()
    _model_spec(request.model_spec, name, version, label, signature_name)
    for alias, value in arrays.items():
        request.inputs[alias].CopyFrom(from_ndarray(value, tensor_content=False))
    _model_spec(response.model_spec, name, served, None, signature)
    for alias, value in outputs.items():
        response.outputs[alias].CopyFrom(from_ndarray(value, tensor_content=tensor_content))
    return prediction_log("predict_log", request, response)


def rest_infer_log(verb, name, version, label, signature_name, input_proto, served, signature, result):
    """A REST :classify / :regress as the ClassificationRequest / RegressionRequest (and response) it becomes."""
    from tensorflow_serving.apis import classification_pb2, regression_pb2

    module = classification_pb2 if verb == "classify" else regression_pb2
    prefix = "Classification" if verb == "classify" else "Regression"
    request, response = getattr(module, prefix + "Request")(), getattr(module, prefix + "Response")()
    _model_spec(request.model_spec, name, version, label, signature_name)
    request.input.CopyFrom(input_proto)
    _model_spec(response.model_spec, name, served, None, signature)
    response.result.CopyFrom(result)
    return prediction_log(f"{verb}_log", request, response)


# --- the logger ---------------------------------------------------------------------------------------------


def _status_of(error):
    """The canonical code name a failed write is counted under."""
    code = getattr(error, "error_code", None)  # tf.errors.OpError
    if code is not None:
        from .errors import status_code

        return status_code(code).name
    return _ERRNO_CODES.get(getattr(error, "errno", None), "INTERNAL")


class _Sink:
    """The open TFRecord file of one prefix (used by the writer thread only)."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.writer = self.path = None
        self.opened = 0.0
        self.bytes = 0
        self.pending = collections.Counter()  # records written since the last flush, by model
        self.broken_until = 0.0
        self.failure = "UNAVAILABLE"  # the code of the last failed action: records dropped while resting
        self.dropped_since_warning = 0
        self.warned = -WARN_EVERY_S


class RequestLogger:
    """The server's request logger: which models log (`update(entries)`), sampling, the bounded queue and its one
    writer thread (see the module docstring). `metrics`: a monitoring.Metrics or None; `counts()` holds the same
    figures either way."""

    def __init__(self, options, metrics=None, entries=()):
        self.max_file_bytes = int(options.request_log_max_file_bytes)
        self.max_file_seconds = float(options.request_log_max_file_seconds)
        self.queue_records = int(options.request_log_queue_size)
        self.queue_bytes = int(options.request_log_queue_bytes)
        self.saved_model_tags = tuple(options.saved_model_tags)
        self.metrics = metrics
        self.run_id = os.urandom(4).hex()
        self._settings = {}  # model name -> LoggingSettings
        self._random = random.Random()
        self._queue = collections.deque()  # (model name, prefix, PredictionLog, size)
        self._queued_bytes = 0
        self._cond = threading.Condition()
        self._closing = False
        self._settled = threading.Event()  # set by the writer when the queue is empty and local files flushed
        self._counts = collections.Counter()  # (model name, status code) -> records
        self._thread = None
        self._sinks = {}  # prefix -> _Sink (writer thread)
        self._seq = 0
        self.update(entries)

    def update(self, entries):
        """Logs the models of `entries` (ModelEntry list, their `logging` LoggingSettings) from now on."""
        settings = {entry.name: entry.logging for entry in entries if getattr(entry, "logging", None) is not None}
        self._settings = settings
        if settings and not self._closing:
            with self._cond:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._write_loop, name="request-log", daemon=True)
                    self._thread.start()

    def wants(self, model_name):
        """Whether requests to `model_name` may be logged."""
        settings = self._settings.get(model_name)
        return settings is not None and settings.sampling_rate > 0

    def log(self, model_name, version, signature_name, prediction_log):
        """Samples a request to `model_name` and queues its PredictionLog (or what a function given instead
        returns), its log_metadata filled. Returns whether it was queued; never raises."""
        settings = self._settings.get(model_name)
        if settings is None or not self._random.random() < settings.sampling_rate:
            return False
        try:
            entry = prediction_log() if callable(prediction_log) else prediction_log
            metadata = entry.log_metadata
            metadata.model_spec.name = model_name
            if version is not None:
                metadata.model_spec.version.value = int(version)
            metadata.model_spec.signature_name = signature_name or ""
            metadata.sampling_config.ParseFromString(settings.sampling_config)
            metadata.saved_model_tags[:] = self.saved_model_tags
            metadata.timestamp_secs = int(time.time())
            size = entry.ByteSize()
        except Exception:  # noqa: BLE001 - a record that cannot be built costs the request nothing
            log.warning("request log of %s: the record could not be built", model_name, exc_info=True)
            self._count(model_name, "INTERNAL")
            return False
        with self._cond:
            if self._closing:
                status = "UNAVAILABLE"
            elif len(self._queue) >= self.queue_records or self._queued_bytes + size > self.queue_bytes:
                status = "RESOURCE_EXHAUSTED"
            else:
                self._queue.append((model_name, settings.filename_prefix, entry, size))
                self._queued_bytes += size
                self._settled.clear()
                self._cond.notify()
                return True
        self._count(model_name, status)
        return False

    def queued(self):
        """Records waiting for the writer."""
        with self._cond:
            return len(self._queue)

    def settle(self, timeout=None):
        """Waits until every queued record has been written and local files flushed; returns whether they have."""
        return self._thread is None or self._settled.wait(timeout)

    def counts(self):
        """{(model name, status code): records}: OK written, anything else dropped."""
        with self._cond:
            return dict(self._counts)

    def stop(self, timeout=None):
        """Writes what is queued, closes the files and ends the writer thread (at most `timeout` s)."""
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("request logs: %d records still queued %ss after stop began", self.queued(), timeout)
        written = sum(n for (_, status), n in self.counts().items() if status == "OK")
        dropped = sum(n for (_, status), n in self.counts().items() if status != "OK")
        if written or dropped:
            log.info("request logs: %d records written, %d dropped", written, dropped)

    def _count(self, model_name, status, records=1):
        with self._cond:
            self._counts[(model_name, status)] += records
        if self.metrics is not None:
            self.metrics.request_log(model_name, status, records)

    # -- the writer thread ----------------------------------------------------------------------------------

    def _write_loop(self):
        wait = min(1.0, max(0.05, self.max_file_seconds / 4))  # how often idle files are looked at
        while True:
            with self._cond:
                item = self._queue.popleft() if self._queue else None
                if item is not None:
                    self._queued_bytes -= item[3]
                closing = self._closing and item is None
            if item is not None:
                self._write(*item)
                continue
            self._idle(closing)
            with self._cond:
                if closing:
                    self._settled.set()
                    return
                if not self._queue:
                    self._settled.set()
                    if not self._closing:
                        self._cond.wait(wait)

    def _idle(self, closing):
        """The queue is empty: flush local files, close old ones (all of them when closing)."""
        now = time.monotonic()
        for sink in list(self._sinks.values()):
            if sink.writer is None:
                continue
            if closing or now - sink.opened >= self.max_file_seconds:
                self._close(sink)
            elif not files.is_remote(sink.prefix) and sink.pending:
                self._guard(sink, sink.writer.flush, commits=True)

    def _write(self, model_name, prefix, entry, size):
        sink = self._sinks.get(prefix)
        if sink is None:
            sink = self._sinks[prefix] = _Sink(prefix)
        now = time.monotonic()
        if sink.writer is not None and now - sink.opened >= self.max_file_seconds:
            self._close(sink)
        if sink.writer is None:
            if now < sink.broken_until:
                self._drop(sink, model_name, sink.failure, None)
                return
            if not self._guard(sink, lambda: self._open(sink), model_name):
                return
        data = entry.SerializeToString()
        if not self._guard(sink, lambda: sink.writer.write(data), model_name):
            return
        sink.pending[model_name] += 1
        sink.bytes += len(data) + 16  # TFRecord framing: length, its CRC, the data, its CRC
        if sink.bytes >= self.max_file_bytes:
            self._close(sink)

    def _open(self, sink):
        import tensorflow as tf

        self._seq += 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = f"{sink.prefix}-{stamp}-{self.run_id}-{self._seq:06d}.tfrecord"
        files.makedirs_for(path)
        sink.writer, sink.path, sink.opened, sink.bytes = tf.io.TFRecordWriter(path), path, time.monotonic(), 0

    def _close(self, sink):
        writer, sink.writer = sink.writer, None
        self._guard(sink, writer.close, commits=True)

    def _guard(self, sink, action, model_name=None, commits=False):
        """Runs a file action (`commits`: a flush or a close, after which the file's records count as written). On
        failure the file is given up: its unflushed records (and `model_name`'s record being written) are
        dropped, counted under the error's code, and the prefix rests for RETRY_S."""
        try:
            action()
        except Exception as error:  # noqa: BLE001 - a failing target must not stop the writer
            lost, sink.pending = sink.pending, collections.Counter()
            if model_name is not None:
                lost[model_name] += 1
            writer, sink.writer = sink.writer, None
            if writer is not None:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001 - already failing
                    pass
            sink.broken_until, sink.failure = time.monotonic() + RETRY_S, _status_of(error)
            for name, records in lost.items():
                self._drop(sink, name, sink.failure, error, records)
            return False
        if commits:
            for name, records in sink.pending.items():
                self._count(name, "OK", records)
            sink.pending = collections.Counter()
        return True

    def _drop(self, sink, model_name, status, error, records=1):
        self._count(model_name, status, records)
        sink.dropped_since_warning += records
        now = time.monotonic()
        if now - sink.warned >= WARN_EVERY_S:
            log.warning("request log %s: %d records dropped (%s%s); the server keeps serving", sink.prefix,
                        sink.dropped_since_warning, status, f": {error}" if error is not None else "")
            sink.warned, sink.dropped_since_warning = now, 0
