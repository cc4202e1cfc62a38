"""What both front ends (gRPC, REST) call: route a request to a model version, check it, run it."""

from __future__ import annotations

from . import errors
from .servable import DEFAULT_SIGNATURE


class ServerCore:
    """Predict / metadata / status over a ModelManager, with optional server-side batching."""

    def __init__(self, manager, scheduler=None):
        self.manager = manager
        self.scheduler = scheduler

    def predict(self, model_name, version, label, signature_name, arrays, output_filter=()):
        """-> (version served, signature name, {output alias: ndarray}).

        `arrays` is {input alias: ndarray}, or a function of the SignatureDef returning it (REST parses its
        JSON with the signature's dtypes, of the very version that runs it).
        """
        if not model_name:
            raise errors.invalid_argument("Missing ModelSpec: the request names no model")
        with self.manager.acquire(model_name, version, label) as handle:
            servable = handle.servable
            if callable(arrays):
                arrays = arrays(servable.signature(signature_name or DEFAULT_SIGNATURE)[1])
            prepared = servable.prepare(signature_name or DEFAULT_SIGNATURE, arrays, output_filter)
            scheduler = self.scheduler
            if scheduler is None:
                outputs = servable.run(prepared)
            elif not prepared.batch_size:  # no common dim 0, or an empty batch: nothing to merge
                outputs = scheduler.run_alone(lambda inputs: servable.run(prepared, inputs), prepared.inputs)
            else:
                key = (model_name, handle.version) + prepared.batch_key()
                outputs = scheduler.submit(key, lambda inputs: servable.run(prepared, inputs), prepared.inputs,
                                           prepared.batch_size)
            return handle.version, prepared.signature_name, outputs

    def signatures(self, model_name, version=None, label=None):
        """-> (version, {signature name: SignatureDef}) of the version a request would use."""
        with self.manager.acquire(model_name, version, label) as handle:
            return handle.version, dict(handle.servable.signatures)

    def status(self, model_name, version=None, label=None):
        return self.manager.model(model_name).status(version, label)
