"""What both front ends (gRPC, REST) call: route a request to a model version, check it, run it."""

from __future__ import annotations

from . import errors, gate, inference
from .deadline import NONE
from .methods import DEFAULT_SIGNATURE


class ServerCore:
    """Predict, Classify / Regress / MultiInference, metadata and status over a ModelManager, with optional
    server-side batching (for every call that runs a signature). Calls that run a signature take a
    `deadline` (a deadline.Deadline): a request whose deadline has passed is not run, a batched one stops
    waiting at it, and a long run is abandoned between its pieces (Servable.run); DEADLINE_EXCEEDED.
    `request_log`: a request_log.RequestLogger, to which the front ends hand their successful requests (`log`)."""

    def __init__(self, manager, scheduler=None, metrics=None, options=None, request_log=None):
        self.manager = manager
        self.scheduler = scheduler
        self.metrics = metrics  # monitoring.Metrics, counted by the front ends (None: not monitored)
        self.options = options
        self.request_log = request_log
        self.limits = gate.Limits.of(options)

    def count(self, model_name, api, entrypoint, status, seconds):
        """A finished request, for monitoring."""
        if self.metrics is not None:
            self.metrics.request(model_name, api, entrypoint, status, seconds)

    def log(self, model_name, version, signature_name, prediction_log):
        """A successful request, for the request logs: RequestLogger.log (a PredictionLog, or a function building
        it, called only when the request is sampled); nothing without a logger."""
        if self.request_log is not None:
            self.request_log.log(model_name, version, signature_name, prediction_log)

    def predict(self, model_name, version, label, signature_name, arrays, output_filter=(), deadline=NONE):
        """-> (version served, signature name, {output alias: ndarray}).

        `arrays` is {input alias: ndarray}, or a function of the SignatureDef returning it (REST parses its
        JSON with the signature's dtypes, of the very version that runs it).
        """
        with self.manager.acquire(model_name, version, label) as handle:
            servable = handle.servable
            if callable(arrays):  # REST: TensorFlow Serving's GetInfoMap looks the signature up, with its words
                name = signature_name or DEFAULT_SIGNATURE
                if name not in servable.signatures:
                    raise errors.invalid_argument(f'Serving signature name: "{name}" not found in signature def')
                arrays = arrays(servable.signatures[name])
            prepared = servable.prepare(signature_name or DEFAULT_SIGNATURE, arrays, output_filter, self.limits)
            return handle.version, prepared.signature_name, self._run(model_name, handle, prepared, deadline)

    def infer(self, model_name, version, label, tasks, examples, deadline=NONE, input_first=False):
        """Classify / Regress / MultiInference on `examples` (object ndarray [N] of serialized tf.Examples, or a
        function returning it) -> (version served, [(signature name, result proto)]), the results in task
        order, each holding the examples' results in input order. `tasks`: [(method, signature name or "")]
        for Classify / Regress, a MultiInferenceRequest's tasks (protos) for MultiInference.

        As in TensorFlow Serving, the model is looked up first (an unknown model is NOT_FOUND whatever the
        input), then the signatures are checked, then the input is read (`examples()`); with `input_first`
        (REST: its body), the input is read before the signatures are checked. An xlnet-tf export's Examples are
        all checked (gate.check_examples) before the first runs."""
        with self.manager.acquire(model_name, version, label) as handle:
            servable = handle.servable
            if input_first and callable(examples):
                examples = examples()
            if tasks and not isinstance(tasks[0], tuple):
                checked = inference.check_tasks(tasks, servable.signatures)
            else:
                checked = [inference.classify_regress_task(method, name, servable.signatures) for method, name in tasks]
            if callable(examples):
                examples = examples()
            # an xlnet-tf export names the features it reads: every Example is checked before any task runs
            features = (servable.export_metadata or {}).get("example_features")
            if isinstance(features, list) and features and all(isinstance(f, str) for f in features):
                gate.check_examples(examples, features)
            results = []
            for method, name, input_alias, output_aliases in checked:
                prepared = servable.prepare(name, {input_alias: examples}, output_aliases, self.limits)
                outputs = self._run(model_name, handle, prepared, deadline)
                results.append((name, inference.RESULTS[method](outputs, len(examples))))
            return handle.version, results

    def _run(self, model_name, handle, prepared, deadline):
        """Runs a prepared request on its version, through the batch scheduler when there is one."""
        deadline.check()
        servable, scheduler = handle.servable, self.scheduler
        if scheduler is None:
            return servable.run(prepared, deadline=deadline)
        if not prepared.batch_size:  # no common dim 0, or an empty batch: nothing to merge
            return scheduler.run_alone(lambda inputs: servable.run(prepared, inputs, deadline), prepared.inputs)
        key = (model_name, handle.version) + prepared.batch_key()
        return scheduler.submit(key, lambda inputs: servable.run(prepared, inputs), prepared.inputs,
                                prepared.batch_size, deadline)

    def signatures(self, model_name, version=None, label=None):
        """-> (version, {signature name: SignatureDef}) of the version a request would use."""
        version, signatures, _ = self.metadata(model_name, version, label)
        return version, signatures

    def metadata(self, model_name, version=None, label=None):
        """-> (version, {signature name: SignatureDef}, its xlnet_export.json dict or None) of the version a
        request would use."""
        with self.manager.acquire(model_name, version, label) as handle:
            return handle.version, dict(handle.servable.signatures), handle.servable.export_metadata

    def reload(self, server_config):
        """HandleReloadConfigRequest: a ModelServerConfig proto -> the served models from now on
        (INVALID_ARGUMENT for a config TensorFlow Serving refuses: not a model_config_list, a name twice, ...)."""
        from xlnet_tf.errors import UserError

        from .config import model_entries_from_proto

        if server_config.WhichOneof("config") != "model_config_list":
            raise errors.invalid_argument("ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
                                          "ModelConfigList is currently supported")
        try:
            entries = model_entries_from_proto(server_config, where="reloaded config")
        except UserError as error:
            raise errors.invalid_argument(str(error)) from None
        self.reload_entries(entries)

    def reload_entries(self, entries):
        """Serves the models of `entries` (ModelEntry list) from now on (HandleReloadConfigRequest, and the
        model config file's poller); FAILED_PRECONDITION for a version label on a version not available."""
        self.manager.reload(entries)
        if self.request_log is not None:
            self.request_log.update(entries)

    def status(self, model_name, version=None, label=None):
        """[(version, state, error or None)]; NOT_FOUND in TensorFlow Serving's words (get_model_status_impl.cc)."""
        if model_name not in self.manager.models:
            raise errors.not_found(f"Could not find version {version} of model {model_name}" if version is not None
                                   else f"Could not find any versions of model {model_name}")
        return self.manager.model(model_name).status(version, label)
