"""A client for TensorFlow Serving's gRPC API (this package's server or tensorflow_model_server).

    client = Client("localhost:8500", "sentiment")
    client.classify(["a fine film"])          # [{"label": "positive", "label_id": 1, "probabilities": [...]}]
    client.classify(["a fine film"], api="classify")  # the same through Classify on tf.Examples
    client.regress(["a fine film"])           # [{"prediction": 0.83}] through Regress (a regression model)
    client.answer(["who?"], ["Ada wrote it."])  # [{"answer": "Ada", "start": 0, "end": 3, ...}]
    client.encode(["a fine film"])            # {"sequence_output": ndarray, "pooled_output": ..., ...}
    client.predict({"text": ["..."]}, signature_name="tokenize")  # any signature -> {name: ndarray}

Each call has a deadline (`timeout` seconds) and is retried on UNAVAILABLE only (server starting,
restarting, connection refused), `retries` times with exponential backoff (then `Unavailable`, a
ServingError that says whether any server answered); other failures raise ServingError with the server's code
and message. Message-size limits are raised above gRPC's 4 MB.

TLS (a server started with an SSLConfig, `--ssl_config_file`): give `ssl_ca_file` (PEM of the CA to trust;
without it, the system's roots), and for mutual TLS `ssl_cert_file` with `ssl_key_file` (the client's PEM
certificate chain and key); `ssl_target_name` overrides the name checked against the server's certificate
(e.g. "localhost" for a unix:/path target). Any of them makes the channel a TLS one:

    Client("localhost:8500", "sentiment", ssl_ca_file="ca.pem", ssl_cert_file="me.pem", ssl_key_file="me.key")
"""

from __future__ import annotations

import os
import threading
import time

import grpc
import numpy as np
from tensorflow.core.example import example_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    input_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from xlnet_tf import files

from .errors import ServingError
from .methods import EXPORT_METADATA_FIELD, SIGNATURE_DEF_FIELD
from .tensors import dtype_name, from_ndarray, shape_of, to_ndarray

DEFAULT_MAX_MESSAGE_BYTES = 512 << 20


def _strings(values, what):
    if isinstance(values, (str, bytes)):
        values = [values]
    values = list(values)
    for value in values:
        if not isinstance(value, (str, bytes)):
            raise TypeError(f"{what} must be strings, got {type(value).__name__}")
    return values


def _text(value):
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


class Unavailable(ServingError):
    """UNAVAILABLE after every attempt of a call: `target` (as given), `attempts` (1 + the retries made) and
    `seconds` (from the first attempt to the last failure). `no_server`: no connection was made (refused, or the
    host not found), as opposed to a server that answered UNAVAILABLE."""

    _NO_CONNECTION = ("failed to connect", "connection refused", "errors resolving", "dns resolution failed",
                      "name resolution", "address lookup failed")

    def __init__(self, message, target, attempts, seconds):
        super().__init__(grpc.StatusCode.UNAVAILABLE, message)
        self.target, self.attempts, self.seconds = target, attempts, seconds

    @property
    def no_server(self):
        return any(words in self.message.lower() for words in self._NO_CONNECTION)

    @property
    def reason(self):
        """A few words for why nothing answered: "connection refused", "host not found", ..."""
        text = self.message.lower()
        if "refused" in text:
            return "connection refused"
        if "resolv" in text or "lookup" in text:
            return "host not found"
        return "no connection"

    def advice(self, server, model, retries):
        """`xlnet-tf query`'s one line when no server answers at `server` (--server): what was tried, and how to
        start one (`xlnet-tf serve` for `model`) or wait longer (--retries, now `retries`)."""
        port = server.rpartition(":")[2]
        serve = f"xlnet-tf serve --model-base-path EXPORT_DIR --model-name {model}" + (
            f" --port {port}" if port.isdigit() and port != "8500" else "")
        if self.attempts > 1:
            tried = f"tried {self.attempts} times over {self.seconds:.1f} s: {self.reason}"
            wait = f"or give a server that is still starting more time with a larger --retries (now {retries})"
        else:
            tried = self.reason
            wait = "or wait for a server that is still starting with --retries N"
        return f"no server answers at {self.target} ({tried}); start one with `{serve}`, {wait}"


class Client:
    """gRPC client for one model (and optionally one version) on a TensorFlow-Serving-compatible server.

    TLS: `ssl_ca_file`, `ssl_cert_file` + `ssl_key_file` (mutual TLS), `ssl_target_name` (PEM file paths, local
    or URLs; see the module docstring); `tls` says whether the channel made here is a TLS one."""

    def __init__(self, target, model_name, version=None, timeout=10.0, retries=3, *, version_label=None,
                 backoff=0.1, max_backoff=2.0, max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES, channel=None,
                 ssl_ca_file=None, ssl_cert_file=None, ssl_key_file=None, ssl_target_name=None):
        self.target = target
        self.model_name = model_name
        self.version = version
        self.version_label = version_label
        self.timeout = timeout
        self.retries = int(retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        options = [("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_receive_message_length", max_message_bytes),
                   # Reconnect soon after a refused connection, so that our retries can reach a server
                   # that has just started (gRPC's own reconnect backoff starts at 1 s and grows).
                   ("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.min_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 1000)]
        credentials = ssl_channel_credentials(ssl_ca_file, ssl_cert_file, ssl_key_file, ssl_target_name)
        if credentials is not None and channel is not None:
            raise ValueError("give either channel or the ssl_* options (they make the channel), not both")
        if ssl_target_name:
            options.append(("grpc.ssl_target_name_override", ssl_target_name))
        self.tls = credentials is not None
        self._own_channel = channel is None
        if channel is not None:
            self.channel = channel
        elif credentials is not None:
            self.channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(target, options=options)
        self._predict = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self._models = model_service_pb2_grpc.ModelServiceStub(self.channel)
        self._signatures = None
        self._lock = threading.Lock()
        self.last_version = None  # the version that answered the last predict (response model_spec)

    def close(self):
        if self._own_channel:
            self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- plumbing -------------------------------------------------------------------------------------

    def _spec(self, spec, signature_name=None):
        spec.name = self.model_name
        if self.version is not None:
            spec.version.value = int(self.version)
        elif self.version_label:
            spec.version_label = self.version_label
        if signature_name:
            spec.signature_name = signature_name

    def _call(self, method, request):
        """`method(request)`, retried on UNAVAILABLE `retries` times (then `Unavailable`); other failures raise
        ServingError."""
        attempt, began = 0, time.monotonic()
        while True:
            try:
                return method(request, timeout=self.timeout)
            except grpc.RpcError as error:
                code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
                if code == grpc.StatusCode.UNAVAILABLE and attempt < self.retries:
                    time.sleep(min(self.max_backoff, self.backoff * (2 ** attempt)))
                    attempt += 1
                    continue
                details = error.details() if hasattr(error, "details") else str(error)
                if code == grpc.StatusCode.UNAVAILABLE:
                    raise Unavailable(details or code.name, self.target, attempt + 1,
                                      time.monotonic() - began) from None
                raise ServingError(code, details or code.name) from None

    # -- generic --------------------------------------------------------------------------------------

    def predict(self, inputs, signature_name="serving_default", output_filter=None):
        """Runs a signature: inputs {alias: array-like (str lists become DT_STRING)} -> {alias: ndarray}."""
        request = predict_pb2.PredictRequest()
        self._spec(request.model_spec, signature_name)
        for alias, value in inputs.items():
            if hasattr(value, "tensor_shape"):  # already a TensorProto
                request.inputs[alias].CopyFrom(value)
                continue
            if isinstance(value, (list, tuple)) and len(value) == 0:  # an empty batch: the signature's dtype
                value = np.zeros((0,), dtype=self._input_dtype(signature_name, alias))
            request.inputs[alias].CopyFrom(from_ndarray(value))
        if output_filter:
            request.output_filter.extend(output_filter)
        response = self._call(self._predict.Predict, request)
        if response.model_spec.HasField("version"):
            self.last_version = response.model_spec.version.value
        return {alias: to_ndarray(tensor) for alias, tensor in response.outputs.items()}

    def metadata(self):
        """{"model", "version", "signatures": {name: {"method_name", "inputs", "outputs"}}}; inputs and
        outputs are {alias: {"dtype": "DT_STRING", "shape": [-1] (None: unknown rank), "name": tensor}}."""
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=[SIGNATURE_DEF_FIELD])
        self._spec(request.model_spec)
        response = self._call(self._predict.GetModelMetadata, request)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)

        def tensors(infos):
            return {alias: {"dtype": dtype_name(info.dtype), "shape": shape_of(info.tensor_shape),
                            "name": info.name} for alias, info in sorted(infos.items())}

        signatures = {name: {"method_name": sig.method_name, "inputs": tensors(sig.inputs),
                             "outputs": tensors(sig.outputs)}
                      for name, sig in sorted(signature_map.signature_def.items())}
        return {"model": response.model_spec.name, "version": response.model_spec.version.value,
                "signatures": signatures}

    def export_metadata(self):
        """The served version's xlnet_export.json (task, precision, max_seq_len, label_names, ...; a dict) from
        GetModelMetadata's field "xlnet_export" (this server's addition), or None where the server does not
        offer it (TensorFlow Serving's binary, or a SavedModel that is not an xlnet-tf export)."""
        from google.protobuf import json_format, struct_pb2

        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=[EXPORT_METADATA_FIELD])
        self._spec(request.model_spec)
        try:
            response = self._call(self._predict.GetModelMetadata, request)
        except ServingError as error:
            if error.code == grpc.StatusCode.INVALID_ARGUMENT and "is not supported" in str(error):
                return None
            raise
        record = struct_pb2.Struct()
        response.metadata[EXPORT_METADATA_FIELD].Unpack(record)
        return json_format.MessageToDict(record)

    def status(self):
        """[{"version", "state" (e.g. "AVAILABLE"), "error_code", "error_message"}] of the model's versions."""
        request = get_model_status_pb2.GetModelStatusRequest()
        self._spec(request.model_spec)
        response = self._call(self._models.GetModelStatus, request)
        states = get_model_status_pb2.ModelVersionStatus.State
        return [{"version": s.version, "state": states.Name(s.state), "error_code": int(s.status.error_code),
                 "error_message": s.status.error_message} for s in response.model_version_status]

    def _input_dtype(self, signature_name, alias):
        from .tensors import DT, numpy_dtype

        self._signature_inputs(signature_name)
        spec = self._signatures[signature_name]["inputs"].get(alias)
        dtype = numpy_dtype(DT.Value(spec["dtype"])) if spec else None
        return dtype or object

    def _signature_inputs(self, signature_name):
        with self._lock:
            if self._signatures is None:
                self._signatures = self.metadata()["signatures"]
            signatures = self._signatures
        if signature_name not in signatures:
            raise ServingError(grpc.StatusCode.FAILED_PRECONDITION,
                               f'Serving signature key "{signature_name}" not found '
                               f"(signatures: {', '.join(sorted(signatures))})")
        return set(signatures[signature_name]["inputs"])

    def signature_outputs(self, signature_name="serving_default"):
        """The output aliases of a signature (from GetModelMetadata, read once)."""
        self._signature_inputs(signature_name)
        return set(self._signatures[signature_name]["outputs"])

    # -- task helpers ---------------------------------------------------------------------------------

    def classify(self, texts, text_b=None, signature_name=None, api="predict"):
        """Classification (or regression) of texts or text pairs -> one dict per text.

        api "predict" (signature default "serving_default"): classification {"label", "label_id",
        "probabilities", "logits"}, multi-label {"labels" (those at or above their thresholds), "scores",
        "logits"}, regression {"prediction"}; the input names (`text`, or `text_a` + `text_b`)
        are read from the model's signature. api "classify": TensorFlow Serving's Classify on tf.Examples
        (features `text`, or `text_a` + `text_b`; signature default "classification") -> {"label" (the
        highest score's class), "label_id", "probabilities" (the scores), "classes"}.
        """
        if api == "classify":
            response = self._infer(self._predict.Classify, classification_pb2.ClassificationRequest(), texts,
                                   text_b, signature_name or "classification")
            rows = []
            for classifications in response.result.classifications:
                scores = [entry.score for entry in classifications.classes]
                best = int(np.argmax(scores)) if scores else -1
                rows.append({"label": classifications.classes[best].label if scores else "", "label_id": best,
                             "probabilities": scores, "classes": [entry.label for entry in classifications.classes]})
            return rows
        if api != "predict":
            raise ValueError(f"api must be 'predict' or 'classify', got {api!r}")
        signature_name = signature_name or "serving_default"
        texts = _strings(texts, "texts")
        names = self._signature_inputs(signature_name)
        if text_b is None:
            if "text" in names:
                inputs = {"text": texts}
            elif {"text_a", "text_b"} <= names:
                raise ValueError("this model classifies text pairs: give text_b")
            else:
                raise ValueError(f"signature {signature_name!r} takes {sorted(names)}, not text")
        else:
            text_b = _strings(text_b, "text_b")
            if len(text_b) != len(texts):
                raise ValueError(f"{len(texts)} texts but {len(text_b)} text_b")
            if not {"text_a", "text_b"} <= names:
                raise ValueError(f"this model takes {sorted(names)}, not text pairs (text_a, text_b)")
            inputs = {"text_a": texts, "text_b": text_b}
        outputs = self.predict(inputs, signature_name)
        results = []
        for i in range(len(texts)):
            if "prediction" in outputs and "probabilities" not in outputs:
                results.append({"prediction": float(np.asarray(outputs["prediction"][i]).reshape(-1)[0])})
                continue
            row = {}
            if "num_predicted" in outputs:  # multi-label: the labels that apply, every label's score
                row["labels"] = [_text(v) for v in outputs["labels"][i][:int(outputs["num_predicted"][i])]]
                row["scores"] = [float(p) for p in outputs["scores"][i]]
            if "label" in outputs:
                row["label"] = _text(outputs["label"][i])
            if "label_id" in outputs:
                row["label_id"] = int(outputs["label_id"][i])
            if "probabilities" in outputs:
                row["probabilities"] = [float(p) for p in outputs["probabilities"][i]]
            if "logits" in outputs:
                row["logits"] = [float(p) for p in outputs["logits"][i]]
            results.append(row)
        return results

    def regress(self, texts, text_b=None, signature_name=None, api="regress"):
        """Regression of texts or text pairs -> [{"prediction": float}] per text: api "regress" through
        TensorFlow Serving's Regress on tf.Examples (signature default "regression"), "predict" through
        Predict (signature default "serving_default")."""
        if api == "predict":
            return self.classify(texts, text_b, signature_name or "serving_default")
        if api != "regress":
            raise ValueError(f"api must be 'regress' or 'predict', got {api!r}")
        response = self._infer(self._predict.Regress, regression_pb2.RegressionRequest(), texts, text_b,
                               signature_name or "regression")
        return [{"prediction": entry.value} for entry in response.result.regressions]

    def _infer(self, method, request, texts, text_b, signature_name):
        """Classify / Regress `request` on Examples holding the texts (feature `text`, or `text_a` and
        `text_b`, UTF-8 bytes)."""
        texts = _strings(texts, "texts")
        columns = {"text": texts}
        if text_b is not None:
            text_b = _strings(text_b, "text_b")
            if len(text_b) != len(texts):
                raise ValueError(f"{len(texts)} texts but {len(text_b)} text_b")
            columns = {"text_a": texts, "text_b": text_b}
        self._spec(request.model_spec, signature_name)
        request.input.CopyFrom(text_examples(columns))
        response = self._call(method, request)
        if response.model_spec.HasField("version"):
            self.last_version = response.model_spec.version.value
        return response

    def answer(self, questions, contexts, signature_name="serving_default"):
        """Extractive QA -> [{"answer", "start", "end", "score", "no_answer_probability"}] per question."""
        questions = _strings(questions, "questions")
        contexts = _strings(contexts, "contexts")
        if len(questions) != len(contexts):
            raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
        outputs = self.predict({"question": questions, "context": contexts}, signature_name)
        results = []
        for i in range(len(questions)):
            row = {"answer": _text(outputs["answer"][i])}
            for key, name, cast in (("start", "answer_start", int), ("end", "answer_end", int),
                                    ("score", "score", float),
                                    ("no_answer_probability", "no_answer_probability", float)):
                if name in outputs:
                    row[key] = cast(outputs[name][i])
            results.append(row)
        return results

    def tag(self, texts=None, words=None, signature_name=None):
        """Token classification (an xlnet-tf token-classification export) -> one dict per text: {"words",
        "tags", "scores" (each tag's probability), "entities": [{"text", "type", "start", "end"}]}.

        texts: raw strings (signature default "serving_default"): words are split in the server, "word_start"
        / "word_end" and the entities' start / end are UTF-8 byte offsets into the text (end exclusive).
        words: lists of pre-split words (signature default "words"; sent padded with ""): the entities' start
        / end are word indices (end exclusive).
        """
        if (texts is None) == (words is None):
            raise ValueError("give texts or words")
        if texts is not None:
            texts = _strings(texts, "texts")
            outputs = self.predict({"text": texts}, signature_name or "serving_default")
            count = len(texts)
        else:
            words = [_strings(row, f"words[{i}]") for i, row in enumerate(words)]
            if any(w == "" for row in words for w in row):
                raise ValueError("words must not be empty strings (the words signature reads them as padding)")
            width = max([len(row) for row in words] + [0])
            padded = np.array([row + [""] * (width - len(row)) for row in words], dtype=object).reshape(-1, width)
            outputs = self.predict({"words": padded}, signature_name or "words")
            count = len(words)
        results = []
        for i in range(count):
            n = int(outputs["num_words"][i])
            row = {"words": [_text(w) for w in outputs["words"][i][:n]] if texts is not None else words[i],
                   "tags": [_text(t) for t in outputs["tags"][i][:n]],
                   "scores": [float(p) for p in outputs["scores"][i][:n]]}
            if texts is not None:
                row["word_start"] = [int(v) for v in outputs["word_start"][i][:n]]
                row["word_end"] = [int(v) for v in outputs["word_end"][i][:n]]
            row["entities"] = [{"text": _text(outputs["entity_text"][i][k]), "type": _text(outputs["entity_type"][i][k]),
                                "start": int(outputs["entity_start"][i][k]), "end": int(outputs["entity_end"][i][k])}
                               for k in range(int(outputs["num_entities"][i]))]
            results.append(row)
        return results

    def generate(self, texts, max_new_tokens=2**31 - 1, temperature=0.0, top_k=0, top_p=1.0, seed=0,
                 signature_name="generate"):
        """Text generation (an xlnet-tf language-model export) -> one dict per prompt: {"text" (the
        continuation), "tokens", "log_probs", "finish_reason"}. Each setting is one value for every prompt or a
        list with one per prompt; max_new_tokens is capped by the export's; temperature 0 is greedy; a seed
        repeats its samples (prompt i of one call samples with seed + i when one seed is given)."""
        texts = _strings(texts, "texts")
        count = len(texts)

        def per_row(value, name, dtype):
            values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value] * count
            if len(values) != count:
                raise ValueError(f"{name}: {len(values)} values for {count} prompts")
            return np.asarray(values, dtype)

        seeds = per_row(seed, "seed", np.int64) + (0 if isinstance(seed, (list, tuple, np.ndarray)) else
                                                    np.arange(count))
        inputs = {"text": texts, "max_new_tokens": per_row(max_new_tokens, "max_new_tokens", np.int32),
                  "temperature": per_row(temperature, "temperature", np.float32),
                  "top_k": per_row(top_k, "top_k", np.int32), "top_p": per_row(top_p, "top_p", np.float32),
                  "seed": seeds}
        outputs = self.predict(inputs, signature_name)
        results = []
        for i in range(count):
            n = int(outputs["num_tokens"][i])
            results.append({"text": _text(outputs["text"][i]), "tokens": [int(t) for t in outputs["token_ids"][i][:n]],
                            "log_probs": [float(p) for p in outputs["log_probs"][i][:n]],
                            "finish_reason": _text(outputs["finish_reason"][i])})
        return results

    def encode(self, texts, signature_name="encode"):
        """Encoder outputs of texts: {"sequence_output" [B,L,d], "pooled_output" [B,d], "padding_mask" [B,L]}."""
        return self.predict({"text": _strings(texts, "texts")}, signature_name)


def ssl_channel_credentials(ca_file=None, cert_file=None, key_file=None, target_name=None):
    """grpc.ChannelCredentials from PEM files (local or URLs): the CA to trust (None: the system's roots) and
    the client's certificate chain and key (mutual TLS; both or neither); None when no option is given."""
    if not (ca_file or cert_file or key_file or target_name):
        return None
    if bool(cert_file) != bool(key_file):
        given, missing = ("ssl_cert_file", "ssl_key_file") if cert_file else ("ssl_key_file", "ssl_cert_file")
        raise ValueError(f"{given} needs {missing}: a client certificate and its private key go together")

    def read(path):
        return files.read_bytes(os.fspath(path)) if path else None

    return grpc.ssl_channel_credentials(root_certificates=read(ca_file), private_key=read(key_file),
                                        certificate_chain=read(cert_file))


def text_examples(columns, context=None):
    """An `Input` of tf.Examples, one per row of `columns` ({feature: [str or bytes per row]}), each feature a
    bytes_list of one UTF-8 value; with `context` ({feature: str or bytes}), an example_list_with_context."""
    def example(features):
        message = example_pb2.Example()
        for name, value in features.items():
            message.features.feature[name].bytes_list.value.append(
                value.encode("utf-8") if isinstance(value, str) else value)
        return message

    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    request = input_pb2.Input()
    listed = request.example_list if context is None else request.example_list_with_context
    if context is not None:
        listed.context.CopyFrom(example(context))
    for row in rows:
        listed.examples.add().CopyFrom(example(row))
    return request
