"""What `xlnet-tf serve` reads from its container's environment when no model flag is given: TensorFlow
Serving's Docker image's $MODEL_NAME / $MODEL_BASE_PATH, and Vertex AI's custom-container contract.

Vertex AI (a prediction container): $AIP_HTTP_PORT (default 8080) is the REST port, on every interface;
$AIP_HEALTH_ROUTE (default /health) answers GET with 200 once the model has a version loaded and 503 before;
$AIP_PREDICT_ROUTE (default /predict) answers POST {"instances": [...], "parameters"?: {"signature_name"?}}
with {"predictions": [...]} (TensorFlow Serving's row format: each instance a value, or an object naming the
signature's inputs); $AIP_STORAGE_URI (gs://..., or any path the file layer reads) holds the model: a SavedModel
directory (its saved_model.pb at the top, served as version 1) or a base path of integer versions. The model's
name (metrics, logs, the other APIs) is $AIP_MODEL_NAME, else "model". Vertex mode starts when $AIP_HTTP_PORT or
$AIP_STORAGE_URI is set; the model flags, when given, win over $AIP_STORAGE_URI, and the routes then serve
$AIP_MODEL_NAME or --model_name."""

from __future__ import annotations

import dataclasses

from xlnet_tf.errors import UserError

DEFAULT_MODEL_NAME = "model"  # TensorFlow Serving's Docker image's $MODEL_NAME default, and Vertex mode's
VERTEX_DEFAULT_PORT, VERTEX_DEFAULT_HEALTH, VERTEX_DEFAULT_PREDICT = 8080, "/health", "/predict"


@dataclasses.dataclass(frozen=True)
class VertexRoutes:
    """Vertex AI's routes on the REST port: GET `health_route`, POST `predict_route`, for model `model_name`."""

    health_route: str
    predict_route: str
    model_name: str


def apply_environment(options, environ):
    """Fills `options` (a ServerOptions without model flags, or with them) from the environment, as the module
    docstring says."""
    if "AIP_HTTP_PORT" in environ or "AIP_STORAGE_URI" in environ:
        _apply_vertex(options, environ)
    elif not options.model_config_file and not options.model_base_path \
            and ("MODEL_NAME" in environ or "MODEL_BASE_PATH" in environ):
        name = environ.get("MODEL_NAME") or DEFAULT_MODEL_NAME
        options.model_name = options.model_name or name
        options.model_base_path = (environ.get("MODEL_BASE_PATH") or "/models").rstrip("/") + "/" + name


def _apply_vertex(options, environ):
    port = environ.get("AIP_HTTP_PORT") or str(VERTEX_DEFAULT_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"$AIP_HTTP_PORT must be a port number, got {port!r}")
    routes = {}
    for variable, default in (("AIP_HEALTH_ROUTE", VERTEX_DEFAULT_HEALTH), ("AIP_PREDICT_ROUTE", VERTEX_DEFAULT_PREDICT)):
        routes[variable] = environ.get(variable) or default
        if not routes[variable].startswith("/"):
            raise UserError(f"${variable} must be a path starting with '/', got {routes[variable]!r}")
    if routes["AIP_HEALTH_ROUTE"] == routes["AIP_PREDICT_ROUTE"]:
        raise UserError(f"$AIP_HEALTH_ROUTE and $AIP_PREDICT_ROUTE are the same path: {routes['AIP_HEALTH_ROUTE']}")
    if not options.model_config_file and not options.model_base_path:
        storage = environ.get("AIP_STORAGE_URI")
        if not storage:
            raise UserError("Vertex AI mode ($AIP_HTTP_PORT set) needs the model: set $AIP_STORAGE_URI (the model's "
                            "artefacts) or give --model_base_path / --model_config_file")
        options.model_base_path = storage.rstrip("/")
        options.model_name = environ.get("AIP_MODEL_NAME") or DEFAULT_MODEL_NAME
    options.rest_api_port, options.host = int(port), "0.0.0.0"
    model = environ.get("AIP_MODEL_NAME") or options.model_name or DEFAULT_MODEL_NAME
    options.vertex = VertexRoutes(routes["AIP_HEALTH_ROUTE"], routes["AIP_PREDICT_ROUTE"], model)
