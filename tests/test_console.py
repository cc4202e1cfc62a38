"""What commands print: their own lines on the console, other libraries' logs in a log file (--verbose: both)."""

import logging

from xlnet_tf import console


def test_train_spm_keeps_the_trainer_log_off_the_console(tmp_path, capfd):
    """SentencePiece's trainer writes its configuration and progress to file descriptor 2: into PREFIX.log,
    and on the console only with --verbose."""
    from test_pretraining import corpus_lines

    from xlnet_tf.cli import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(list(corpus_lines())[:400]), encoding="utf-8")
    seen = {}
    for verbose in ((), ("--verbose",)):
        prefix = tmp_path / ("verbose" if verbose else "quiet") / "spm"
        assert main(["train-spm", "--input", str(corpus), "--model-prefix", str(prefix), "--vocab-size", "300",
                     *verbose]) == 0
        out, err = capfd.readouterr()
        log = prefix.with_suffix(".log")
        seen[bool(verbose)] = (out + err, log.read_text() if log.exists() else "")
    with capfd.disabled():
        for verbose, (shown, log) in seen.items():
            print(f"train-spm{' --verbose' if verbose else ''}: trainer lines on the console "
                  f"{shown.count('trainer_interface.cc')}, in spm.log {log.count('trainer_interface.cc')}")
    quiet_console, quiet_log = seen[False]
    assert "trainer_interface.cc" not in quiet_console and "trainer_interface.cc" in quiet_log
    assert "wrote " in quiet_console  # the command's own line stays
    assert "trainer_interface.cc" in seen[True][0]  # the check can see them


def test_log_records_are_sorted_between_console_and_file(tmp_path, capfd):
    log_file = tmp_path / "work" / console.LOG_FILE
    try:
        for verbose in (False, True):
            console.configure(str(log_file), verbose=verbose)
            logging.getLogger("xlnet_tf.training").info("own progress %s", verbose)
            # Another library's INFO (absl's own logger may be configured by other tests in this process).
            logging.getLogger("other_library.io").info("Sharding callback duration: 35 microseconds %s", verbose)
            logging.getLogger("tensorflow").warning("a warning from TensorFlow %s", verbose)
    finally:
        console.configure()  # back to the console only (the handlers are replaced, not added)
    err = capfd.readouterr().err
    log = log_file.read_text()
    with capfd.disabled():
        print("console:", err.strip().splitlines())
        print("file lines:", len(log.splitlines()), "(bound 6)")
    assert "own progress False" in err and "a warning from TensorFlow False" in err
    assert "Sharding callback duration: 35 microseconds False" not in err  # quiet: third-party INFO off the console
    assert "Sharding callback duration: 35 microseconds True" in err  # --verbose shows it
    assert len(log.splitlines()) == 6 and "microseconds False" in log
    handlers = [h for h in logging.getLogger().handlers if h in console._installed]
    assert len(handlers) == 1  # one console handler left: configure never stacks them


def test_the_console_is_whatever_stderr_is_when_a_record_comes(tmp_path, monkeypatch):
    """The console handler writes to the current sys.stderr: a stream that replaced it after `configure` gets
    the lines, and the one it replaced (closed meanwhile, as a finished test's capture is) is not written to."""
    import io

    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    console.configure()
    monkeypatch.setattr("sys.stderr", second)
    first.close()
    logging.getLogger("xlnet_tf.check").info("after the swap")
    shown = second.getvalue()
    print(f"the new stderr got {shown.strip()!r} (bound: the record); the closed one was not written to")
    assert "INFO xlnet_tf.check: after the swap" in shown and "Logging error" not in shown
    console.configure()  # back to this test's own stderr
