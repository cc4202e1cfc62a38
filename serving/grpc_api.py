"""TensorFlow Serving's gRPC API on grpcio: PredictionService (Predict, GetModelMetadata), ModelService
(GetModelStatus), with tensorflow-serving-api's generated servicer bases (the other methods answer
UNIMPLEMENTED)."""

from __future__ import annotations

import logging

from google.protobuf import any_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from . import errors
from .tensors import from_ndarray, to_ndarray

log = logging.getLogger("xlnet_tf.serving")

_STATE = get_model_status_pb2.ModelVersionStatus.State


def _spec(model_spec):
    version = model_spec.version.value if model_spec.HasField("version") else None
    return model_spec.name, version, model_spec.version_label or None


def _abort(context, error: errors.ServingError):
    context.abort(error.code, error.message)


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, core):
        self.core = core

    def Predict(self, request, context):
        try:
            name, version, label = _spec(request.model_spec)
            arrays = {alias: to_ndarray(tensor) for alias, tensor in request.inputs.items()}
            served, signature, outputs = self.core.predict(
                name, version, label, request.model_spec.signature_name, arrays, tuple(request.output_filter))
            response = predict_pb2.PredictResponse()
            response.model_spec.name = name
            response.model_spec.version.value = served
            response.model_spec.signature_name = signature
            for alias, value in outputs.items():
                response.outputs[alias].CopyFrom(from_ndarray(value))
            return response
        except errors.ServingError as error:
            _abort(context, error)
        except Exception as error:  # noqa: BLE001 - answer INTERNAL, keep serving
            log.exception("Predict failed")
            _abort(context, errors.ServingError("INTERNAL", f"{type(error).__name__}: {error}"))

    def GetModelMetadata(self, request, context):
        try:
            name, version, label = _spec(request.model_spec)
            if not name:
                raise errors.invalid_argument("Missing ModelSpec")
            fields = list(request.metadata_field)
            if not fields:
                raise errors.invalid_argument("GetModelMetadataRequest must specify at least one metadata_field")
            for field in fields:
                if field != "signature_def":
                    raise errors.invalid_argument(f"Metadata field {field} is not supported")
            served, signatures = self.core.signatures(name, version, label)
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = name
            response.model_spec.version.value = served
            signature_map = get_model_metadata_pb2.SignatureDefMap()
            for key, signature in signatures.items():
                signature_map.signature_def[key].CopyFrom(signature)
            packed = any_pb2.Any()
            packed.Pack(signature_map)
            response.metadata["signature_def"].CopyFrom(packed)
            return response
        except errors.ServingError as error:
            _abort(context, error)


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, core):
        self.core = core

    def GetModelStatus(self, request, context):
        try:
            return status_response(self.core, *_spec(request.model_spec))
        except errors.ServingError as error:
            _abort(context, error)


def status_response(core, name, version=None, label=None):
    if not name:
        raise errors.invalid_argument("Missing ModelSpec")
    response = get_model_status_pb2.GetModelStatusResponse()
    for number, state, error in core.status(name, version, label):
        entry = response.model_version_status.add()
        entry.version = number
        entry.state = _STATE.Value(state)
        entry.status.SetInParent()  # error_code OK / "" are printed, as tensorflow_model_server does
        if error is not None:
            entry.status.error_code = error.code.value[0]
            entry.status.error_message = error.message
    return response


def add_services(server, core):
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(core), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(core), server)
