"""The language model's export (task "lm"): a pretrained or converted directory exported for text generation
(`xlnet_tf.export.signatures.build_generation_module`). Not a fine-tuning task."""

from xlnet_tf.tasks.base import ExportTask


class LanguageModel(ExportTask):
    """serving_default(text) -> the continuation; any prompt length from one token."""

    name = "lm"

    def min_seq_len(self, finetune_config):
        return 1


LANGUAGE_MODEL = LanguageModel()
