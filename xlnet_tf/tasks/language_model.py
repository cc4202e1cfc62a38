"""The language model's export (task "lm"): a pretrained or converted directory exported for text generation
(`xlnet_tf.export.signatures.build_generation_module`). Not a fine-tuning task."""

from xlnet_tf.tasks.base import ExportTask


class LanguageModel(ExportTask):
    """serving_default(text) -> the continuation; any prompt length from one token."""

    name = "lm"

    def min_seq_len(self, finetune_config):
        return 1

    def text_pieces(self, finetune_config, length, doc_len, width):
        """A prompt keeps its last max_seq_len pieces (`tokenize` reads what a prompt reads)."""
        return {"text": (length, "last")}


LANGUAGE_MODEL = LanguageModel()
