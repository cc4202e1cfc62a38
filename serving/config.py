"""TensorFlow Serving's configuration files: `--model_config_file` and `--batching_parameters_file`.

Both are protobuf text format, parsed with `google.protobuf.text_format` into TensorFlow Serving's own
messages: `tensorflow.serving.ModelServerConfig` (model_server_config.proto, shipped by
tensorflow-serving-api) and `tensorflow.serving.BatchingParameters` (session_bundle_config.proto). The
pip package tensorflow-serving-api does not ship session_bundle_config_pb2, so when it cannot be imported
the message is declared here with the same package, names, types and field numbers (in a private
descriptor pool, so a later import of the real module cannot clash). A file valid here is valid for
`tensorflow_model_server` and the other way round.
"""

from __future__ import annotations

import dataclasses
import os
import re

from google.protobuf import text_format

from xlnet_tf import files
from xlnet_tf.errors import UserError

from .request_log import logging_from_proto


def read_config_file(path, flag):
    """The text of a configuration file: a local path or a URL (gs://...), read through `xlnet_tf.files` as
    TensorFlow Serving reads its files through TensorFlow's Env. A missing URL is a UserError naming the flag
    (a missing local file raises FileNotFoundError, as before)."""
    path = os.fspath(path)
    if files.is_remote(path) and not files.exists(path):
        raise UserError(f"{flag} {path}: not found")
    try:
        return files.read_text(path)
    except UnicodeDecodeError as error:
        raise UserError(f"{flag} {path}: not UTF-8 ({error})") from None


# --- BatchingParameters -------------------------------------------------------------------------------


def _declare_batching_parameters():
    """BatchingParameters as session_bundle_config.proto declares it (TensorFlow Serving 2.x)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    wrappers = descriptor_pb2.FileDescriptorProto()
    wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
    pool.Add(wrappers)

    file = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/servables/tensorflow/session_bundle_config.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    message = file.message_type.add(name="BatchingParameters")
    F = descriptor_pb2.FieldDescriptorProto
    wrapped = [
        ("max_batch_size", 1, "Int64Value"),
        ("batch_timeout_micros", 2, "Int64Value"),
        ("max_enqueued_batches", 3, "Int64Value"),
        ("num_batch_threads", 4, "Int64Value"),
        ("thread_pool_name", 5, "StringValue"),
        ("enable_large_batch_splitting", 8, "BoolValue"),
        ("max_execution_batch_size", 9, "Int64Value"),
    ]
    for name, number, wrapper in wrapped:
        message.field.add(name=name, number=number, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                          type_name=f".google.protobuf.{wrapper}", json_name=_camel(name))
    message.field.add(name="allowed_batch_sizes", number=6, label=F.LABEL_REPEATED, type=F.TYPE_INT64,
                      json_name="allowedBatchSizes")
    message.field.add(name="pad_variable_length_inputs", number=7, label=F.LABEL_OPTIONAL, type=F.TYPE_BOOL,
                      json_name="padVariableLengthInputs")
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))


def _camel(name):
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def batching_parameters_class():
    """The BatchingParameters message class: TensorFlow Serving's generated one when importable."""
    global _BATCHING_PARAMETERS
    if _BATCHING_PARAMETERS is None:
        try:
            from tensorflow_serving.servables.tensorflow import session_bundle_config_pb2

            _BATCHING_PARAMETERS = session_bundle_config_pb2.BatchingParameters
            _SOURCE[0] = "tensorflow_serving.servables.tensorflow.session_bundle_config_pb2"
        except ImportError:
            _BATCHING_PARAMETERS = _declare_batching_parameters()
            _SOURCE[0] = "declared in xlnet_tf.serving.config (session_bundle_config_pb2 is not installed)"
    return _BATCHING_PARAMETERS


def batching_parameters_source():
    """Where the BatchingParameters message class comes from (for logs and tests)."""
    batching_parameters_class()
    return _SOURCE[0]


_BATCHING_PARAMETERS = None
_SOURCE = [None]


@dataclasses.dataclass(frozen=True)
class BatchingConfig:
    """Server-side batching options. Defaults are TensorFlow Serving's when a field is absent."""

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = max(1, os.cpu_count() or 1)
    allowed_batch_sizes: tuple = ()
    enable_large_batch_splitting: bool = False
    max_execution_batch_size: int | None = None
    pad_variable_length_inputs: bool = False

    @property
    def execution_batch_size(self) -> int:
        """The largest batch run at once (max_execution_batch_size when splitting large batches)."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size:
            return self.max_execution_batch_size
        return self.max_batch_size

    def validate(self, where="batching parameters"):
        if self.max_batch_size < 1:
            raise UserError(f"{where}: max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.num_batch_threads < 1:
            raise UserError(f"{where}: num_batch_threads must be >= 1, got {self.num_batch_threads}")
        if self.batch_timeout_micros < 0:
            raise UserError(f"{where}: batch_timeout_micros must be >= 0, got {self.batch_timeout_micros}")
        if self.max_enqueued_batches < 1:
            raise UserError(f"{where}: max_enqueued_batches must be >= 1, got {self.max_enqueued_batches}")
        if self.enable_large_batch_splitting and self.max_execution_batch_size is not None:
            if not 1 <= self.max_execution_batch_size <= self.max_batch_size:
                raise UserError(f"{where}: max_execution_batch_size must be in [1, max_batch_size]")
        sizes = list(self.allowed_batch_sizes)
        if sizes:
            if any(b <= a for a, b in zip(sizes, sizes[1:])) or sizes[0] < 1:
                raise UserError(f"{where}: allowed_batch_sizes must be positive and increasing, got {sizes}")
            if sizes[-1] != self.execution_batch_size:
                raise UserError(f"{where}: the last allowed_batch_sizes entry ({sizes[-1]}) must equal "
                                f"the largest batch size ({self.execution_batch_size})")
        return self


def batching_config_from_proto(message, where="batching parameters") -> BatchingConfig:
    values = {}
    for name in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads",
                 "max_execution_batch_size", "enable_large_batch_splitting"):
        if message.HasField(name):
            values[name] = getattr(message, name).value
    if message.allowed_batch_sizes:
        values["allowed_batch_sizes"] = tuple(message.allowed_batch_sizes)
    values["pad_variable_length_inputs"] = bool(message.pad_variable_length_inputs)
    return BatchingConfig(**values).validate(where)


def parse_batching_parameters(text: str, where="batching parameters"):
    """BatchingParameters text proto -> the message (raises UserError naming `where` on a syntax error)."""
    message = batching_parameters_class()()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        raise UserError(f"{where}: not a BatchingParameters text proto: {error}") from None
    return message


def load_batching_config(path=None, overrides=None) -> BatchingConfig:
    """BatchingConfig from a `--batching_parameters_file` (or defaults), then `overrides` (a dict)."""
    if path is None:
        config = BatchingConfig()
    else:
        text = read_config_file(path, "--batching-parameters-file")
        config = batching_config_from_proto(parse_batching_parameters(text, path), path)
    if overrides:
        config = dataclasses.replace(config, **overrides).validate()
    return config


# --- ModelServerConfig ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """One served model: name, base path (holding integer version directories) and version policy."""

    name: str
    base_path: str
    policy: str = "latest"  # latest | all | specific
    num_versions: int = 1  # latest
    versions: tuple = ()  # specific
    labels: tuple = ()  # ((label, version), ...)
    logging: object = None  # request_log.LoggingSettings of its logging_config; None: not logged
    saved_model_at_base: bool = False  # a SavedModel at base_path itself is version 1 (Vertex AI's artefacts)

    def aspired(self, on_disk):
        """Which of the versions found on disk (an iterable of ints) should be loaded."""
        found = sorted(set(on_disk))
        if self.policy == "all":
            return found
        if self.policy == "specific":
            return [v for v in found if v in set(self.versions)]
        return found[-self.num_versions:] if found else []


def parse_model_server_config(text: str, where="model config"):
    from tensorflow_serving.config import model_server_config_pb2

    message = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        # TensorFlow Serving's two lines: protobuf's TextFormat log line, then ParseProtoTextFile's status.
        detail = re.sub(r"^\d+(:\d+)? : ", "", str(error))
        place = f"{error.GetLine()}:{error.GetColumn()}: " if error.GetLine() is not None else ""
        raise UserError(f"Error parsing text-format {message.DESCRIPTOR.full_name}: {place}{detail}\n"
                        f"Invalid protobuf file: '{where}'") from None
    return message


def model_entries_from_proto(message, where="model config"):
    if message.WhichOneof("config") != "model_config_list":
        raise UserError(f"{where}: only model_config_list is supported (custom_model_config is not)")
    entries, seen = [], set()
    for index, config in enumerate(message.model_config_list.config):
        label = f"{where}: config #{index + 1}"
        if not config.name:
            raise UserError(f"{label}: 'name' is required")
        if config.name in seen:
            raise UserError(f"{label}: model name {config.name!r} appears twice")
        seen.add(config.name)
        if not config.base_path:
            raise UserError(f"{label} ({config.name}): 'base_path' is required")
        if config.model_platform not in ("", "tensorflow"):
            raise UserError(f"{label} ({config.name}): model_platform {config.model_platform!r} is not "
                            "supported (only 'tensorflow' SavedModels)")
        policy = config.model_version_policy
        kind = policy.WhichOneof("policy_choice") or "latest"
        num_versions, versions = 1, ()
        if kind == "latest":
            num_versions = policy.latest.num_versions or 1
        elif kind == "specific":
            versions = tuple(int(v) for v in policy.specific.versions)
            if not versions:
                raise UserError(f"{label} ({config.name}): 'specific' policy needs at least one version")
        labels = tuple(sorted((str(k), int(v)) for k, v in config.version_labels.items()))
        logging = logging_from_proto(config, f"{label} ({config.name})")
        entries.append(ModelEntry(config.name, config.base_path, kind, num_versions, versions, labels, logging))
    if not entries:
        raise UserError(f"{where}: no models in model_config_list")
    return entries


def load_model_config(path):
    """[ModelEntry] from a `--model_config_file` (a local path or a URL)."""
    text = read_config_file(path, "--model-config-file")
    return model_entries_from_proto(parse_model_server_config(text, path), path)


class ConfigFilePoller:
    """`--model_config_file_poll_wait_seconds`: re-reads the model config file every `interval` seconds; when
    its text changed, `apply(entries)` serves the new models as HandleReloadConfigRequest does. A file that
    cannot be read or parsed, or that `apply` refuses, is logged and the served models stay as they are (it is
    tried again at the next poll only if its text changes)."""

    def __init__(self, path, interval, apply):
        import threading

        self.path = path
        self.interval = float(interval)
        self.apply = apply
        self.applied = 0  # configurations applied since start
        self.refused = 0  # configurations that could not be read, parsed or applied
        self._last = read_config_file(path, "--model_config_file")  # the one the server started with
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="config-poller", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self):
        while not self._stop.wait(self.interval):
            self.poll_once()

    def poll_once(self):
        """Applies the file if its text changed; returns whether it applied a new configuration."""
        import logging

        log = logging.getLogger("xlnet_tf.serving")
        try:
            text = read_config_file(self.path, "--model_config_file")
        except (UserError, OSError) as error:
            log.warning("model config %s: cannot read it (%s); serving the models as they are", self.path, error)
            return False
        if text == self._last:
            return False
        self._last = text
        try:
            self.apply(model_entries_from_proto(parse_model_server_config(text, self.path), self.path))
        except Exception as error:  # noqa: BLE001 - a bad file must not stop the poller or the server
            self.refused += 1
            log.error("model config %s: not applied (%s); serving the models as they are", self.path,
                      getattr(error, "message", error))
            return False
        self.applied += 1
        log.info("model config %s: changed, applied", self.path)
        return True
