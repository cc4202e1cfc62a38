"""The Open Inference Protocol's ("v2") gRPC service, `inference.GRPCInferenceService`, on the gRPC port beside
TensorFlow Serving's services, over the same ServerCore (and so the same models, versions, batching, deadlines,
TLS, limits and metrics). The messages and the servicer base are tritonclient's generated code
(`tritonclient.grpc.service_pb2`, `service_pb2_grpc`), the protocol's published definitions; the RPCs beyond the
protocol that Triton adds (model config, statistics, repository, shared memory, ...) answer UNIMPLEMENTED.

ServerLive, ServerReady (every configured model has a version available), ModelReady, ServerMetadata,
ModelMetadata (serving_default's tensors), ModelInfer: inputs as typed `contents` or as `raw_input_contents`
(one per input, in order; BYTES length-prefixed); the answer's outputs are raw (`raw_output_contents`) when the
request's inputs were, else typed (FP16 outputs: always raw). The request parameter `signature_name` (a
string) picks the signature. Errors are gRPC statuses (NOT_FOUND for an unknown model, INVALID_ARGUMENT for a
bad tensor, ...)."""

from __future__ import annotations

from tritonclient.grpc import service_pb2, service_pb2_grpc

from . import errors, gate, v2_tensors
from .grpc_api import answered, client_deadline
from .request_log import rest_predict_log
from .v2_rest import model_metadata, model_ready, server_ready


def _parameters(proto_map):
    """An InferParameter map -> {name: value}."""
    return {key: getattr(value, value.WhichOneof("parameter_choice")) for key, value in proto_map.items()
            if value.WhichOneof("parameter_choice")}


def _version(text):
    return gate.version_number(text, "model version") if text else None


def _input_arrays(request, tensor_infos, max_elements):
    """The request's inputs (typed contents or raw_input_contents) -> {alias: ndarray}, checked against the
    signature's inputs; each at most `max_elements` elements (the gate bounds them together)."""
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise errors.invalid_argument(f"raw_input_contents holds {len(raw)} tensors for {len(request.inputs)} "
                                      "inputs")
    arrays = {}
    for index, tensor in enumerate(request.inputs):
        name, datatype, shape = tensor.name, tensor.datatype, list(tensor.shape)
        if name in arrays:
            raise errors.invalid_argument(f"input '{name}' is given twice")
        v2_tensors.check_datatype(name, datatype, tensor_infos)
        if raw:
            if tensor.HasField("contents"):
                raise errors.invalid_argument(f"input '{name}': contents and raw_input_contents both given")
            arrays[name] = v2_tensors.from_raw(raw[index], datatype, shape, name, max_elements)
        else:
            field = v2_tensors.CONTENTS_FIELD.get(datatype)
            if field is None:
                raise errors.invalid_argument(f"input '{name}': {datatype} needs raw_input_contents")
            arrays[name] = v2_tensors.from_data(list(getattr(tensor.contents, field)), datatype, shape, name,
                                                max_elements)
    return arrays


class InferenceService(service_pb2_grpc.GRPCInferenceServiceServicer):
    """GRPCInferenceService over `core`; `server_name` and `server_version` answer ServerMetadata."""

    def __init__(self, core, server_name, server_version):
        self.core = core
        self.server_name, self.server_version = server_name, server_version

    def ServerLive(self, request, context):
        return service_pb2.ServerLiveResponse(live=True)

    def ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=server_ready(self.core))

    def ModelReady(self, request, context):
        return answered(self.core, context, "v2_model_ready", request.name, lambda: service_pb2.ModelReadyResponse(
            ready=model_ready(self.core, request.name, _version(request.version))))

    def ServerMetadata(self, request, context):
        return service_pb2.ServerMetadataResponse(name=self.server_name, version=self.server_version,
                                                  extensions=list(v2_tensors.EXTENSIONS))

    def ModelMetadata(self, request, context):
        def run():
            found = model_metadata(self.core, request.name, _version(request.version))
            response = service_pb2.ModelMetadataResponse(name=found["name"], versions=found["versions"],
                                                         platform=found["platform"])
            for kind in ("inputs", "outputs"):
                for tensor in found[kind]:
                    getattr(response, kind).add(name=tensor["name"], datatype=tensor["datatype"],
                                                shape=tensor["shape"])
            return response

        return answered(self.core, context, "v2_model_metadata", request.name, run)

    def ModelInfer(self, request, context):
        def run():
            if not request.model_name:
                raise errors.invalid_argument("ModelInferRequest names no model (model_name)")
            if not request.inputs:
                raise errors.invalid_argument("ModelInferRequest has no inputs")
            requested = v2_tensors.signature_name(_parameters(request.parameters))
            output_filter, ran = tuple(output.name for output in request.outputs), {}

            def build(found):
                ran["arrays"] = _input_arrays(request, found.inputs, self.core.limits.elements)
                return ran["arrays"]

            version = _version(request.model_version)
            served, signature, outputs = self.core.predict(request.model_name, version, None, requested, build,
                                                           output_filter, client_deadline(context))
            self.core.log(request.model_name, served, signature, lambda: rest_predict_log(
                request.model_name, version, None, requested, ran["arrays"], served, signature, outputs))
            response = service_pb2.ModelInferResponse(model_name=request.model_name, model_version=str(served),
                                                      id=request.id)
            raw = bool(request.raw_input_contents)
            for alias in output_filter or sorted(outputs):
                array = outputs[alias]
                datatype = v2_tensors.output_datatype(array)
                tensor = response.outputs.add(name=alias, datatype=datatype, shape=list(array.shape))
                if raw or datatype not in v2_tensors.CONTENTS_FIELD:
                    response.raw_output_contents.append(v2_tensors.to_raw(array))
                else:
                    values = array.reshape(-1).tolist()
                    getattr(tensor.contents, v2_tensors.CONTENTS_FIELD[datatype]).extend(values)
            if response.raw_output_contents and len(response.raw_output_contents) != len(response.outputs):
                raw_all = [v2_tensors.to_raw(outputs[t.name]) for t in response.outputs]
                for tensor in response.outputs:
                    tensor.ClearField("contents")
                del response.raw_output_contents[:]
                response.raw_output_contents.extend(raw_all)  # raw for one output: raw for all (one per output)
            return response

        return answered(self.core, context, "v2_infer", request.model_name, run)


def add_inference_service(server, core, server_name, server_version):
    """Registers GRPCInferenceService on a grpc.Server."""
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceService(core, server_name, server_version),
                                                                server)
