# Where the CUDA toolkit's nvcc is, for a build given no CUDACXX (nor -DCMAKE_CUDA_COMPILER): nvcc
# on PATH, else under $CUDA_HOME, $CUDA_PATH or /usr/local/cuda (XFS_CUDA_DEFAULT_ROOT, which the
# tests change). Sets XFS_NVCC, or stops with one line that says where it looked. Run by
# CMakeLists.txt before project(), and alone (cmake -P) by tests/unit/test_build.py.
if(NOT DEFINED XFS_CUDA_DEFAULT_ROOT)
  set(XFS_CUDA_DEFAULT_ROOT /usr/local/cuda)
endif()
find_program(XFS_NVCC nvcc
  PATHS "$ENV{CUDA_HOME}/bin" "$ENV{CUDA_PATH}/bin" "${XFS_CUDA_DEFAULT_ROOT}/bin"
  NO_CACHE)
if(NOT XFS_NVCC)
  message(FATAL_ERROR "xferscope needs the CUDA toolkit's nvcc to build its engine, and found "
    "none: not on PATH, nor in $CUDA_HOME/bin, $CUDA_PATH/bin or ${XFS_CUDA_DEFAULT_ROOT}/bin. "
    "Install the CUDA toolkit 12 or newer, or name nvcc with CUDACXX=/path/to/nvcc.")
endif()
message(STATUS "xferscope: CUDA compiler ${XFS_NVCC}")
