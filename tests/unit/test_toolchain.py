"""The build's choice of CUDA toolchain and its checks before CMake (build_backend/
xferscope_toolchain.py): a toolkit where the README says, in its order; NVIDIA's toolchain from
PyPI without one; and one line, not CMake's output, for whatever cannot build here. Fake toolkits
(scripts named nvcc) stand in for real ones, so this runs on any machine."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "build_backend"))
import xferscope_toolchain as tc  # noqa: E402


def _nvcc(root: Path, release: str = "13.0") -> Path:
    """A directory that looks like a toolkit: bin/nvcc, which reports `release`."""
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True, exist_ok=True)
    nvcc.write_text(
        "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
        f"echo 'Cuda compilation tools, release {release}, V{release}.1'\n"
    )
    nvcc.chmod(0o755)
    return nvcc


def _env(tmp_path: Path, path: list[Path] | None = None, **extra: str) -> dict[str, str]:
    env = {"PATH": os.pathsep.join(str(p) for p in (path or [tmp_path / "empty"]))}
    env.update(extra)
    return env


def _default(tmp_path: Path) -> str:
    return str(tmp_path / "usr-local-cuda")


# ---- where a toolkit is found ----


def test_cudacxx_comes_first(tmp_path):
    named = _nvcc(tmp_path / "named")
    on_path = _nvcc(tmp_path / "path")
    env = _env(tmp_path, [on_path.parent], CUDACXX=str(named))
    assert tc.find_system_nvcc(env, _default(tmp_path)) == (str(named), "CUDACXX")


def test_nvcc_on_path_comes_before_the_variables(tmp_path):
    on_path = _nvcc(tmp_path / "path")
    _nvcc(tmp_path / "home")
    env = _env(tmp_path, [on_path.parent], CUDA_HOME=str(tmp_path / "home"))
    assert tc.find_system_nvcc(env, _default(tmp_path)) == (str(on_path), "PATH")


@pytest.mark.parametrize("variable", ["CUDA_HOME", "CUDA_PATH"])
def test_a_toolkit_named_by_the_environment_is_found(tmp_path, variable):
    nvcc = _nvcc(tmp_path / "toolkit")
    env = _env(tmp_path, **{variable: str(tmp_path / "toolkit")})
    assert tc.find_system_nvcc(env, _default(tmp_path)) == (str(nvcc), f"${variable}")


def test_cuda_home_comes_before_cuda_path(tmp_path):
    home = _nvcc(tmp_path / "home")
    _nvcc(tmp_path / "cuda-path")
    env = _env(tmp_path, CUDA_HOME=str(tmp_path / "home"), CUDA_PATH=str(tmp_path / "cuda-path"))
    assert tc.find_system_nvcc(env, _default(tmp_path)) == (str(home), "$CUDA_HOME")


def test_the_default_place_is_found_with_nothing_else(tmp_path):
    nvcc = _nvcc(tmp_path / "usr-local-cuda")
    assert tc.find_system_nvcc(_env(tmp_path), _default(tmp_path)) == (
        str(nvcc),
        _default(tmp_path),
    )


def test_none_is_none(tmp_path):
    assert tc.find_system_nvcc(_env(tmp_path), _default(tmp_path)) is None


def test_a_cudacxx_that_is_no_program_is_refused(tmp_path):
    env = _env(tmp_path, CUDACXX=str(tmp_path / "missing" / "nvcc"))
    with pytest.raises(tc.BuildRefused, match=r"CUDACXX names .*not an executable nvcc"):
        tc.find_system_nvcc(env, _default(tmp_path))


# ---- which toolchain ----


def test_without_a_toolkit_the_pypi_toolchain_is_chosen(tmp_path):
    assert tc.choose(_env(tmp_path), _default(tmp_path)).source == "pypi"


def test_a_toolkit_found_is_used(tmp_path):
    nvcc = _nvcc(tmp_path / "usr-local-cuda")
    chosen = tc.choose(_env(tmp_path), _default(tmp_path))
    assert (chosen.source, chosen.nvcc) == ("system", str(nvcc))


def test_pypi_is_forced_past_a_toolkit(tmp_path):
    _nvcc(tmp_path / "usr-local-cuda")
    env = _env(tmp_path, XFERSCOPE_CUDA="pypi")
    assert tc.choose(env, _default(tmp_path)).source == "pypi"


def test_system_without_a_toolkit_is_one_line(tmp_path):
    env = _env(tmp_path, XFERSCOPE_CUDA="system")
    with pytest.raises(tc.BuildRefused) as raised:
        tc.choose(env, _default(tmp_path))
    assert "\n" not in str(raised.value)
    assert "no CUDA toolkit was found" in str(raised.value)


@pytest.mark.parametrize("value", ["conda", "yes", "13"])
def test_an_unknown_choice_is_refused_with_the_choices(tmp_path, value):
    with pytest.raises(tc.BuildRefused, match="auto, system, pypi"):
        tc.choose(_env(tmp_path, XFERSCOPE_CUDA=value), _default(tmp_path))


def test_the_pypi_toolchain_is_one_cuda_minor():
    assert tc.PYPI_TOOLCHAIN.startswith("cuda-toolkit[")
    assert tc.PYPI_TOOLCHAIN.endswith(f"=={tc.PYPI_CUDA[0]}.{tc.PYPI_CUDA[1]}.*")
    for part in ("nvcc", "nvvm", "cudart", "crt", "cccl", "cupti"):
        assert part in tc.PYPI_TOOLCHAIN


# ---- what every build needs ----


def _python_include(tmp_path: Path) -> str:
    include = tmp_path / "include"
    include.mkdir(exist_ok=True)
    (include / "Python.h").write_text("")
    return str(include)


def _compiler(tmp_path: Path) -> Path:
    cxx = tmp_path / "bin" / "g++"
    cxx.parent.mkdir(parents=True, exist_ok=True)
    cxx.write_text("#!/bin/sh\n")
    cxx.chmod(0o755)
    return cxx


def test_a_machine_with_everything_passes(tmp_path):
    cxx = _compiler(tmp_path)
    tc.check_machine(_env(tmp_path, [cxx.parent]), "linux", "x86_64", _python_include(tmp_path))


@pytest.mark.parametrize(
    ("system", "machine"),
    [("darwin", "arm64"), ("win32", "AMD64"), ("linux", "ppc64le"), ("linux", "i686")],
)
def test_an_unsupported_platform_is_one_line(tmp_path, system, machine):
    cxx = _compiler(tmp_path)
    with pytest.raises(tc.BuildRefused, match=f"this is {system} on {machine}"):
        tc.check_machine(_env(tmp_path, [cxx.parent]), system, machine, _python_include(tmp_path))


def test_no_compiler_is_one_line_naming_the_package(tmp_path):
    with pytest.raises(tc.BuildRefused, match=r"C\+\+17 compiler.*apt install g\+\+"):
        tc.check_machine(_env(tmp_path), "linux", "x86_64", _python_include(tmp_path))


def test_a_cxx_that_is_missing_is_named(tmp_path):
    cxx = _compiler(tmp_path)
    env = _env(tmp_path, [cxx.parent], CXX="clang++-99")
    with pytest.raises(tc.BuildRefused, match=r"CXX names 'clang\+\+-99'"):
        tc.check_machine(env, "linux", "x86_64", _python_include(tmp_path))


def test_a_cxx_with_flags_is_found(tmp_path):
    cxx = _compiler(tmp_path)
    env = _env(tmp_path, [cxx.parent], CXX="g++ -O2")
    tc.check_machine(env, "linux", "x86_64", _python_include(tmp_path))


def test_no_python_headers_is_one_line_naming_the_package(tmp_path):
    cxx = _compiler(tmp_path)
    empty = tmp_path / "no-include"
    empty.mkdir()
    with pytest.raises(tc.BuildRefused, match=r"Python.h.*-dev"):
        tc.check_machine(_env(tmp_path, [cxx.parent]), "linux", "x86_64", str(empty))


# ---- toolkit and driver versions ----


def test_the_toolkit_release_is_read(tmp_path):
    assert tc.nvcc_version(str(_nvcc(tmp_path, "12.4"))) == (12, 4)


def test_an_nvcc_that_says_no_release_is_refused(tmp_path):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho nothing\n")
    nvcc.chmod(0o755)
    with pytest.raises(tc.BuildRefused, match="did not say its CUDA release"):
        tc.nvcc_version(str(nvcc))


def test_a_toolkit_older_than_12_is_refused(tmp_path):
    toolchain = tc.Toolchain("system", str(_nvcc(tmp_path, "11.8")), "PATH")
    with pytest.raises(tc.BuildRefused, match=r"is CUDA 11.8; xferscope needs 12.0 or newer"):
        tc.check_toolchain(toolchain, {}, None)


def test_a_driver_older_than_the_toolkit_is_refused(tmp_path):
    toolchain = tc.Toolchain("system", str(_nvcc(tmp_path, "13.0")), "PATH")
    with pytest.raises(tc.BuildRefused) as raised:
        tc.check_toolchain(toolchain, {}, (12, 4))
    message = str(raised.value)
    assert "supports CUDA 12.4" in message and "driver 580 or newer" in message
    assert "CUDA 12 toolkit" in message and "\n" not in message


def test_the_pypi_toolchain_needs_a_cuda_13_driver():
    with pytest.raises(tc.BuildRefused, match=r"toolchain on PyPI is CUDA 13.0.*driver 580"):
        tc.check_toolchain(tc.Toolchain("pypi"), {}, (12, 8))


@pytest.mark.parametrize("driver", [None, (13, 0), (13, 2)])
def test_no_driver_or_a_new_enough_one_passes(tmp_path, driver):
    tc.check_toolchain(tc.Toolchain("pypi"), {}, driver)
    toolchain = tc.Toolchain("system", str(_nvcc(tmp_path, "13.0")), "PATH")
    tc.check_toolchain(toolchain, {}, driver)


def test_the_driver_check_can_be_waived_for_another_machine():
    tc.check_toolchain(tc.Toolchain("pypi"), {"XFERSCOPE_IGNORE_DRIVER": "1"}, (12, 8))


# ---- the PyPI toolchain's tree ----


def test_the_pypi_tree_is_found_on_the_path(tmp_path):
    root = tmp_path / "site" / tc.PYPI_SUBDIR
    _nvcc(root)
    assert tc.pypi_root([str(tmp_path / "elsewhere"), str(tmp_path / "site")]) == root


def test_a_missing_pypi_tree_says_how_to_get_it(tmp_path):
    with pytest.raises(tc.BuildRefused, match="build isolation"):
        tc.pypi_root([str(tmp_path)])


def test_the_tools_are_made_executable(tmp_path):
    root = tmp_path / tc.PYPI_SUBDIR
    for tool in ("bin/ptxas", "bin/fatbinary", "nvvm/bin/cicc"):
        (root / tool).parent.mkdir(parents=True, exist_ok=True)
        (root / tool).write_text("")
        (root / tool).chmod(0o644)
    (root / "lib").mkdir()
    (root / "lib" / "libcudart_static.a").write_text("")
    (root / "lib" / "libcudart.so.13").write_text("")
    tc.prepare_pypi_root(root)
    assert all(os.access(root / t, os.X_OK) for t in ("bin/ptxas", "nvvm/bin/cicc"))
    # nvcc links from lib64, which the wheels do not have
    assert (root / "lib64" / "libcudart_static.a").is_file()
    # and FindCUDAToolkit looks for the unversioned name a toolkit has
    assert (root / "lib" / "libcudart.so").resolve() == (root / "lib" / "libcudart.so.13").resolve()
    tc.prepare_pypi_root(root)  # twice is harmless


# ---- through the backend, as pip calls it ----


def _backend(hook: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("scikit_build_core")
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        pytest.skip("this Python has no headers, which the backend checks before all else")
    code = (
        "import sys; sys.path.insert(0, 'build_backend'); import xferscope_build as b; "
        f"print('REQUIRES', b.{hook}())"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k not in ("CUDACXX", "CUDA_HOME", "CUDA_PATH")}
    cxx = _compiler(tmp_path)
    keep["PATH"] = str(cxx.parent)  # a compiler, and no nvcc
    keep["XFERSCOPE_IGNORE_DRIVER"] = "1"
    keep.update(extra)
    return keep


def test_the_backend_asks_for_the_pypi_toolchain_when_told(tmp_path):
    ran = _backend("get_requires_for_build_wheel", _clean_env(tmp_path, XFERSCOPE_CUDA="pypi"))
    assert ran.returncode == 0, ran.stderr
    assert tc.PYPI_TOOLCHAIN in ran.stdout


def test_the_backend_refuses_in_one_line_before_cmake(tmp_path):
    env = _clean_env(tmp_path, CUDACXX=str(tmp_path / "no" / "nvcc"))
    ran = _backend("get_requires_for_build_wheel", env)
    assert ran.returncode != 0
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("xferscope cannot be built here: ")
    assert "Traceback" not in ran.stderr and "CMake" not in ran.stderr
