"""The serving task of the benchmark (`xlnet-tf benchmark --tasks serving`, benchmarks/serving.py) end to end, on
xlnet_tf.serving.testing's stand-in classifier (an XLNet export takes ~30 s to build, the stand-in ~1 s): the
plan, the worker (in this process), the texts of SST-2 lengths, the export in process, the two server processes
(`python -m xlnet_tf.serving serve` with batching), the closed-loop client counts, the open-loop overload run,
the targets and the report.

Speed is never asserted; every checked figure is printed next to its bound (run with -s to see them).
"""

import json
import math

from xlnet_tf.benchmarks import serving, suite
from xlnet_tf.benchmarks.suite import BenchmarkOptions
import pytest

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`


def check(name, value, bound, ok):
    print(f"{name} {value} (bound {bound})")
    assert ok, f"{name} = {value}, bound {bound}"


def test_serving_task_end_to_end(tmp_path, monkeypatch):
    """Client counts 1 and 8, 0.5 s each, 32 texts, batches of 8; the overload server takes one RPC at a time
    (--grpc_max_threads=1), so that the 4x overload is refused (RESOURCE_EXHAUSTED) whatever the machine's speed."""
    from xlnet_tf.benchmarks.worker import measure_case
    from xlnet_tf.serving.testing import build_standin

    build_standin(tmp_path / "standin" / "1")

    def in_process(arguments, timeout):
        if arguments[0] == "--matmul":
            return {"status": "ok", "gflops": {}}
        return measure_case(json.loads(arguments[0]))

    monkeypatch.setattr(suite, "run_worker", in_process)
    monkeypatch.setitem(serving.PARAMETERS, "overload_max_threads", 1)
    options = BenchmarkOptions(tasks=("serving",), implementations=("xlnet-tf-savedmodel",), long_seq_len=0,
                               serving_clients=(1, 8), serving_seconds=0.5, serving_texts=32, serving_batch_size=8,
                               serving_export_dir=str(tmp_path / "standin"))
    results = suite.run_benchmark(options, str(tmp_path / "out"), progress=False)
    rows = results["rows"]
    check("rows", [(r["label"], r["status"], r.get("error")) for r in rows], "one, ok", len(rows) == 1
          and rows[0]["status"] == "ok")
    row = rows[0]
    texts = row["texts"]
    check("texts", texts["count"], "== 32", texts["count"] == 32)
    check("text words mean", texts["pieces_mean"], f"== drawn {texts['target_mean']} (words counted exactly)",
          texts["pieces_mean"] == texts["target_mean"])
    check("text words max", texts["pieces_max"], "<= 126 (max_seq_len 128 - 2)", 1 <= texts["pieces_max"] <= 126)
    local = row["in_process"]
    check("in-process examples/s", local["examples_per_s"], "> 0, finite",
          local["examples_per_s"] > 0 and math.isfinite(local["examples_per_s"]))
    check("in-process examples", local["examples"], ">= 32 (one pass at least)", local["examples"] >= 32)
    check("in-process p99 >= p50 ms", (local["p50_ms"], local["p99_ms"]), "p50 <= p99",
          0 < local["p50_ms"] <= local["p99_ms"])
    check("client counts", [s["clients"] for s in row["served"]], "== [1, 8]",
          [s["clients"] for s in row["served"]] == [1, 8])
    for served in row["served"]:
        name = f"{served['clients']} clients"
        check(f"{name} requests/s", served["requests_per_s"], "> 0", served["requests_per_s"] > 0)
        check(f"{name} requests", served["requests"], ">= clients", served["requests"] >= served["clients"])
        check(f"{name} p50 <= p99 ms", (served["p50_ms"], served["p99_ms"]), "0 < p50 <= p99",
              0 < served["p50_ms"] <= served["p99_ms"])
        check(f"{name} wrong answers", served["wrong_answers"], "== 0", served["wrong_answers"] == 0)
        check(f"{name} errors", served["errors"], "== {}", served["errors"] == {})
        check(f"{name} x in process", served["vs_in_process"], "== requests/s / in-process examples/s",
              math.isclose(served["vs_in_process"], served["requests_per_s"] / local["examples_per_s"]))
    overload = row["overload"]
    check("overload target rate", overload["target_rate"], f"== 4 x {row['served'][-1]['requests_per_s']:.1f}",
          math.isclose(overload["target_rate"], 4 * row["served"][-1]["requests_per_s"]))
    check("overload sent", overload["sent"], "== accepted + rejected + other errors",
          overload["sent"] == overload["accepted"] + overload["rejected"] + sum(overload["other_errors"].values()))
    check("overload rejected", overload["rejected"], "> 0 (one RPC at a time)", overload["rejected"] > 0)
    check("overload rejected by the RPC limit + queue", (overload["rejected_grpc_limit"],
                                                         overload["rejected_queue_full"]), "sum == rejected",
          overload["rejected_grpc_limit"] + overload["rejected_queue_full"] == overload["rejected"])
    check("overload rejected p50 <= p99 ms", (overload["rejected_p50_ms"], overload["rejected_p99_ms"]),
          "0 < p50 <= p99", 0 < overload["rejected_p50_ms"] <= overload["rejected_p99_ms"])
    check("overload accepted", overload["accepted"], "> 0", overload["accepted"] > 0)
    check("overload accepted p50 <= p99 ms", (overload["accepted_p50_ms"], overload["accepted_p99_ms"]),
          "0 < p50 <= p99", 0 < overload["accepted_p50_ms"] <= overload["accepted_p99_ms"])
    check("overload wrong answers", overload["wrong_answers"], "== 0", overload["wrong_answers"] == 0)
    check("server limits", row["grpc_max_threads"], "overload 1, throughput > 8 clients",
          row["grpc_max_threads"]["overload"] == 1 and row["grpc_max_threads"]["throughput"] > 8)
    stats = row["batch_stats"]
    check("batched requests (throughput server)", stats["throughput"]["requests"],
          ">= the timed and untimed requests", stats["throughput"]["requests"] >= sum(
              s["requests"] + s["clients"] for s in row["served"]))
    targets = {t["target"]: t for t in results["serving"]}
    check("targets", sorted(targets), "3 measured", len(targets) == 3 and all(
        t["value"] is not None for t in targets.values()))
    check("overload wrong answers target", targets["wrong answers under overload"]["met"], "True",
          targets["wrong answers under overload"]["met"] is True)
    markdown = (tmp_path / "out" / "report.md").read_text()
    table = [line for line in markdown.splitlines() if line.startswith("| ")]
    check("report table lines", len(table), "== 1 header + 1 in process + 2 served + 2 overload", len(table) == 6)
    shown = "Serving (xlnet-tf serve, batching):" in markdown and "CPU instruction sets:" in markdown
    check("report has the serving table and the CPU flags, no step table", shown, "True",
          shown and "| tokens/s |" not in markdown)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    check("results.json overload rejected", saved["rows"][0]["overload"]["rejected"], overload["rejected"],
          saved["rows"][0]["overload"]["rejected"] == overload["rejected"])
