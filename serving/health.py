"""gRPC's standard health service (`grpc.health.v1.Health`), as `--enable_grpc_healthcheck_service` turns it
on in TensorFlow Serving: the server ("") and the services "ModelService" and "PredictionService" report
SERVING while the server runs and NOT_SERVING once it stops (graceful shutdown). The servicer is
grpcio-health-checking's."""

from __future__ import annotations

from grpc_health.v1 import health, health_pb2, health_pb2_grpc

# The names tensorflow_model_server registers (server.cc); "" is the whole server.
SERVICE_NAMES = ("", "ModelService", "PredictionService")


def add_health_service(server):
    """Adds the health service to a grpc.Server; returns the servicer (its `enter_graceful_shutdown()` reports
    NOT_SERVING for every name)."""
    servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    for name in SERVICE_NAMES:
        servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return servicer
