"""TensorFlow Serving's `--mixed_precision=bfloat16`: TensorFlow's automatic mixed-precision rewrite for oneDNN
(`auto_mixed_precision_onednn_bfloat16`, a grappler pass) on every model's Session, which runs a float32
SavedModel's matmuls and their neighbours in bfloat16. The pass does nothing on a CPU whose oneDNN build has no
bfloat16 support, so the server probes it once and refuses the flag there instead of silently serving float32."""

from __future__ import annotations

import functools


def with_bfloat16_rewrite(session_config=None):
    """A copy of `session_config` (a tf.compat.v1.ConfigProto, or None) with the bfloat16 rewrite on."""
    import tensorflow as tf
    from tensorflow.core.protobuf import rewriter_config_pb2

    config = tf.compat.v1.ConfigProto()
    if session_config is not None:
        config.CopyFrom(session_config)
    config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 = rewriter_config_pb2.RewriterConfig.ON
    return config


@functools.lru_cache(maxsize=None)
def rewrite_applies(option="auto_mixed_precision_onednn_bfloat16", dtype="bfloat16"):
    """Whether the grappler rewrite `option` (a RewriterConfig field) changes float32 MatMuls on this machine:
    Casts to `dtype` in the graph the Session runs. With TensorFlow's float16 rewrite for CPUs
    (auto_mixed_precision_cpu, "float16") it finds its Casts on any CPU: the probe sees what grappler did."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.protobuf import rewriter_config_pb2

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [8, 8], name="x")
        w = tf.compat.v1.placeholder(tf.float32, [8, 8], name="w")
        y = tf.nn.relu(tf.matmul(tf.nn.relu(tf.matmul(x, w)), w))
    config = tf.compat.v1.ConfigProto()
    setattr(config.graph_options.rewrite_options, option, rewriter_config_pb2.RewriterConfig.ON)
    config.graph_options.rewrite_options.min_graph_nodes = -1  # grappler skips graphs this small otherwise
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        session.run(y, {"x:0": np.ones((8, 8), np.float32), "w:0": np.ones((8, 8), np.float32)},
                    options=tf.compat.v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)
    wanted = tf.as_dtype(dtype).as_datatype_enum
    return any(node.op == "Cast" and node.attr["DstT"].type == wanted
               for partition in metadata.partition_graphs for node in partition.node)


def bfloat16_rewrite_applies():
    """Whether --mixed_precision=bfloat16's rewrite changes anything on this CPU."""
    return rewrite_applies("auto_mixed_precision_onednn_bfloat16", "bfloat16")
