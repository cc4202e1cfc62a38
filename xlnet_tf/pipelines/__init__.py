"""Apache Beam pipelines (`pip install 'xlnet-tf[beam]'`): pretraining data and batch prediction on any Beam
runner (DirectRunner on one machine; Dataflow, Flink, Spark on a cluster).

Nothing else in xlnet_tf imports this package, so the default install never needs Beam.

``xlnet_tf.pipelines.pretraining_data``: `create-pretraining-data --runner ...`, the same steps and records as
the single-process command. ``xlnet_tf.pipelines.predict``: `predict --export-dir ... --runner ...`, Beam's
RunInference over an exported SavedModel. ``xlnet_tf.pipelines.common``: Beam's filesystems, options, counters
and errors.
"""
