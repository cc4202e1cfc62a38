"""Prometheus metrics of the server, as TensorFlow Serving's `--monitoring_config_file` exposes them.

`load_monitoring_config(path)` reads a MonitoringConfig text proto (`prometheus_config { enable: true
path: "/monitoring/prometheus/metrics" }`; the path defaults to that one); the REST server then answers
`GET <path>` with `Metrics.exposition()`, Prometheus' text format (version 0.0.4).

Metric names are TensorFlow Serving's:

* `:tensorflow:serving:request_count` (counter; labels model_name, API, entrypoint, status): one per finished
  request. API is predict / classify / regress / multi_inference / get_model_metadata / get_model_status /
  reload_config, or for the Open Inference Protocol v2_infer / v2_model_metadata / v2_model_ready, entrypoint GRPC or REST, status OK or the canonical error code (INVALID_ARGUMENT, ...).
* `:tensorflow:serving:request_latency` (histogram, microseconds; labels model_name, API, entrypoint).
* `:tensorflow:serving:batching_session:processed_batch_size` (histogram; no labels): the rows of each batch
  the batch scheduler runs.
* `:tensorflow:serving:request_log_count` (counter; labels model_name, status_code): request-log records
  (request_log.py), OK once written, any other code when dropped (RESOURCE_EXHAUSTED: the queue was full, ...).
* `:tensorflow:cc:saved_model:load_attempt_count` (counter; labels model_path, status) and
  `:tensorflow:cc:saved_model:load_latency` (counter of microseconds; label model_path): model loads.

The text is written here rather than with `prometheus_client`, whose counters are exposed as `<name>_total`:
TensorFlow Serving's dashboards query `:tensorflow:serving:request_count` itself.
"""

from __future__ import annotations

import threading

from xlnet_tf.errors import UserError

DEFAULT_PATH = "/monitoring/prometheus/metrics"
REQUEST_COUNT = ":tensorflow:serving:request_count"
REQUEST_LATENCY = ":tensorflow:serving:request_latency"
BATCH_SIZE = ":tensorflow:serving:batching_session:processed_batch_size"
REQUEST_LOG_COUNT = ":tensorflow:serving:request_log_count"
LOAD_COUNT = ":tensorflow:cc:saved_model:load_attempt_count"
LOAD_LATENCY = ":tensorflow:cc:saved_model:load_latency"
# TensorFlow Serving's request latency buckets: 10 us * 1.8^k, k = 0..32 (about 10 us to 1.5e9 us).
LATENCY_BUCKETS_US = tuple(10.0 * 1.8**k for k in range(33))
BATCH_BUCKETS = tuple(float(2**k) for k in range(14))
HELP = {
    REQUEST_COUNT: "The total number of requests.",
    REQUEST_LATENCY: "Distribution of wall time (in microseconds) for requests.",
    BATCH_SIZE: "Tracks the batch size distribution on processing.",
    REQUEST_LOG_COUNT: "The total number of requests logged from the model server sliced down by model_name and "
                       "status code.",
    LOAD_COUNT: "The number of times a SavedModel was requested to be loaded.",
    LOAD_LATENCY: "Latency in microseconds for SavedModels that were successfully loaded.",
}


def _declare_monitoring_config():
    """MonitoringConfig as tensorflow_serving/config/monitoring_config.proto declares it (not in the
    tensorflow-serving-api wheel)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="tensorflow_serving/config/monitoring_config.proto",
                                              package="tensorflow.serving", syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto
    prometheus = file.message_type.add(name="PrometheusConfig")
    prometheus.field.add(name="enable", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_BOOL, json_name="enable")
    prometheus.field.add(name="path", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING, json_name="path")
    config = file.message_type.add(name="MonitoringConfig")
    config.field.add(name="prometheus_config", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                     type_name=".tensorflow.serving.PrometheusConfig", json_name="prometheusConfig")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.MonitoringConfig"))


def load_monitoring_config(path):
    """A MonitoringConfig text proto file -> the Prometheus path to serve, or None when it is not enabled."""
    from google.protobuf import text_format

    from .config import read_config_file

    try:
        text = read_config_file(path, "--monitoring-config-file")
    except OSError as error:
        raise UserError(f"--monitoring-config-file {path}: {error.strerror}") from None
    message = _declare_monitoring_config()()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        raise UserError(f"{path}: not a MonitoringConfig text proto: {error}") from None
    prometheus = message.prometheus_config
    if not prometheus.enable:
        return None
    endpoint = prometheus.path or DEFAULT_PATH
    if not endpoint.startswith("/") or endpoint.startswith("/v1/"):
        raise UserError(f"{path}: prometheus_config.path must start with '/' and not with '/v1/', got {endpoint!r}")
    return endpoint


class _Histogram:
    __slots__ = ("buckets", "counts", "total", "count")

    def __init__(self, buckets):
        self.buckets, self.counts, self.total, self.count = buckets, [0] * len(buckets), 0.0, 0

    def observe(self, value):
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1
        self.total += value
        self.count += 1


def _labels(names, values, extra=()):
    pairs = list(zip(names, values)) + list(extra)
    if not pairs:
        return ""
    escaped = (str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for _, v in pairs)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(pairs, escaped)) + "}"


def _number(value):
    return repr(float(value)) if value != int(value) or abs(value) >= 1e15 else str(int(value))


class Metrics:
    """The server's counters and histograms (thread-safe); `exposition()` writes them as Prometheus text."""

    LABELS = {REQUEST_COUNT: ("model_name", "API", "entrypoint", "status"),
              REQUEST_LATENCY: ("model_name", "API", "entrypoint"), BATCH_SIZE: (),
              LOAD_COUNT: ("model_path", "status"), LOAD_LATENCY: ("model_path",),
              REQUEST_LOG_COUNT: ("model_name", "status_code")}
    KINDS = {REQUEST_COUNT: "counter", REQUEST_LATENCY: "histogram", BATCH_SIZE: "histogram",
             LOAD_COUNT: "counter", LOAD_LATENCY: "counter", REQUEST_LOG_COUNT: "counter"}
    BUCKETS = {REQUEST_LATENCY: LATENCY_BUCKETS_US, BATCH_SIZE: BATCH_BUCKETS}

    def __init__(self):
        self._lock = threading.Lock()
        self._series = {name: {} for name in self.LABELS}

    def _add(self, name, labels, value):
        with self._lock:
            series = self._series[name]
            if self.KINDS[name] == "counter":
                series[labels] = series.get(labels, 0) + value
            else:
                series.setdefault(labels, _Histogram(self.BUCKETS[name])).observe(value)

    def request(self, model_name, api, entrypoint, status, seconds):
        """One finished request: `status` "OK" or a canonical code name."""
        self._add(REQUEST_COUNT, (model_name or "", api, entrypoint, status), 1)
        self._add(REQUEST_LATENCY, (model_name or "", api, entrypoint), seconds * 1e6)

    def batch(self, rows):
        self._add(BATCH_SIZE, (), rows)

    def request_log(self, model_name, status_code, records=1):
        """Request-log records: `status_code` "OK" written, another code dropped."""
        self._add(REQUEST_LOG_COUNT, (model_name, status_code), records)

    def load(self, model_path, ok, seconds):
        self._add(LOAD_COUNT, (model_path, "success" if ok else "fail"), 1)
        if ok:
            self._add(LOAD_LATENCY, (model_path,), seconds * 1e6)

    def exposition(self):
        """Prometheus' text format, version 0.0.4."""
        lines = []
        with self._lock:
            for name, series in self._series.items():
                if not series:
                    continue
                lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} {self.KINDS[name]}"]
                names = self.LABELS[name]
                for labels, value in sorted(series.items()):
                    if self.KINDS[name] == "counter":
                        lines.append(f"{name}{_labels(names, labels)} {_number(value)}")
                        continue
                    for bound, count in zip(value.buckets, value.counts):
                        lines.append(f"{name}_bucket{_labels(names, labels, [('le', repr(bound))])} {count}")
                    lines.append(f"{name}_bucket{_labels(names, labels, [('le', '+Inf')])} {value.count}")
                    lines.append(f"{name}_sum{_labels(names, labels)} {_number(value.total)}")
                    lines.append(f"{name}_count{_labels(names, labels)} {value.count}")
        return "\n".join(lines) + "\n"
