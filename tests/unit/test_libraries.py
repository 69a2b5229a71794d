"""Where the engine's run-time libraries come from (core/libraries.py): the file a user names,
else cuda-pathfinder's, of the engine's CUDA major; anything else is one line naming the pip
package for that major. cuda-pathfinder's answer is replaced here, so this runs anywhere."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from xferscope.core import libraries
from xferscope.core.errors import BlasError, NcclError
from xferscope.trace import runner
from xferscope.trace.runner import TraceError


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for library in libraries.LIBRARIES.values():
        monkeypatch.delenv(library.variable, raising=False)
    monkeypatch.setattr(libraries, "cuda_major", lambda: 13)


def _pathfinder(monkeypatch, found: dict[str, str]) -> list[str]:
    """A stand-in for cuda.pathfinder that finds `found` (name -> path) and nothing else."""
    asked: list[str] = []

    class NotFound(RuntimeError):
        pass

    def load(name: str) -> types.SimpleNamespace:
        asked.append(name)
        if name not in found:
            raise NotFound(f"Failure finding {name}: searched site-packages, conda, loader")
        return types.SimpleNamespace(abs_path=found[name])

    module = types.ModuleType("cuda.pathfinder")
    module.load_nvidia_dynamic_lib = load  # type: ignore[attr-defined]
    module.DynamicLibNotFoundError = NotFound  # type: ignore[attr-defined]
    package = types.ModuleType("cuda")
    package.pathfinder = module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cuda", package)
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", module)
    return asked


def _file(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_text("")
    return str(path)


def test_the_file_pathfinder_finds_is_given_to_the_engine(monkeypatch, tmp_path):
    path = _file(tmp_path, "libcublasLt.so.13")
    asked = _pathfinder(monkeypatch, {"cublasLt": path})
    assert libraries.point_engine_at("cublasLt") == path
    assert asked == ["cublasLt"]
    import os

    assert os.environ["XFERSCOPE_LIBCUBLASLT"] == path


def test_a_file_named_by_the_user_comes_first(monkeypatch, tmp_path):
    path = _file(tmp_path, "my-cupti.so")
    asked = _pathfinder(monkeypatch, {})
    monkeypatch.setenv("XFERSCOPE_LIBCUPTI", path)
    assert libraries.find("cupti") == path
    assert asked == []


def test_a_named_file_that_is_not_there_is_one_line(monkeypatch, tmp_path):
    _pathfinder(monkeypatch, {})
    monkeypatch.setenv("XFERSCOPE_LIBCUBLASLT", str(tmp_path / "gone.so"))
    with pytest.raises(libraries.LibraryMissingError, match=r"\$XFERSCOPE_LIBCUBLASLT names"):
        libraries.find("cublasLt")


@pytest.mark.parametrize(
    ("name", "major", "package", "soname"),
    [
        ("cublasLt", 13, "nvidia-cublas", "libcublasLt.so.13"),
        ("cublasLt", 12, "nvidia-cublas-cu12", "libcublasLt.so.12"),
        ("cupti", 13, "nvidia-cuda-cupti", "libcupti.so.13"),
        ("cupti", 12, "nvidia-cuda-cupti-cu12", "libcupti.so.12"),
        ("nccl", 13, "nvidia-nccl-cu13", "libnccl.so.2"),
    ],
)
def test_missing_is_one_line_naming_the_package(monkeypatch, name, major, package, soname):
    _pathfinder(monkeypatch, {})
    monkeypatch.setattr(libraries, "cuda_major", lambda: major)
    with pytest.raises(libraries.LibraryMissingError) as raised:
        libraries.find(name)
    message = str(raised.value)
    assert f"pip install {package}`" in message and soname in message
    assert "\n" not in message


def test_a_library_of_another_cuda_major_is_not_taken(monkeypatch, tmp_path):
    _pathfinder(monkeypatch, {"cupti": _file(tmp_path, "libcupti.so.12")})
    with pytest.raises(libraries.LibraryMissingError, match="of another CUDA major"):
        libraries.find("cupti")


def test_a_full_version_suffix_is_the_same_major(monkeypatch, tmp_path):
    path = _file(tmp_path, "libcublasLt.so.13.1.0.3")
    _pathfinder(monkeypatch, {"cublasLt": path})
    assert libraries.find("cublasLt") == path


def test_without_cuda_pathfinder_the_message_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda", None)
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)
    with pytest.raises(libraries.LibraryMissingError, match="pip install cuda-pathfinder"):
        libraries.find("cublasLt")


def test_the_caller_chooses_the_error(monkeypatch):
    _pathfinder(monkeypatch, {})
    with pytest.raises(BlasError):
        libraries.find("cublasLt", BlasError)
    with pytest.raises(NcclError):
        libraries.point_engine_at("nccl", NcclError)


def test_the_engine_reports_the_cuda_it_was_built_with(monkeypatch):
    monkeypatch.undo()
    from xferscope.core.compiled import engine_module

    built = int(engine_module().CUDA_BUILT)
    assert built >= 12000 and libraries.cuda_major() == built // 1000


def test_trace_refuses_before_starting_the_program_without_cupti(monkeypatch, tmp_path):
    _pathfinder(monkeypatch, {})
    marker = tmp_path / "ran"
    program = tmp_path / "prog.sh"
    program.write_text(f"#!/bin/sh\ntouch {marker}\n")
    program.chmod(0o755)
    monkeypatch.setattr(runner, "injection_library", lambda: tmp_path / "libinject.so")
    with pytest.raises(TraceError, match=r"pip install nvidia-cuda-cupti`"):
        runner.run_traced([str(program)], tmp_path)
    assert not marker.exists()


def test_trace_gives_the_program_the_cupti_found(monkeypatch, tmp_path):
    cupti = _file(tmp_path, "libcupti.so.13")
    _pathfinder(monkeypatch, {"cupti": cupti})
    seen = tmp_path / "env"
    program = tmp_path / "prog.sh"
    program.write_text(f'#!/bin/sh\necho "$XFERSCOPE_LIBCUPTI" > {seen}\n'
                       f'echo "$XFERSCOPE_TRACE_SAMPLE_S $PYTHONPATH $NVTX_INJECTION64_PATH" >> '
                       f'{seen}\n')  # fmt: skip
    program.chmod(0o755)
    monkeypatch.setattr(runner, "injection_library", lambda: tmp_path / "libinject.so")
    monkeypatch.setenv("PYTHONPATH", "/their/path")
    ran = runner.run_traced([str(program)], tmp_path, look_every=0.02)
    assert ran.returncode == 0
    said = seen.read_text().splitlines()
    assert said[0] == cupti
    # the library looks at each Python main thread (nothing added to the program's path), and
    # NVTX ranges go to the CUPTI found
    assert said[1] == f"0.02 /their/path {cupti}"


def test_a_ctrl_c_while_the_program_starts_reaches_it_once(monkeypatch, tmp_path):
    """The signal handlers are set before the program starts: a Ctrl-C that arrives while it
    starts is kept and sent to its process group (its session's, as the terminal would send it
    untraced) as soon as it runs, once."""
    import os
    import signal

    _pathfinder(monkeypatch, {"cupti": _file(tmp_path, "libcupti.so.13")})
    monkeypatch.setattr(runner, "injection_library", lambda: tmp_path / "libinject.so")
    sent: list[tuple[int, int]] = []

    class Program:
        pid = 4242

        def wait(self) -> int:
            return -signal.SIGINT

    def starting(*_args: object, **kw: object) -> Program:
        assert kw["start_new_session"]  # its own group, led by it
        os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, mid-start
        return Program()

    monkeypatch.setattr(runner.subprocess, "Popen", starting)
    monkeypatch.setattr(runner.os, "killpg", lambda group, signum: sent.append((group, signum)))
    ran = runner.run_traced(["/bin/true"], tmp_path)
    assert sent == [(4242, signal.SIGINT)] and ran.interrupted and ran.exit_status == 130
    assert ran.stop_signal == signal.SIGINT
