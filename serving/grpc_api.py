"""TensorFlow Serving's gRPC API on grpcio: PredictionService (Predict, Classify, Regress, MultiInference,
GetModelMetadata), ModelService (GetModelStatus, HandleReloadConfigRequest), with tensorflow-serving-api's
generated servicer bases. A successful Predict / Classify / Regress / MultiInference is handed to the request logs
(ServerCore.log) as its request and response."""

from __future__ import annotations

import time

from google.protobuf import struct_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from . import errors, inference
from .deadline import Deadline
from .methods import (CLASSIFY_METHOD, DEFAULT_SIGNATURE, EXPORT_METADATA_FIELD, EXPORT_METADATA_FILE,
                      REGRESS_METHOD, SIGNATURE_DEF_FIELD)
from .request_log import prediction_log
from .status import status_response
from .tensors import from_ndarray, to_ndarrays



def _spec(model_spec):
    version = model_spec.version.value if model_spec.HasField("version") else None
    return model_spec.name, version, model_spec.version_label or None


def client_deadline(context):
    """The client's deadline (gRPC's time_remaining), and whether it is still waiting."""
    return Deadline.after(context.time_remaining(), context.is_active)


def _abort(context, error: errors.ServingError):
    context.abort(error.code, error.message)


def answered(core, context, api, model_name, run):
    """`run()`'s response; a ServingError (or any failure, as INTERNAL) aborts the call with its status. Counted
    for monitoring by model, API and status."""
    began, status = time.monotonic(), "OK"
    try:
        return run()
    except errors.ServingError as error:
        status = error.code.name
        _abort(context, error)
    except Exception as error:  # noqa: BLE001 - answer INTERNAL, keep serving
        status = "INTERNAL"
        _abort(context, errors.internal(error, f"gRPC {api}"))
    finally:
        core.count(model_name, api, "GRPC", status, time.monotonic() - began)


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """`options.tensor_content`: Predict's numeric outputs as packed bytes (TensorFlow Serving's
    --enable_serialization_as_tensor_content) instead of its default, the typed fields (`float_val`, ...)."""

    def __init__(self, core, options):
        self.core = core
        self.tensor_content = options.tensor_content

    def Predict(self, request, context):
        def run():
            if not request.HasField("model_spec"):
                raise errors.invalid_argument("Missing ModelSpec")
            name, version, label = _spec(request.model_spec)
            limits = self.core.limits
            arrays = to_ndarrays(request.inputs, limits.elements, limits.bytes)
            served, signature, outputs = self.core.predict(
                name, version, label, request.model_spec.signature_name, arrays, tuple(request.output_filter),
                client_deadline(context))
            response = predict_pb2.PredictResponse()
            response.model_spec.name = name
            response.model_spec.version.value = served
            response.model_spec.signature_name = signature
            for alias, value in outputs.items():
                response.outputs[alias].CopyFrom(from_ndarray(value, tensor_content=self.tensor_content))
            self.core.log(name, served, signature, lambda: prediction_log("predict_log", request, response))
            return response

        return answered(self.core, context, "predict", request.model_spec.name, run)

    def _infer(self, request, context, method, response, kind):
        """Classify / Regress: one task on the request's Examples; the response's model_spec names the version
        and signature that answered."""
        if not request.HasField("model_spec"):
            raise errors.invalid_argument("Missing ModelSpec")
        name, version, label = _spec(request.model_spec)
        served, [(signature, result)] = self.core.infer(
            name, version, label, [(method, request.model_spec.signature_name)],
            lambda: inference.serialized_examples(request.input), client_deadline(context))
        response.model_spec.name = name
        response.model_spec.version.value = served
        response.model_spec.signature_name = signature
        response.result.CopyFrom(result)
        self.core.log(name, served, signature, lambda: prediction_log(kind, request, response))
        return response

    def Classify(self, request, context):
        return answered(self.core, context, "classify", request.model_spec.name, lambda: self._infer(
            request, context, CLASSIFY_METHOD, classification_pb2.ClassificationResponse(), "classify_log"))

    def Regress(self, request, context):
        return answered(self.core, context, "regress", request.model_spec.name, lambda: self._infer(
            request, context, REGRESS_METHOD, regression_pb2.RegressionResponse(), "regress_log"))

    def MultiInference(self, request, context):
        def run():
            tasks = list(request.tasks)
            name, version, label = _spec(tasks[0].model_spec) if tasks else ("", None, None)
            served, results = self.core.infer(name, version, label, tasks,
                                              lambda: inference.serialized_examples(request.input), client_deadline(context))
            response = inference_pb2.MultiInferenceResponse()
            for task, (signature, result) in zip(tasks, results):
                method = task.method_name
                entry = response.results.add()
                entry.model_spec.name = name
                entry.model_spec.version.value = served
                entry.model_spec.signature_name = signature or DEFAULT_SIGNATURE
                target = entry.classification_result if method == CLASSIFY_METHOD else entry.regression_result
                target.CopyFrom(result)
            # several signatures ran: the logged model spec names none (the request's tasks do)
            self.core.log(name, served, "", lambda: prediction_log("multi_inference_log", request, response))
            return response

        model_name = request.tasks[0].model_spec.name if request.tasks else ""
        return answered(self.core, context, "multi_inference", model_name, run)

    def GetModelMetadata(self, request, context):
        def run():
            if not request.HasField("model_spec"):
                raise errors.invalid_argument("Missing ModelSpec")
            name, version, label = _spec(request.model_spec)
            fields = list(request.metadata_field)
            if not fields:
                raise errors.invalid_argument("GetModelMetadataRequest must specify at least one metadata_field")
            for field in fields:
                if field not in (SIGNATURE_DEF_FIELD, EXPORT_METADATA_FIELD):
                    raise errors.invalid_argument(f"Metadata field {field} is not supported")
            served, signatures, export_metadata = self.core.metadata(name, version, label)
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = name
            response.model_spec.version.value = served
            if SIGNATURE_DEF_FIELD in fields:
                signature_map = get_model_metadata_pb2.SignatureDefMap()
                for key, signature in signatures.items():
                    signature_map.signature_def[key].CopyFrom(signature)
                response.metadata[SIGNATURE_DEF_FIELD].Pack(signature_map)
            if EXPORT_METADATA_FIELD in fields:  # this server's addition: the export's own record
                if export_metadata is None:
                    raise errors.invalid_argument(
                        f"Metadata field {EXPORT_METADATA_FIELD} is not supported by {name} version {served}: it "
                        f"has no {EXPORT_METADATA_FILE} (not an xlnet-tf export)")
                record = struct_pb2.Struct()
                record.update(export_metadata)
                response.metadata[EXPORT_METADATA_FIELD].Pack(record)
            return response

        return answered(self.core, context, "get_model_metadata", request.model_spec.name, run)


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    """`options.enable_reload_config` False: HandleReloadConfigRequest is refused (PERMISSION_DENIED)."""

    def __init__(self, core, options):
        self.core = core
        self.enable_reload_config = options.enable_reload_config

    def GetModelStatus(self, request, context):
        return answered(self.core, context, "get_model_status", request.model_spec.name,
                         lambda: status_response(self.core, *_spec(request.model_spec)))

    def HandleReloadConfigRequest(self, request, context):
        """Replaces the served ModelServerConfig (model_config_list only, as TensorFlow Serving); the status is
        in the response and, when not OK, the RPC's status."""
        def run():
            if not self.enable_reload_config:
                raise errors.ServingError("PERMISSION_DENIED", "HandleReloadConfigRequest is turned off on this "
                                          "server (--enable_reload_config=false)")
            self.core.reload(request.config)
            return model_management_pb2.ReloadConfigResponse()

        return answered(self.core, context, "reload_config", "", run)


def add_services(server, core, options):
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(core, options), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(core, options), server)


def parse_channel_arguments(text, flag="--grpc_channel_arguments"):
    """TensorFlow Serving's "name=value,name=value" list -> [(name, int or str)] (UserError naming the flag)."""
    from xlnet_tf.errors import UserError

    arguments = []
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise UserError(f"{flag}: {item!r} is not name=value")
        value = value.strip()
        try:
            arguments.append((name.strip(), int(value)))
        except ValueError:
            arguments.append((name.strip(), value))
    return arguments


def grpc_server_arguments(options):
    """The gRPC server's channel arguments: message-size limits, then --grpc_channel_arguments (which win, as
    in TensorFlow Serving, where they are applied last)."""
    arguments = {
        "grpc.max_receive_message_length": options.max_request_bytes,
        "grpc.max_send_message_length": options.max_response_bytes,
        "grpc.so_reuseport": 0,
    }
    arguments.update(parse_channel_arguments(options.grpc_channel_arguments))
    return list(arguments.items())
