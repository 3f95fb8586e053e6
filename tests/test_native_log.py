"""A quiet terminal: TVM's C++ warnings go to the log file, the user sees one summary line."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

TVM_WARNING = "Fast mode segfaults when there are out-of-bounds indices"  # TVM's ONNX importer, for Gather


def _gather_model(path):
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((10, 4)).astype("float32"), "table")
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)], "g",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [table])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_tvm_warnings_go_to_the_log_file_not_the_terminal(tmp_path):
    model, log = _gather_model(tmp_path / "gather.onnx"), tmp_path / "run.log"
    proc = subprocess.run([sys.executable, "-m", "autosched.cli", "--log", str(log), "inspect", str(model),
                           "--threads", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert TVM_WARNING not in proc.stderr and TVM_WARNING not in proc.stdout
    assert TVM_WARNING in log.read_text()
    assert f"written to {log}" in proc.stderr  # the one summary line
    assert "fusion groups" in proc.stdout  # the command's own output still reaches the terminal


def test_an_unwritable_log_file_is_a_one_line_error(tmp_path):
    from autosched.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["--log", str(blocker / "sub" / "x.log"), "show", "--db", str(tmp_path / "none.db")]) == 2


def test_an_unexpected_failure_is_one_line_with_the_traceback_in_the_log(tmp_path, monkeypatch, capsys):
    from autosched.cli import database, main

    def explode(args):
        raise RuntimeError("InternalError: Check failed: (x) is false: something deep in TVM\n  File a.cc\n  more")

    monkeypatch.setattr(database, "cmd_show", explode)
    log = tmp_path / "run.log"
    assert main(["--log", str(log), "show", "--db", str(tmp_path / "x.db")]) == 1
    shown = capsys.readouterr().err.strip()
    assert shown.count("\n") == 0 and "internal error" in shown and "something deep in TVM" in shown
    assert "Traceback" in log.read_text() and "explode" in log.read_text()


@pytest.mark.parametrize("quiet", ["1", "0"])
def test_the_python_api_keeps_tvm_warnings_off_the_terminal_too(tmp_path, quiet):
    model = _gather_model(tmp_path / "gather.onnx")
    script = (f"import autosched; tasks = autosched.extract_model_tasks({str(model)!r}, 'llvm', n_threads=1); "
              "print('tasks', len(tasks))")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "AUTOSCHED_QUIET": quiet}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "tasks" in proc.stdout
    log = tmp_path / "cache" / "autosched" / "autosched.log"
    if quiet == "1":
        assert TVM_WARNING not in proc.stderr and TVM_WARNING in log.read_text()
        (line,) = proc.stderr.strip().splitlines()  # the one summary line
        assert line.startswith("autosched: ") and line.endswith(f"lines from TVM and libraries written to {log}")
    else:  # AUTOSCHED_QUIET=0: TVM's output stays where it was
        assert TVM_WARNING in proc.stderr and not log.exists()


def test_threads_opening_and_closing_the_redirection_at_once_leave_fd_2_where_it_was(tmp_path):
    """Eight threads enter and leave ``native_output_to`` at once, twenty times: the first one open redirects, the
    last one to close restores, so fd 2 ends where it began (unlocked, two threads both saw no redirection,
    both redirected, and the one that closed last put back the log file it had found: fd 2 stuck there)."""
    import threading
    import time

    from autosched.native_log import native_output_to

    def where(fd: int) -> tuple[int, int]:
        st = os.fstat(fd)
        return st.st_dev, st.st_ino

    before, log = where(2), tmp_path / "threads.log"
    for round_ in range(20):
        barrier = threading.Barrier(8)

        def enter_and_leave(i: int, barrier: threading.Barrier = barrier, round_: int = round_) -> None:
            barrier.wait()
            with native_output_to(log):
                time.sleep(0.001 * ((i + round_) % 4))  # leave in another order than entered

        threads = [threading.Thread(target=enter_and_leave, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert where(2) == before, f"round {round_}: fd 2 left pointing elsewhere (the log file?)"
    assert log.exists()
