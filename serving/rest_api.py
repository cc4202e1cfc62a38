"""TensorFlow Serving's REST API: `RestServer`, the HTTP/1.1 server (http_server.py: connections, limits,
workers, stopping) answering with the API handler (rest_handler.py: paths, CORS, predict / classify / regress,
status, metadata, metrics) over a ServerCore. The JSON codec's names (rest_json.py) are importable from here
too, as before the split."""

from __future__ import annotations

from .http_server import HttpServer
from .rest_handler import RestHandler
from .rest_json import format_outputs, load_json, parse_predict_body

__all__ = ["RestServer", "format_outputs", "load_json", "parse_predict_body"]


class RestServer(HttpServer):
    """TensorFlow Serving's REST API on `address` (host, port; port 0: any free port) over a ServerCore,
    configured by `options` (a ServerOptions: rest_api_num_threads, rest_api_timeout_in_ms,
    rest_body_timeout, rest_api_enable_cors_support, max_request_bytes, monitoring_path).

    `serve_forever()` runs the event loop (in the caller's thread); `shutdown()` asks it to refuse new
    requests and return once the requests in progress are answered; `server_close()` waits for that and
    frees the port and the worker threads. See http_server.py for limits and statuses, rest_handler.py for
    the API.
    """

    def __init__(self, address, core, options):
        self.api = RestHandler(core, options)
        super().__init__(address, self.api.handle, options, on_answer=self.api.count,
                         cors_headers=self.api.cors_headers)
