"""A model's status as both front ends answer it (gRPC GetModelStatus, REST GET /v1/models/NAME): a
GetModelStatusResponse built from the core's version states."""

from __future__ import annotations

from tensorflow_serving.apis import get_model_status_pb2

from . import errors

_STATE = get_model_status_pb2.ModelVersionStatus.State


def status_response(core, name, version=None, label=None):
    """-> the GetModelStatusResponse of model `name` (its versions, or the one `version` / `label` names);
    INVALID_ARGUMENT "Missing ModelSpec" without a name, the core's error for an unknown model or version."""
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
