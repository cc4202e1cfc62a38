"""Figures people look at, written as PNG files: attention maps (one heat map per layer and head, as in the
XLNet paper's appendix), and the shared helpers that training curves use."""

from __future__ import annotations

import logging

import numpy as np

from xlnet_tf import files

log = logging.getLogger(__name__)


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, dpi=100):
    """Renders `fig` as PNG bytes and publishes them at `path` (any filesystem, its folder created:
    `files.write_bytes`), closes it, returns `path`."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    pyplot().close(fig)
    files.write_bytes(path, buffer.getvalue())
    return path


def attention_maps(model_dir, text, lower_case=None):
    """(tokens, probabilities [n_layer, n_head, T, T]) of the content stream for `text` followed by
    `<sep> <cls>`, as a single-segment classification input, with the run options the directory records
    (run_options.json: clamp_len, attn_type, ...); with bi_data, as the forward half of a batch reads it."""
    from xlnet_tf.model import RUN_OPTIONS_FILE, SPM_FILE, XLNetModel, read_run_options
    from xlnet_tf.tokenization import XLNetTokenizer, read_tokenizer_settings, tokenizer_settings

    # lower_case None: the directory's (xlnet_tokenizer.json or finetune_config.json), as its other settings
    settings = tokenizer_settings(read_tokenizer_settings(model_dir), lower_case=lower_case)
    tokenizer = XLNetTokenizer(files.join(model_dir, SPM_FILE), **settings)
    ids = tokenizer.encode([text])[0] + [tokenizer.sep_id, tokenizer.cls_id]
    one_row = {}
    if read_run_options(model_dir).get("bi_data"):  # one text is one row: it reads forward, as a batch's first half
        log.warning("%s records bi_data = true: the text is drawn as the forward (first) half of a bi_data batch "
                    "reads it", files.join(model_dir, RUN_OPTIONS_FILE))
        one_row["bi_data"] = False
    model = XLNetModel.from_pretrained(model_dir, dropout=0.0, dropatt=0.0, **one_row)
    segments = [0] * (len(ids) - 1) + [2]
    outputs = model({"input_ids": np.array([ids], np.int32), "segment_ids": np.array([segments], np.int32)},
                    return_attention=True)
    probs = np.stack([np.asarray(layer, np.float32)[0] for layer in outputs["attention"]])
    pieces = [p.decode() if isinstance(p, bytes) else str(p) for p in tokenizer.id_to_piece(ids).numpy()]
    return pieces, probs


def plot_attention(model_dir, text, output, layers=None):
    """Writes a PNG grid (rows: layers, columns: heads) of attention maps; returns the path."""
    plt = pyplot()
    tokens, probs = attention_maps(model_dir, text)
    layers = list(range(probs.shape[0])) if layers is None else list(layers)
    heads = probs.shape[1]
    size = max(2.2, 0.18 * len(tokens))
    fig, axes = plt.subplots(len(layers), heads, figsize=(size * heads, size * len(layers)), squeeze=False)
    for row, layer in enumerate(layers):
        for head in range(heads):
            ax = axes[row][head]
            ax.imshow(probs[layer, head], cmap="viridis", vmin=0.0, vmax=float(probs[layer, head].max()))
            ax.set_title(f"layer {layer} head {head}", fontsize=8)
            if len(tokens) <= 48:
                ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=5)
                ax.set_yticks(range(len(tokens)), tokens, fontsize=5)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
    fig.suptitle("content-stream attention (rows: queries, columns: keys)")
    fig.tight_layout()
    return save_figure(fig, output, dpi=110)
