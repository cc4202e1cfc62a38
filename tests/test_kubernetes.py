"""The Kubernetes and KServe manifests of docs/guides/kubernetes.md, checked against the server without a
cluster: every flag parses as `xlnet-tf serve`'s, the ports in the flags are the container's ports, the probes'
paths answer 200 on a running server and name its REST port, the TLS file is in the Secret's mount, and the
termination grace period covers the server's own shutdown."""

from __future__ import annotations

import os
import re
import urllib.request

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PAGE = os.path.join(ROOT, "docs", "guides", "kubernetes.md")


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


def manifests():
    """{kind: manifest} of the page's YAML blocks."""
    with open(PAGE, encoding="utf-8") as f:
        blocks = re.findall(r"```yaml\n(.*?)```", f.read(), re.DOTALL)
    found = {}
    for block in blocks:
        for document in yaml.safe_load_all(block):
            found[document["kind"]] = document
    return found


def serve_options(container):
    """The ServerOptions `xlnet-tf serve` makes of a container's command and args (no environment)."""
    from xlnet_tf.cli import build_parser
    from xlnet_tf.serving.cli import server_options

    check(f"{container['name']}: command", container["command"], "['xlnet-tf', 'serve']",
          container["command"] == ["xlnet-tf", "serve"])
    args = build_parser().parse_args(["serve", *container["args"]])  # a flag it does not know: SystemExit
    return args, server_options(args, environ={})


def port_number(container, port):
    """A probe's port (a number or a container port's name) -> its number."""
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in container["ports"] if p.get("name") == port)


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    """A running server (the stand-in classifier) to ask the probes' paths."""
    from xlnet_tf.serving import serve
    from xlnet_tf.serving.testing import build_standin

    base = tmp_path_factory.mktemp("k8s") / "clf"
    build_standin(base / "1")
    with serve(model_base_path=str(base), model_name="clf", port=0, rest_api_port=0, poll_interval=0) as server:
        yield server


def answers(server, path):
    with urllib.request.urlopen(server.rest_url + path, timeout=30) as answer:
        return answer.status


def check_probes(label, container, rest_port, live_server):
    for probe in ("readinessProbe", "livenessProbe"):
        if probe not in container:
            continue
        get = container[probe]["httpGet"]
        port = port_number(container, get["port"])
        check(f"{label} {probe} port", port, f"the REST port ({rest_port})", port == rest_port)
        status = answers(live_server, get["path"])
        check(f"{label} {probe} path {get['path']} on a running server", status, "200", status == 200)


def test_deployment(live_server):
    found = manifests()
    check("manifests on the page", sorted(found), "ConfigMap, Deployment, InferenceService, Service",
          sorted(found) == ["ConfigMap", "Deployment", "InferenceService", "Service"])
    pod = found["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args, options = serve_options(container)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    check("gRPC and REST ports of the flags", (options.port, options.rest_api_port),
          f"the container's grpc / http ports {ports}", (options.port, options.rest_api_port) == (ports["grpc"],
                                                                                                 ports["http"]))
    check("listens on every interface (TensorFlow Serving's spellings)", options.host, "0.0.0.0",
          options.host == "0.0.0.0")
    check_probes("Deployment", container, options.rest_api_port, live_server)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    tls_volume = next(name for name, path in mounts.items() if options.ssl_config_file.startswith(path + "/"))
    check("--ssl_config_file is in a mounted Secret", (options.ssl_config_file, volumes[tls_volume]),
          "a secret volume", "secret" in volumes[tls_volume])
    config_volume = next(name for name, path in mounts.items() if options.model_config_file.startswith(path + "/"))
    config_map = found["ConfigMap"]
    key = os.path.basename(options.model_config_file)
    check("--model_config_file comes from the ConfigMap", (config_volume, key),
          f"configMap {config_map['metadata']['name']} holding {key}",
          volumes[config_volume]["configMap"]["name"] == config_map["metadata"]["name"] and key in config_map["data"])
    from xlnet_tf.serving.config import parse_model_server_config

    parse_model_server_config(config_map["data"][key], where="the ConfigMap's models.config")
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    needed = pause + args.grace_period + options.drain_timeout
    grace = pod["terminationGracePeriodSeconds"]
    check("terminationGracePeriodSeconds vs preStop + --grace-period + --drain-timeout", grace, f"> {needed:g}",
          grace > needed)
    service = found["Service"]["spec"]
    targets = sorted(p["targetPort"] for p in service["ports"])
    check("Service targets the container's ports", targets, sorted(ports), targets == sorted(ports))
    check("Service selects the pods", service["selector"], found["Deployment"]["spec"]["selector"]["matchLabels"],
          service["selector"] == found["Deployment"]["spec"]["selector"]["matchLabels"])


def test_kserve_inference_service(live_server):
    service = manifests()["InferenceService"]
    (container,) = service["spec"]["predictor"]["containers"]
    _, options = serve_options(container)
    first_port = container["ports"][0]["containerPort"]
    check("KServe routes REST to the first container port: --rest_api_port", options.rest_api_port,
          f"== {first_port}", options.rest_api_port == first_port)
    check("a model to serve", (options.model_name, options.model_base_path), "name and base path",
          bool(options.model_name and options.model_base_path))
    check_probes("InferenceService", container, options.rest_api_port, live_server)
