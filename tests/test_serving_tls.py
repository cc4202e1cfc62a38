"""TLS and mutual TLS of `xlnet-tf serve` (`ssl_config_file`, TensorFlow Serving's SSLConfig) with Client's
ssl_* options, on a TCP port and a unix socket.

Certificates are made here (cryptography): a CA, a server certificate for localhost / 127.0.0.1 and a client
certificate signed by it, and an unrelated CA with its own client certificate. Two servers (TLS, mTLS) serve
one stand-in classifier; answers are compared with the SavedModel called in process. Every check prints what
was measured and what was expected (run with -s).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import tempfile
import time

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from google.protobuf import text_format

from xlnet_tf.errors import UserError
from xlnet_tf.serving import Client, ServingError, security, serve
from xlnet_tf.serving.testing import build_standin

TEXTS = ["a fine film", "dull", "a long and winding sentence about nothing much at all", "?"]
TIMEOUT = 2.0  # seconds per call; refused handshakes fail well within it
REFUSED = {"UNAVAILABLE", "UNKNOWN", "UNAUTHENTICATED", "DEADLINE_EXCEEDED"}


def check(label, measured, expected, ok):
    print(f"  CHECK {label}: measured {measured}; expected {expected} -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: measured {measured}; expected {expected}"


# --- certificates --------------------------------------------------------------------------------------


def _certificate(name, key, issuer=None, issuer_key=None, ca=False, server=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer.subject if issuer is not None else subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    elif server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key if issuer_key is not None else key, hashes.SHA256())


def _key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _cert_pem(certificate):
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


class PKI:
    pass


def _ssl_config(path, **fields):
    path.write_text(text_format.MessageToString(security.ssl_config_class()(**fields)))
    return str(path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    p = PKI()
    keys = {name: ec.generate_private_key(ec.SECP256R1()) for name in ("ca", "server", "client", "other", "stranger")}
    ca = _certificate("test CA", keys["ca"], ca=True)
    other = _certificate("other CA", keys["other"], ca=True)
    server = _certificate("localhost", keys["server"], ca, keys["ca"], server=True)
    client = _certificate("client", keys["client"], ca, keys["ca"])
    stranger = _certificate("stranger", keys["stranger"], other, keys["other"])

    def write(name, text):
        (root / name).write_text(text)
        return str(root / name)

    p.ca, p.other_ca = write("ca.pem", _cert_pem(ca)), write("other-ca.pem", _cert_pem(other))
    p.client = {"ssl_cert_file": write("client.pem", _cert_pem(client)),
                "ssl_key_file": write("client.key", _key_pem(keys["client"]))}
    p.stranger = {"ssl_cert_file": write("stranger.pem", _cert_pem(stranger)),
                  "ssl_key_file": write("stranger.key", _key_pem(keys["stranger"]))}
    p.server_fields = {"server_key": _key_pem(keys["server"]), "server_cert": _cert_pem(server)}
    p.tls_config = _ssl_config(root / "tls.config", **p.server_fields)
    p.mtls_config = _ssl_config(root / "mtls.config", custom_ca=_cert_pem(ca), client_verify=True,
                                **p.server_fields)
    p.root = root
    return p


# --- model and servers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The stand-in classifier's base path and its in-process labels for TEXTS."""
    import tensorflow as tf

    base = tmp_path_factory.mktemp("models") / "clf"
    loaded = tf.saved_model.load(build_standin(base / "1"))
    labels = loaded.signatures["serving_default"](text=tf.constant(TEXTS))["label"].numpy()
    return str(base), [label.decode() for label in labels]


def _socket_path(tmp_path_factory, name):
    path = str(tmp_path_factory.mktemp("sock") / name)
    if len(path) > 100:  # sun_path holds 108 bytes
        path = os.path.join(tempfile.mkdtemp(prefix="tls"), name)
    return path


def _server(model, config, socket_path):
    server = serve(model_base_path=model[0], model_name="clf", port=0, rest_api_port=None, host="127.0.0.1",
                   ssl_config_file=config, grpc_socket_path=socket_path).start()
    check("server up: TLS listeners", (server.grpc_target, server.socket_path), "a TCP port and the socket",
          bool(server.port) and os.path.exists(socket_path))
    return server


@pytest.fixture(scope="module")
def tls_server(pki, model, tmp_path_factory):
    server = _server(model, pki.tls_config, _socket_path(tmp_path_factory, "tls.sock"))
    yield server
    server.stop(1)


@pytest.fixture(scope="module")
def mtls_server(pki, model, tmp_path_factory):
    server = _server(model, pki.mtls_config, _socket_path(tmp_path_factory, "mtls.sock"))
    yield server
    server.stop(1)


def outcome(target, **ssl):
    """("answered", labels of TEXTS) or ("refused", status code name), and the seconds it took."""
    start = time.monotonic()
    try:
        with Client(target, "clf", timeout=TIMEOUT, retries=0, **ssl) as client:
            result = ("answered", [row["label"] for row in client.classify(TEXTS)])
    except ServingError as error:
        result = ("refused", error.code.name)
    return result, time.monotonic() - start


def check_answered(label, target, model, **ssl):
    (kind, value), seconds = outcome(target, **ssl)
    check(label, f"{kind} {value} in {seconds:.2f}s", f"answered {model[1]} (the model in process)",
          kind == "answered" and value == model[1])


def check_refused(label, target, **ssl):
    (kind, value), seconds = outcome(target, **ssl)
    check(label, f"{kind} {value} in {seconds:.2f}s", f"refused ({'/'.join(sorted(REFUSED))}) within {TIMEOUT}s",
          kind == "refused" and value in REFUSED and seconds <= TIMEOUT + 0.5)


# --- TLS -----------------------------------------------------------------------------------------------


def test_tls_client_trusting_the_ca_is_answered(tls_server, pki, model):
    check_answered("TLS, client trusts the CA (127.0.0.1)", tls_server.grpc_target, model, ssl_ca_file=pki.ca)
    check_answered("TLS, client trusts the CA (localhost)", f"localhost:{tls_server.port}", model,
                   ssl_ca_file=pki.ca)
    # A client certificate is neither asked for nor in the way without client_verify.
    check_answered("TLS, client presents a certificate anyway", tls_server.grpc_target, model,
                   ssl_ca_file=pki.ca, **pki.stranger)


def test_tls_plaintext_client_fails(tls_server):
    with Client(tls_server.grpc_target, "clf", timeout=TIMEOUT, retries=0) as client:
        check("plaintext client's channel", "TLS" if client.tls else "insecure_channel", "insecure_channel",
              not client.tls)
    check_refused("TLS server, plaintext client", tls_server.grpc_target)


def test_tls_client_trusting_another_ca_fails(tls_server, pki):
    check_refused("TLS server, client trusts another CA", tls_server.grpc_target, ssl_ca_file=pki.other_ca)


# --- mutual TLS ----------------------------------------------------------------------------------------


def test_mtls_client_without_certificate_is_refused(mtls_server, pki):
    check_refused("mTLS, no client certificate", mtls_server.grpc_target, ssl_ca_file=pki.ca)
    check_refused("mTLS, plaintext client", mtls_server.grpc_target)


def test_mtls_certificate_of_another_ca_is_refused(mtls_server, pki):
    check_refused("mTLS, client certificate signed by another CA", mtls_server.grpc_target, ssl_ca_file=pki.ca,
                  **pki.stranger)


def test_mtls_certificate_of_custom_ca_is_answered(mtls_server, pki, model):
    check_answered("mTLS, client certificate signed by custom_ca", mtls_server.grpc_target, model,
                   ssl_ca_file=pki.ca, **pki.client)


# --- unix socket ---------------------------------------------------------------------------------------


def test_open_inference_protocol_over_tls(tls_server, mtls_server, pki, model):
    """tritonclient's gRPC client (the Open Inference Protocol) on the same TLS port: answered when it trusts the
    CA (and, with mutual TLS, presents a certificate of it), refused in plaintext."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    def labels(server, **ssl):
        client = grpcclient.InferenceServerClient(server.grpc_target, ssl=bool(ssl), **ssl)
        try:
            tensor = grpcclient.InferInput("text", [len(TEXTS)], "BYTES")
            tensor.set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=np.object_))
            out = client.infer("clf", [tensor], client_timeout=TIMEOUT).as_numpy("label")
            return "answered", [v.decode() for v in out]
        except InferenceServerException as error:
            return "refused", str(error.status())
        finally:
            client.close()

    got = labels(tls_server, root_certificates=pki.ca)
    check("v2 ModelInfer over TLS, client trusts the CA", got, f"answered {model[1]}", got == ("answered", model[1]))
    got = labels(mtls_server, root_certificates=pki.ca, private_key=pki.client["ssl_key_file"],
                 certificate_chain=pki.client["ssl_cert_file"])
    check("v2 ModelInfer over mutual TLS, client certificate of the CA", got, f"answered {model[1]}",
          got == ("answered", model[1]))
    got = labels(tls_server)
    check("v2 ModelInfer in plaintext to the TLS port", got[0], "refused", got[0] == "refused")


def test_unix_socket_tls(tls_server, mtls_server, pki, model):
    tls, mtls = f"unix:{tls_server.socket_path}", f"unix:{mtls_server.socket_path}"
    check_answered("unix socket TLS, CA trusted, name localhost", tls, model, ssl_ca_file=pki.ca,
                   ssl_target_name="localhost")
    # The name checked for a unix: target is its path, which the certificate does not name.
    check_refused("unix socket TLS, no ssl_target_name", tls, ssl_ca_file=pki.ca)
    check_refused("unix socket TLS, plaintext client", tls)
    check_answered("unix socket mTLS, certificate of custom_ca", mtls, model, ssl_ca_file=pki.ca,
                   ssl_target_name="localhost", **pki.client)
    check_refused("unix socket mTLS, no client certificate", mtls, ssl_ca_file=pki.ca, ssl_target_name="localhost")
    check_refused("unix socket mTLS, certificate of another CA", mtls, ssl_ca_file=pki.ca,
                  ssl_target_name="localhost", **pki.stranger)


# --- bad configuration ---------------------------------------------------------------------------------


BAD_CONFIGS = {
    "not a text proto": ("server_key { nope", "not an SSLConfig text proto"),
    "missing server_key": (None, "server_key is empty"),
    "client_verify without custom_ca": (None, "client_verify needs custom_ca"),
    "server_key not PEM": ('server_key: "a key"\nserver_cert: "a cert"\n', "server_key is not a PEM private key"),
    "server_cert not PEM": (None, "server_cert is not a PEM certificate"),
    "missing file": (None, "not found"),
}


def _bad_config(pki, case, tmp_path):
    text, expected = BAD_CONFIGS[case]
    path = tmp_path / "ssl.config"
    if case == "missing server_key":
        _ssl_config(path, server_cert=pki.server_fields["server_cert"])
    elif case == "client_verify without custom_ca":
        _ssl_config(path, client_verify=True, **pki.server_fields)
    elif case == "server_cert not PEM":
        _ssl_config(path, server_key=pki.server_fields["server_key"],
                    server_cert="-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    elif text is not None:
        path.write_text(text)
    return str(path), expected


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_ssl_config_file_is_a_user_error(pki, tmp_path, case):
    path, expected = _bad_config(pki, case, tmp_path)
    try:
        security.server_credentials(path)
        measured = "no error"
    except UserError as error:
        measured = f"UserError: {error}"
    check(f"--ssl_config_file, {case}", measured, f"UserError naming {path} and saying {expected!r}",
          measured.startswith("UserError") and path in measured and expected in measured)


def test_bad_ssl_config_file_fails_server_start(pki, tmp_path):
    """Through serve(...).start(), as `xlnet-tf serve --ssl_config_file` runs it (no model to load)."""
    path, expected = _bad_config(pki, "client_verify without custom_ca", tmp_path)
    server = serve(model_base_path=str(tmp_path / "none" / "clf"), port=0, rest_api_port=None, host="127.0.0.1",
                   ssl_config_file=path)
    try:
        server.start()
        measured = f"started on port {server.port}"
    except UserError as error:
        measured = f"UserError: {error}"
    finally:
        server.stop(0)
    check("server start with a bad --ssl_config_file", measured, f"UserError naming {path}",
          measured.startswith("UserError") and path in measured and expected in measured)


# --- client arguments ----------------------------------------------------------------------------------


def test_client_tls_arguments(pki):
    for given, missing in ((("ssl_cert_file",), "ssl_key_file"), (("ssl_key_file",), "ssl_cert_file")):
        try:
            Client("localhost:1", "clf", ssl_ca_file=pki.ca, **{name: pki.client[name] for name in given})
            measured = "no error"
        except ValueError as error:
            measured = f"ValueError: {error}"
        check(f"Client with {given[0]} alone", measured, f"ValueError naming {missing}",
              measured.startswith("ValueError") and missing in measured)
    channel = grpc.insecure_channel("localhost:1")
    try:
        Client("localhost:1", "clf", channel=channel, ssl_ca_file=pki.ca)
        measured = "no error"
    except ValueError as error:
        measured = f"ValueError: {error}"
    finally:
        channel.close()
    check("Client with channel and ssl_ca_file", measured, "ValueError", measured.startswith("ValueError"))
    with Client("localhost:1", "clf", ssl_target_name="localhost") as client:
        check("Client with ssl_target_name alone", "TLS" if client.tls else "plaintext", "TLS (system roots)",
              client.tls)
