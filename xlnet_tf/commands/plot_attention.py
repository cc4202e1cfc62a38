"""xlnet-tf plot-attention: every layer's and head's attention map of one text as a PNG."""

from __future__ import annotations

from xlnet_tf.commands.common import Command


def _plot_attention(args):
    from xlnet_tf.plots import plot_attention

    print(f"wrote {plot_attention(args.model_dir, args.text, args.output, args.layers)}")


def add_plot_attention_arguments(parser):
    parser.add_argument("--model-dir", required=True, help="a pretrained or fine-tuned directory (with the run "
                           "options it records, run_options.json; bi_data: the text reads forward)")
    parser.add_argument("--text", required=True)
    parser.add_argument("--output", required=True, metavar="FILE.png")
    parser.add_argument("--layers", type=int, nargs="+", help="layers to draw (default: all)")


PLOT_ATTENTION = Command(
    "plot-attention", "attention maps of every layer and head as a PNG",
    add_plot_attention_arguments, _plot_attention, input_paths=("model_dir",))
