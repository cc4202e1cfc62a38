"""Server-side batching: concurrent requests for the same model version and signature run as one batch.

It follows TensorFlow Serving's BatchingSession / SharedBatchScheduler semantics for the parameters of
BatchingParameters:

* `max_batch_size`: the most rows (dim 0 summed over merged requests) in one batch. A request with more
  rows is refused (INVALID_ARGUMENT) unless `enable_large_batch_splitting`, which cuts it into pieces of
  at most `max_execution_batch_size` rows that are batched like other requests.
* `batch_timeout_micros`: a batch that is not full runs once its oldest request has waited this long (0:
  as soon as a batch thread is free; requests that arrive while all threads are busy are merged).
* `num_batch_threads`: batches run at once (worker threads shared by all queues).
* `max_enqueued_batches`: a queue holds at most this many batches' worth of rows waiting; more is
  refused with RESOURCE_EXHAUSTED ("queue full"), as TensorFlow Serving does.
* `allowed_batch_sizes`: a batch is padded (copies of its first row) up to the next allowed size and the
  padding is dropped from the outputs.

One queue per (model, version, signature, input dtypes and non-batch dims, outputs): only requests that
can be concatenated along dim 0 are merged. Requests without a common dim 0 (scalars, inputs of unequal
sizes) and empty batches run on their own, outside the queues. Every batch is counted in `stats()`.

Deadlines: a request waits for its batch until its deadline at most (DEADLINE_EXCEEDED); a request whose
deadline has passed while it was queued is dropped from the queue, not run (`stats.expired_in_queue`).
"""

from __future__ import annotations

import collections
import logging
import threading
import time

import numpy as np

from . import errors
from .deadline import NONE

log = logging.getLogger("xlnet_tf.serving")


class _Task:
    __slots__ = ("inputs", "rows", "enqueued", "deadline", "done", "result", "error")

    def __init__(self, inputs, rows, deadline=NONE):
        self.inputs = inputs
        self.rows = rows
        self.deadline = deadline
        self.enqueued = time.monotonic()
        self.done = threading.Event()
        self.result = None
        self.error = None


class _Queue:
    __slots__ = ("key", "run", "tasks", "rows")

    def __init__(self, key, run):
        self.key = key
        self.run = run
        self.tasks = collections.deque()
        self.rows = 0


class BatchStats:
    """Counters of what the scheduler ran (thread-safe snapshot via `as_dict`)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.batches = 0  # batches run
        self.merged_batches = 0  # batches that held more than one request
        self.requests = 0  # requests (tasks) run through batches
        self.rows = 0  # real rows run (without padding)
        self.padded_rows = 0  # rows added to reach an allowed batch size
        self.max_requests_per_batch = 0
        self.max_rows_per_batch = 0
        self.requests_per_batch = collections.Counter()  # {requests in a batch: number of batches}
        self.rejected_queue_full = 0
        self.unbatched = 0  # requests run alone (no common dim 0, or empty)
        self.expired_in_queue = 0  # requests (or pieces) dropped from a queue: their deadline had passed

    def record(self, requests, rows, padding):
        with self._lock:
            self.batches += 1
            self.merged_batches += requests > 1
            self.requests += requests
            self.rows += rows
            self.padded_rows += padding
            self.max_requests_per_batch = max(self.max_requests_per_batch, requests)
            self.max_rows_per_batch = max(self.max_rows_per_batch, rows)
            self.requests_per_batch[requests] += 1
            batches = self.batches
        if requests > 1:
            log.debug("batch of %d requests (%d rows)", requests, rows)
        if batches % 1000 == 0:
            log.info("batching: %s", self.summary())

    def as_dict(self):
        with self._lock:
            return {
                "batches": self.batches, "merged_batches": self.merged_batches, "requests": self.requests,
                "rows": self.rows, "padded_rows": self.padded_rows,
                "max_requests_per_batch": self.max_requests_per_batch,
                "max_rows_per_batch": self.max_rows_per_batch,
                "requests_per_batch": dict(sorted(self.requests_per_batch.items())),
                "rejected_queue_full": self.rejected_queue_full, "unbatched": self.unbatched,
                "expired_in_queue": self.expired_in_queue,
            }

    def summary(self):
        d = self.as_dict()
        mean = d["requests"] / d["batches"] if d["batches"] else 0.0
        return (f"{d['batches']} batches, {d['merged_batches']} merged (>1 request), {d['requests']} "
                f"requests, mean {mean:.2f} / max {d['max_requests_per_batch']} requests per batch, "
                f"{d['rejected_queue_full']} refused (queue full)")


class BatchScheduler:
    """Merges `submit` calls with the same key; `run(inputs) -> {alias: array}` runs a merged batch."""

    def __init__(self, config, metrics=None):
        self.config = config
        self.metrics = metrics  # monitoring.Metrics: each batch's rows
        self.stats = BatchStats()
        self._cond = threading.Condition()
        self._queues = collections.OrderedDict()
        self._stopping = False
        self._threads = [threading.Thread(target=self._worker, name=f"batch-{i}", daemon=True)
                         for i in range(config.num_batch_threads)]
        for thread in self._threads:
            thread.start()

    # -- submitting -----------------------------------------------------------------------------------

    def submit(self, key, run, inputs, rows, deadline=NONE):
        """Runs `inputs` (all with dim 0 == rows) in a batch; blocks until done or `deadline`; returns its
        outputs."""
        config = self.config
        if rows > config.max_batch_size:
            raise errors.invalid_argument(
                f"Task size {rows} is larger than maximum input batch size {config.max_batch_size} "
                "(batching parameters)")
        limit = config.execution_batch_size
        if rows <= limit:
            return self._wait(self._enqueue(key, run, [_Task(inputs, rows, deadline)])[0])
        pieces = [_Task({a: v[start:start + limit] for a, v in inputs.items()}, min(limit, rows - start), deadline)
                  for start in range(0, rows, limit)]
        results = [self._wait(task) for task in self._enqueue(key, run, pieces)]
        return {alias: np.concatenate([r[alias] for r in results]) for alias in results[0]}

    def run_alone(self, run, inputs):
        with self.stats._lock:
            self.stats.unbatched += 1
        return run(inputs)

    def _enqueue(self, key, run, tasks):
        rows = sum(t.rows for t in tasks)
        with self._cond:
            if self._stopping:
                raise errors.ServingError("UNAVAILABLE", "the server is shutting down")
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue(key, run)
            capacity = self.config.max_enqueued_batches * self.config.execution_batch_size
            if queue.rows + rows > capacity:
                with self.stats._lock:
                    self.stats.rejected_queue_full += 1
                if not queue.tasks:
                    del self._queues[key]
                raise errors.resource_exhausted(
                    f"The batch scheduling queue to which this task was submitted is full "
                    f"({queue.rows} rows waiting, at most {self.config.max_enqueued_batches} batches of "
                    f"{self.config.execution_batch_size})")
            queue.tasks.extend(tasks)
            queue.rows += rows
            self._cond.notify()
        return tasks

    @staticmethod
    def _wait(task):
        while not task.done.wait(task.deadline.remaining()):
            task.deadline.check("the batched request")  # its deadline passed: the worker drops it if queued
        if task.error is not None:
            raise task.error
        return task.result

    # -- workers --------------------------------------------------------------------------------------

    def _take(self):
        """Under the lock: a (queue, tasks) ready to run, waiting as needed; None when stopped and empty."""
        limit = self.config.execution_batch_size
        timeout = self.config.batch_timeout_micros / 1e6
        while True:
            now = time.monotonic()
            ready, wake = None, None
            for queue in list(self._queues.values()):
                if not self._drop_expired(queue):
                    continue
                due = queue.tasks[0].enqueued + timeout
                if queue.rows >= limit or due <= now or self._stopping:
                    if ready is None or queue.tasks[0].enqueued < ready.tasks[0].enqueued:
                        ready = queue
                else:
                    wake = due if wake is None else min(wake, due)
            if ready is not None:
                taken, rows = [], 0
                while ready.tasks and (not taken or rows + ready.tasks[0].rows <= limit):
                    task = ready.tasks.popleft()
                    taken.append(task)
                    rows += task.rows
                ready.rows -= rows
                if not ready.tasks:
                    del self._queues[ready.key]
                else:
                    self._queues.move_to_end(ready.key)
                return ready.run, taken
            if self._stopping:
                return None
            self._cond.wait(None if wake is None else max(0.0, wake - now))

    def _drop_expired(self, queue):
        """Under the lock: removes the queue's tasks whose deadline has passed (their callers have their
        DEADLINE_EXCEEDED already); False if the queue is then empty (and gone)."""
        if any(task.deadline.expired() for task in queue.tasks):
            kept = collections.deque(task for task in queue.tasks if not task.deadline.expired())
            dropped = len(queue.tasks) - len(kept)
            queue.rows = sum(task.rows for task in kept)
            queue.tasks = kept
            with self.stats._lock:
                self.stats.expired_in_queue += dropped
        if not queue.tasks:
            del self._queues[queue.key]
            return False
        return True

    def _worker(self):
        while True:
            with self._cond:
                item = self._take()
            if item is None:
                return
            run, tasks = item
            self._run_batch(run, tasks)

    def _run_batch(self, run, tasks):
        rows = sum(t.rows for t in tasks)
        padding = 0
        try:
            if len(tasks) == 1 and not self.config.allowed_batch_sizes:
                merged = tasks[0].inputs
            else:
                merged = {alias: np.concatenate([t.inputs[alias] for t in tasks])
                          for alias in tasks[0].inputs}
            target = next((s for s in self.config.allowed_batch_sizes if s >= rows), rows)
            padding = target - rows
            if padding:
                merged = {a: np.concatenate([v, np.repeat(v[:1], padding, axis=0)]) for a, v in merged.items()}
            outputs = run(merged)
            for alias, value in outputs.items():
                if np.ndim(value) == 0 or value.shape[0] != target:
                    raise errors.ServingError(
                        "INTERNAL", f"batched output '{alias}' has shape {np.shape(value)}, whose dim 0 is not "
                        f"the batch size {target}; this signature cannot be batched")
            start = 0
            for task in tasks:
                task.result = {a: v[start:start + task.rows] for a, v in outputs.items()}
                start += task.rows
        except errors.ServingError as error:
            for task in tasks:
                task.error = error
        except Exception as error:  # noqa: BLE001 - reported to every request of the batch
            failure = errors.internal(error, "a batch")
            for task in tasks:
                task.error = failure
        finally:
            self.stats.record(len(tasks), rows, padding)
            if self.metrics is not None:
                self.metrics.batch(rows + padding)
            for task in tasks:
                task.done.set()

    # -- stopping -------------------------------------------------------------------------------------

    def stop(self, timeout=None):
        """Runs what is queued, then ends the workers."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout)
        log.info("batching: %s", self.stats.summary())
