"""benchmarks/corpus_zygote.py: the trace corpus's untraced runs, forked from one process that
has imported PyTorch (where it is installed), run the script as a new process would: its own
argv, environment, output, exit status; a run past its time is killed and said so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from corpus_zygote import Zygote, forkable

SCRIPT = """\
import os, sys, time
print("argv", sys.argv[1:], "env", os.environ.get("CORPUS_TEST"), "main", __name__)
print("dir", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
if "--fail" in sys.argv:
    raise ValueError("boom")
if "--exit" in sys.argv:
    sys.exit(3)
if "--sleep" in sys.argv:
    time.sleep(30)
print("done", flush=True)
"""


@pytest.fixture(scope="module")
def zygote():
    with Zygote() as z:
        yield z


def test_a_script_runs_as_its_own_process_would(tmp_path, zygote):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    rc, out, err = zygote.run([sys.executable, str(script), "--a", "b"],
                              {"CORPUS_TEST": "7", "PATH": "/usr/bin"}, 20)  # fmt: skip
    assert rc == 0 and err == ""
    assert "argv ['--a', 'b'] env 7 main __main__" in out and "dir True" in out
    assert out.rstrip().endswith("done")
    rc, out, _ = zygote.run([sys.executable, str(script)], {}, 20)  # the next run starts clean
    assert rc == 0 and "env None" in out


def test_failures_are_exit_statuses_and_a_run_past_its_time_is_killed(tmp_path, zygote):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    rc, _, err = zygote.run([sys.executable, str(script), "--fail"], {}, 20)
    assert rc == 1 and "ValueError: boom" in err
    assert zygote.run([sys.executable, str(script), "--exit"], {}, 20)[0] == 3
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([sys.executable, str(script), "--sleep"], {}, 0.5)
    assert zygote.run([sys.executable, str(script)], {}, 20)[0] == 0  # still serving


def test_only_plain_python_scripts_that_import_pytorch_are_forked(tmp_path):
    uses = tmp_path / "prog.py"
    uses.write_text("import argparse\n\ndef main():\n    import torch.nn as nn\n")
    assert forkable([sys.executable, str(uses), "--fixed"])
    assert not forkable([sys.executable, "-m", "torch.distributed.run", str(uses)])
    assert not forkable(["./memcpy_loop", "--fixed"])
    assert not forkable([sys.executable, str(tmp_path / "missing.py")])
    # JAX and CuPy programs run fresh, as their traced runs do
    corpus = Path(__file__).resolve().parents[2] / "benchmarks" / "trace_corpus"
    kinds = {"jax_train": False, "cupy_filter": False, "recsys_small_copies": True,
             "grad_accum_trainer": True}  # fmt: skip
    for name, forked in kinds.items():
        assert forkable([sys.executable, str(corpus / f"{name}.py")]) is forked, name
    (tmp_path / "other.py").write_text("import torchvision_like\n# import torch in a comment\n")
    assert not forkable([sys.executable, str(tmp_path / "other.py")])


def test_a_scripts_exit_functions_run_as_at_its_own_end(tmp_path, zygote):
    """The child ends as a script's own process does: Python's exit functions, then the C
    library's (where a traced child's injection library flushes its records), output kept."""
    script = tmp_path / "ends.py"
    script.write_text(
        "import atexit, ctypes, sys\n"
        "atexit.register(lambda: print('python exit function', flush=True))\n"
        "libc = ctypes.CDLL(None)\n"
        "hook = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(\n"
        "    lambda _: libc.write(2, b'c exit function\\n', 16))\n"
        "libc.__cxa_atexit(hook, None, None)  # as a library's atexit registers\n"
        "ctypes.library_hook = hook  # a library's code outlives the script's objects\n"
        "print('body')\n"
    )
    rc, out, err = zygote.run([sys.executable, str(script)], {"PATH": "/usr/bin"}, 20)
    assert rc == 0, err
    assert out.splitlines() == ["body", "python exit function"]
    assert "c exit function" in err


@pytest.mark.parametrize("end", ["", "sys.exit(0)\n"])
def test_a_scripts_objects_live_through_its_exit_functions(tmp_path, zygote, end):
    """As in a script's own process, what the script made is alive while its exit functions run
    (PyTorch's DataLoader leaves its workers to multiprocessing's exit function only then) and
    freed after them (a file it left open is closed, its output kept), whether the script ran
    to its end or ended with sys.exit."""
    script = tmp_path / "holds.py"
    out_file = tmp_path / "result.txt"
    script.write_text(
        "import atexit, sys, weakref\n"
        "class Held: pass\n"
        "held = Held()\n"
        "weakref.finalize(held, print, 'freed', flush=True).atexit = False\n"
        "atexit.register(print, 'exit functions', flush=True)\n"
        f"log = open({str(out_file)!r}, 'w')\n"
        "log.write('result 42')\n" + end
    )
    own = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert out_file.read_text() == "result 42"
    out_file.unlink()
    rc, out, err = zygote.run([sys.executable, str(script)], {"PATH": "/usr/bin"}, 20)
    assert rc == 0, err
    assert own.stdout.splitlines()[0] == out.splitlines()[0] == "exit functions"
    assert out_file.read_text() == "result 42"


def test_the_terminals_ctrl_c_stops_the_server_quietly():
    import signal

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus_zygote.py"
    pipe = subprocess.PIPE
    server = subprocess.Popen(
        [sys.executable, str(script)], stdin=pipe, stdout=pipe, stderr=pipe, text=True
    )
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    server.send_signal(signal.SIGINT)  # waiting for its next request, as between runs
    _, err = server.communicate(timeout=30)
    assert server.returncode == 130 and "Traceback" not in err
