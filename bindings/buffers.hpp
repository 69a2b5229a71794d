// The bindings' native reading of one Python object (a PyTorch tensor, a CuPy array, a buffer)
// into its address and size, and the Python side of the types read so (bindings/buffers.cpp).
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>

namespace xferscope::bindings {

// One end of a copy as read: its address and bytes, whether it is read-only (a buffer's flag),
// and whether its kind may be remembered (an object read here, that lives at least as long as
// its memory).
struct End {
  std::uintptr_t address = 0;
  std::size_t nbytes = 0;
  bool read_only = false;
  bool remembered = false;
};

// `obj` read without Python code; false (no error set) when the Python reader must decide.
bool read_end(PyObject* obj, End& e);

// read_natively (the types read here, registered by xferscope.batch.resolve) and
// native_readers (those types).
void bind_readers(nanobind::module_& m);

}  // namespace xferscope::bindings
