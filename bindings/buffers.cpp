// xferscope._engine's native reading of copy_many's objects (bindings/resolve.cpp): registered
// PyTorch and CuPy types by their attributes or DLPack's exchange API, others as buffers.
#include "buffers.hpp"

#include <Python.h>
#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace xferscope::bindings {

namespace {

// DLPack's C exchange API (dlpack.h 1.2 and later): a framework sets __dlpack_c_exchange_api__
// on its tensor type, a table of C functions; dltensor_from_py_object_no_sync fills a DLTensor
// for one object in a single C call, no Python code run. The layouts are the standard's.
struct DLTensorView {
  void* data;
  std::int32_t device_type, device_id;
  std::int32_t ndim;
  std::uint8_t code, bits;
  std::uint16_t lanes;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null: compact
  std::uint64_t byte_offset;
};
using DLTensorFrom = int (*)(void* py_object, DLTensorView* out);
struct DLPackExchangeTable {
  std::uint32_t major, minor;  // the header: the version, then an older table
  void* older;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  DLTensorFrom dltensor_from_py_object_no_sync;  // may be null
  void* current_work_stream;
};

// `type`'s DLPack exchange function, or null: the attribute is a capsule (PyTorch's) or an
// integer address (the standard's first form), of major version 1
DLTensorFrom exchange_of(PyTypeObject* type) {
  PyObject* api =
      PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__");
  if (!api) {
    PyErr_Clear();
    return nullptr;
  }
  void* table = nullptr;
  if (PyCapsule_CheckExact(api)) {
    table = PyCapsule_GetPointer(api, PyCapsule_GetName(api));
  } else if (PyLong_Check(api)) {
    table = PyLong_AsVoidPtr(api);
  }
  Py_DECREF(api);  // the table lives as long as the process (the standard's rule)
  PyErr_Clear();
  const auto* t = static_cast<const DLPackExchangeTable*>(table);
  return t && t->major == 1 ? t->dltensor_from_py_object_no_sync : nullptr;
}

// The types read without Python code, registered by xferscope.batch.resolve: PyTorch's tensor
// classes and CuPy's ndarray (their attributes are read through the C API, or in one C call
// through DLPack's exchange API where the type has it and Python allowed it); anything with
// the buffer protocol is read as a buffer.
enum Reader : int { kTorch = 1, kCupy = 2, kExchange = 4 };
struct TypeReader {
  PyTypeObject* type;
  int reader;
  DLTensorFrom exchange;  // null: read by attributes
};
std::vector<TypeReader>& readers() {
  static auto* types = new std::vector<TypeReader>;
  return *types;
}

PyObject* interned(const char* name) { return PyUnicode_InternFromString(name); }

bool as_size(PyObject* value, std::size_t& out) {
  if (!value) return false;
  out = PyLong_AsSize_t(value);
  Py_DECREF(value);
  return !(out == static_cast<std::size_t>(-1) && PyErr_Occurred());
}

bool as_address(PyObject* value, std::uintptr_t& out) {
  if (!value) return false;
  out = static_cast<std::uintptr_t>(PyLong_AsUnsignedLongLong(value));
  Py_DECREF(value);
  return !(out == static_cast<std::uintptr_t>(-1) && PyErr_Occurred());
}

bool truth(PyObject* value) {
  if (!value) return false;
  const bool yes = value == Py_True;
  Py_DECREF(value);
  return yes;
}

bool read_torch(PyObject* obj, End& e) {
  static PyObject* const contiguous = interned("is_contiguous");
  static PyObject* const data_ptr = interned("data_ptr");
  static PyObject* const nbytes = interned("nbytes");
  return truth(PyObject_CallMethodNoArgs(obj, contiguous)) &&
         as_address(PyObject_CallMethodNoArgs(obj, data_ptr), e.address) &&
         as_size(PyObject_GetAttr(obj, nbytes), e.nbytes);
}

bool read_cupy(PyObject* obj, End& e) {
  static PyObject* const c_contiguous_flag = interned("_c_contiguous");  // no Flags object made
  static PyObject* const flags = interned("flags");
  static PyObject* const c_contiguous = interned("c_contiguous");
  static PyObject* const data = interned("data");
  static PyObject* const ptr = interned("ptr");
  static PyObject* const nbytes = interned("nbytes");
  PyObject* compact = PyObject_GetAttr(obj, c_contiguous_flag);
  if (!compact) {  // another CuPy: its flags
    PyErr_Clear();
    PyObject* f = PyObject_GetAttr(obj, flags);
    if (!f) return false;
    compact = PyObject_GetAttr(f, c_contiguous);
    Py_DECREF(f);
  }
  if (!truth(compact)) return false;
  PyObject* d = PyObject_GetAttr(obj, data);
  if (!d) return false;
  const bool ok = as_address(PyObject_GetAttr(d, ptr), e.address);
  Py_DECREF(d);
  return ok && as_size(PyObject_GetAttr(obj, nbytes), e.nbytes);
}

// `obj` read in one call of its type's DLPack exchange function; false (no error set) where it
// cannot be (an error, a non-contiguous or sub-byte layout): the attributes are read then.
bool read_exchange(DLTensorFrom from, PyObject* obj, End& e) {
  DLTensorView t{};
  if (from(obj, &t) != 0) {
    PyErr_Clear();
    return false;
  }
  const std::size_t unit = std::size_t{t.bits} * t.lanes;
  if (unit == 0 || unit % 8 != 0 || t.ndim < 0) return false;
  std::size_t elements = 1;
  std::int64_t step = 1;  // the stride a compact layout has at this dimension
  bool compact = true;
  for (std::int32_t i = t.ndim - 1; i >= 0; --i) {
    const std::int64_t n = t.shape[i];
    if (n < 0) return false;
    if (t.strides && n > 1 && t.strides[i] != step) compact = false;
    step *= n;
    elements *= static_cast<std::size_t>(n);
  }
  if (!compact && elements > 1) return false;
  e.address = reinterpret_cast<std::uintptr_t>(t.data) + t.byte_offset;
  e.nbytes = elements * (unit / 8);
  return true;
}

}  // namespace

// `obj` read without Python code; false (no error set) when the Python reader must decide.
bool read_end(PyObject* obj, End& e) {
  PyTypeObject* type = Py_TYPE(obj);
  bool ok = false;
  bool known = false;
  for (const TypeReader& r : readers()) {
    if (r.type != type) continue;
    known = true;
    ok = (r.exchange && read_exchange(r.exchange, obj, e)) ||
         (r.reader & kTorch ? read_torch(obj, e) : read_cupy(obj, e));
    break;
  }
  if (!known && PyObject_CheckBuffer(obj)) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS) == 0) {
      e.address = reinterpret_cast<std::uintptr_t>(view.buf);
      e.nbytes = static_cast<std::size_t>(view.len);
      e.read_only = view.readonly != 0;
      PyBuffer_Release(&view);
      ok = true;
    }
  }
  if (!ok) {
    PyErr_Clear();
    return false;
  }
  e.remembered = PyType_SUPPORTS_WEAKREFS(type);
  return e.nbytes > 0 && e.address != 0;
}

void bind_readers(nb::module_& m) {
  m.def(
      "read_natively",
      [](nb::handle type, int reader) {
        auto* t = reinterpret_cast<PyTypeObject*>(type.ptr());
        for (const TypeReader& known : readers())
          if (known.type == t) return;
        Py_INCREF(type.ptr());  // held for the life of the process
        readers().push_back({t, reader, reader & kExchange ? exchange_of(t) : nullptr});
      },
      "type"_a, "reader"_a,
      "Reads objects of exactly this type natively: 1 PyTorch, 2 CuPy; + 4: through the type's "
      "DLPack exchange API where it has one.");
  m.def(
      "native_readers",
      [] {
        nb::list out;
        for (const TypeReader& r : readers())
          out.append(nb::make_tuple(nb::handle(reinterpret_cast<PyObject*>(r.type)), r.reader,
                                    r.exchange != nullptr));
        return out;
      },
      "The types read natively: (type, reader, whether through DLPack's exchange API).");
}

}  // namespace xferscope::bindings
