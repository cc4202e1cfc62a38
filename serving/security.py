"""Transport security, as TensorFlow Serving's `--ssl_config_file`: an `SSLConfig` text proto
(tensorflow_serving/config/ssl_config.proto: `server_key`, `server_cert`, `custom_ca`, `client_verify`, each
a PEM string) turns on TLS for every gRPC listener; `client_verify: true` requires a client certificate
signed by `custom_ca` (mutual TLS), as BuildServerCredentials in TensorFlow Serving's server.cc does.

tensorflow-serving-api does not ship ssl_config_pb2, so when it cannot be imported the message is declared
here with the same package, name, field names and numbers (in a private descriptor pool): a file valid here
is valid for tensorflow_model_server.
"""

from __future__ import annotations

import re
import ssl

import grpc
from google.protobuf import text_format

from xlnet_tf.errors import UserError

from .config import read_config_file

_SSL_CONFIG = []


def ssl_config_class():
    """The SSLConfig message class: TensorFlow Serving's generated one when importable."""
    if not _SSL_CONFIG:
        try:
            from tensorflow_serving.config import ssl_config_pb2

            _SSL_CONFIG.append(ssl_config_pb2.SSLConfig)
        except ImportError:
            from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

            file = descriptor_pb2.FileDescriptorProto(name="tensorflow_serving/config/ssl_config.proto",
                                                      package="tensorflow.serving", syntax="proto3")
            message = file.message_type.add(name="SSLConfig")
            field = descriptor_pb2.FieldDescriptorProto
            for number, name in enumerate(("server_key", "server_cert", "custom_ca"), start=1):
                message.field.add(name=name, number=number, label=field.LABEL_OPTIONAL, type=field.TYPE_STRING)
            message.field.add(name="client_verify", number=4, label=field.LABEL_OPTIONAL, type=field.TYPE_BOOL)
            pool = descriptor_pool.DescriptorPool()
            pool.Add(file)
            _SSL_CONFIG.append(message_factory.GetMessageClass(
                pool.FindMessageTypeByName("tensorflow.serving.SSLConfig")))
    return _SSL_CONFIG[0]


def load_ssl_config(path, flag="--ssl_config_file"):
    """The SSLConfig message of a text-proto file (local or a URL); UserError naming the flag and file when it
    is missing, does not parse, lacks the server's key and certificate, or holds something other than PEM."""
    message = ssl_config_class()()
    try:
        text_format.Parse(read_config_file(path, flag), message)
    except FileNotFoundError:
        raise UserError(f"{flag} {path}: not found") from None
    except text_format.ParseError as error:
        raise UserError(f"{flag} {path}: not an SSLConfig text proto: {error}") from None
    for name in ("server_key", "server_cert"):
        if not getattr(message, name).strip():
            raise UserError(f"{flag} {path}: {name} is empty (a PEM string is required)")
    if message.client_verify and not message.custom_ca.strip():
        raise UserError(f"{flag} {path}: client_verify needs custom_ca (the CA that signs client certificates)")
    _check_pem(message, f"{flag} {path}")
    return message


def _check_pem(message, where):
    """UserError when a field is not PEM of its kind (gRPC would only fail later, as "Failed to bind")."""
    if not re.search(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.+-----END [A-Z ]*PRIVATE KEY-----", message.server_key,
                     re.S):
        raise UserError(f"{where}: server_key is not a PEM private key (-----BEGIN ... PRIVATE KEY-----)")
    for name in ("server_cert", "custom_ca"):
        text = getattr(message, name)
        if name == "custom_ca" and not text.strip():
            continue
        try:
            if "-----BEGIN CERTIFICATE-----" not in text:
                raise ssl.SSLError("no -----BEGIN CERTIFICATE----- block")
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=text)
        except (ssl.SSLError, ValueError) as error:
            raise UserError(f"{where}: {name} is not a PEM certificate: {error}") from None


def server_credentials(path):
    """grpc.ServerCredentials for an SSLConfig file: TLS; mTLS (client certificate required and verified
    against custom_ca) with client_verify."""
    config = load_ssl_config(path)
    return grpc.ssl_server_credentials(
        [(config.server_key.encode("utf-8"), config.server_cert.encode("utf-8"))],
        root_certificates=config.custom_ca.encode("utf-8") if config.custom_ca else None,
        require_client_auth=bool(config.client_verify))
