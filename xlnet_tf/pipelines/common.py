"""What both pipelines share: Beam's filesystems behind the `files` interface of the writing code, pipeline
options from the command line, running a pipeline with errors for people, and its counters."""

from __future__ import annotations

import os
import re
import shutil
import tempfile

from xlnet_tf.errors import UserError
from xlnet_tf.files import AtomicWrites

COUNTER_NAMESPACE = "xlnet_tf"
BEAM_REQUIREMENT = "apache-beam==2.77.*"
RANDOM_READ_BUFFER = 256 << 10  # bytes fetched per random read of a token chunk on an object store


def require_beam():
    """Imports apache_beam, or UserError saying how to install it."""
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        raise UserError("--runner needs Apache Beam: pip install 'xlnet-tf[beam]' "
                        f"(installs {BEAM_REQUIREMENT})") from None


class BeamFiles(AtomicWrites):
    """Every filesystem Beam reads and writes (local paths, gs:// with apache-beam[gcp], s3://, hdfs://, ...)
    through `apache_beam.io.filesystems.FileSystems`, with the interface of
    `xlnet_tf.files.TensorFlowFiles`. Files are read and written uncompressed."""

    def __init__(self):
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        self.fs, self.uncompressed = FileSystems, CompressionTypes.UNCOMPRESSED

    def join(self, *parts):
        return self.fs.join(*parts)

    def glob(self, pattern):
        return sorted(m.path for m in self.fs.match([pattern])[0].metadata_list)

    def exists(self, path):
        return self.fs.exists(path)

    def open(self, path, mode="rb"):
        if mode == "rb":
            return self.fs.open(path, compression_type=self.uncompressed)
        if mode == "wb":
            return self.fs.create(path, compression_type=self.uncompressed)
        raise ValueError(f"BeamFiles.open: mode {mode!r} (use 'rb' or 'wb')")

    def open_random(self, path):
        """`path` for many small reads at random offsets (the token chunks, where each record's random B is
        read). Beam's GCS reader fetches its whole buffer, 16 MiB by default, at every seek; on gs:// the
        file is opened with a buffer of RANDOM_READ_BUFFER instead. Other filesystems: `open(path, "rb")`."""
        system = self.fs.get_filesystem(path)
        if hasattr(system, "_gcsIO"):  # GCSFileSystem's configured GcsIO (the only reader-size hook Beam has)
            return system._gcsIO().open(path, "rb", read_buffer_size=RANDOM_READ_BUFFER)
        return self.open(path, "rb")

    def size(self, path):
        return self.fs.match([path])[0].metadata_list[0].size_in_bytes

    def makedirs(self, path):
        if not self.fs.exists(path):
            try:
                self.fs.mkdirs(path)
            except OSError:
                if not self.fs.exists(path):  # not a race with another worker
                    raise

    def rename(self, source, target):
        """Moves `source` over `target` (in one step where the filesystem can: local, GCS)."""
        try:
            self.fs.rename([source], [target])
        except Exception:
            if not self.fs.exists(target):
                raise
            self.fs.delete([target])  # a filesystem that will not overwrite (HDFS)
            self.fs.rename([source], [target])

    def remove(self, path):
        self.fs.delete([path])

    def remove_tree(self, path):
        if not self.fs.exists(path):
            return
        inside = self.glob(self.fs.join(path, "*"))
        if inside:
            self.fs.delete(inside)
        if self.fs.exists(path):  # a local folder (object stores have no folder left)
            self.fs.delete([path])

    def write_records(self, path, records):
        """Writes serialized records as one TFRecord file: TensorFlow's writer into a local temporary file
        (TFRecord framing and checksums stay TensorFlow's), then copied to `path`."""
        import tensorflow as tf

        handle, local = tempfile.mkstemp(suffix=".tfrecord")
        os.close(handle)
        try:
            with tf.io.TFRecordWriter(local) as writer:
                for record in records:
                    writer.write(record)
            with open(local, "rb") as source, self.open(path, "wb") as target:
                shutil.copyfileobj(source, target, 1 << 20)
        finally:
            os.remove(local)


def pipeline_options(runner, beam_args):
    """PipelineOptions from `--runner` and the command line's other Beam options (e.g. --project,
    --temp_location, --direct_num_workers=2 --direct_running_mode=multi_processing)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    args = ["--runner", runner, *beam_args]
    try:
        options = PipelineOptions(args)
        options.get_all_options()
    except (SystemExit, ValueError) as error:  # argparse inside Beam exits on a malformed option
        raise UserError(f"bad Beam pipeline options {' '.join(beam_args)!r}: {error}") from None
    return options


_USER_ERROR = re.compile(r"UserError: (.+?)(?: \[while running '[^']*'\])?$", re.MULTILINE)


def run(pipeline):
    """Runs `pipeline` to the end; a UserError raised by a step on a worker (a bad line, an empty file) comes
    back as that UserError, whatever the runner wrapped it in. Returns the PipelineResult."""
    try:
        result = pipeline.run()
        result.wait_until_finish()
    except UserError:
        raise
    except Exception as error:
        found = _USER_ERROR.findall(str(error))
        if found:
            raise UserError(found[-1]) from None
        raise
    state = str(result.state)
    if "DONE" not in state:
        raise UserError(f"the Beam pipeline ended in state {state}")
    return result


def counters(result):
    """{name: value} of the pipeline's counters in the xlnet_tf namespace (committed values where the runner
    has them), summed over steps."""
    from apache_beam.metrics.metric import MetricsFilter

    values = {}
    for counter in result.metrics().query(MetricsFilter().with_namespace(COUNTER_NAMESPACE))["counters"]:
        value = counter.committed if counter.committed is not None else counter.attempted
        values[counter.key.metric.name] = values.get(counter.key.metric.name, 0) + value
    return values
