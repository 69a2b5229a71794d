// xferscope._engine's reading of copy_many's arguments (xferscope.transfer.copy): the caller's
// pairs of objects (or three arrays of addresses and sizes) turned into addresses, sizes and
// memory kinds in one pass, with no Python code run for the common objects (PyTorch tensors,
// CuPy arrays, NumPy arrays and other buffers) and no Python object made per piece. Whatever this
// reader does not know, or finds wrong, goes to the Python reader (xferscope.transfer.buffers),
// which either reads it or raises the one clear error; the rules of a batch (one direction, one
// GPU, writable destinations) are checked here, and a broken one is a CopyRefused whose message
// is made here. bindings/buffers.cpp reads each object; bindings/copies.cpp copies the batch.
//
// The memory kind of an object read here is remembered while the object lives (a weak
// reference tells), so a batch of the same tensors asks the driver nothing on later calls. A
// program that unregisters host memory (cudaHostUnregister) under a live object calls
// forget_memory_kinds() before copying it again.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "buffers.hpp"
#include "resolved.hpp"
#include "xferscope/many.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace batch = xferscope::batch;
using xferscope::bindings::Addresses;
using xferscope::bindings::array_of;
using xferscope::bindings::CopyRefused;
using xferscope::bindings::End;
using xferscope::bindings::read_end;
using xferscope::bindings::Resolved;

namespace {

// The memory kinds of objects read here, by object, while each lives (its weak reference).
struct Known {
  PyObject* ref;  // a weak reference to the object
  std::uintptr_t address;
  std::size_t nbytes;
  batch::PointerInfo info;
};
constexpr std::size_t kKnownMost = 1 << 16;  // forgotten all at once beyond this many
std::unordered_map<PyObject*, Known>& known() {
  static auto* map = new std::unordered_map<PyObject*, Known>;
  return *map;
}

void forget_all() {
  for (auto& [obj, k] : known()) Py_XDECREF(k.ref);
  known().clear();
}

bool alive(PyObject* ref, PyObject* obj) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* target = nullptr;
  if (PyWeakref_GetRef(ref, &target) <= 0) return false;
  Py_DECREF(target);
  return target == obj;
#else
  return PyWeakref_GetObject(ref) == obj;
#endif
}

const batch::PointerInfo* recall(PyObject* obj, const End& e) {
  auto it = known().find(obj);
  if (it == known().end()) return nullptr;
  const Known& k = it->second;
  if (k.address == e.address && k.nbytes == e.nbytes && alive(k.ref, obj)) return &k.info;
  Py_XDECREF(k.ref);
  known().erase(it);
  return nullptr;
}

void remember(PyObject* obj, const End& e, const batch::PointerInfo& info) {
  if (known().size() >= kKnownMost) forget_all();
  PyObject* ref = PyWeakref_NewRef(obj, nullptr);
  if (!ref) {
    PyErr_Clear();
    return;
  }
  known()[obj] = Known{ref, e.address, e.nbytes, info};
}

// The values as 64-bit unsigned integers, for an array_of
template <typename T>
std::vector<std::uint64_t> as_u64(const std::vector<T>& values) {
  return {values.begin(), values.end()};
}

}  // namespace

namespace {

// The buffers of reading a batch, kept by each thread (ThreadKept), so that reading one
// allocates nothing once one as large has been read: a call of one piece made 13 allocations.
struct Scratch {
  std::vector<PyObject*> objects;  // per end (destinations, then sources): read natively, or null
  std::vector<End> ends;
  std::vector<char> read_only;  // per pair
  std::vector<batch::PointerInfo> kinds, found;
  std::vector<std::size_t> asked;
  std::vector<std::uintptr_t> unknown;
};

// The kinds of ends `from` to n - 1 of each side (s.kinds: destinations, then sources), those
// read natively (s.objects) recalled where remembered. `classify`: Python's classify_pointers
// (the simulated engine's), else the driver's through `classifier`, remembered.
void ask_kinds(Scratch& s, const Resolved& r, std::size_t from, bool natively, nb::handle classify,
               batch::Classifier& classifier) {
  const std::size_t n = r.sizes.size();
  const bool driver = classify.is_none();
  auto kept = [&](std::size_t i) { return natively && s.objects[i] && s.ends[i].remembered; };
  s.asked.clear();
  s.unknown.clear();
  for (const std::size_t side : {std::size_t{0}, n}) {
    for (std::size_t i = side + from; i < side + n; ++i) {
      const batch::PointerInfo* got = driver && kept(i) ? recall(s.objects[i], s.ends[i]) : nullptr;
      if (got) {
        s.kinds[i] = *got;
      } else {
        s.asked.push_back(i);
        s.unknown.push_back(i < n ? r.destinations[i] : r.sources[i - n]);
      }
    }
  }
  if (s.asked.empty()) return;
  if (driver) {
    s.found.resize(s.unknown.size());
    {
      nb::gil_scoped_release release;
      for (std::size_t j = 0; j < s.unknown.size(); ++j) s.found[j] = classifier.of(s.unknown[j]);
    }
    for (std::size_t j = 0; j < s.asked.size(); ++j) {
      const std::size_t i = s.asked[j];
      s.kinds[i] = s.found[j];
      if (kept(i)) remember(s.objects[i], s.ends[i], s.found[j]);
    }
    return;
  }
  nb::tuple got = nb::cast<nb::tuple>(classify(array_of(as_u64(s.unknown))));
  auto kind = nb::cast<nb::ndarray<const std::int8_t, nb::ndim<1>>>(got[0]);
  auto device = nb::cast<nb::ndarray<const std::int32_t, nb::ndim<1>>>(got[1]);
  auto mapped = nb::cast<nb::ndarray<const std::uint64_t, nb::ndim<1>>>(got[2]);
  for (std::size_t j = 0; j < s.asked.size(); ++j) {
    batch::PointerInfo& k = s.kinds[s.asked[j]];
    k.kind = static_cast<batch::PointerKind>(kind(j));
    k.device = device(j);
    k.mapped = static_cast<std::uintptr_t>(mapped(j));
  }
}

// The names of the memory kinds, by batch::PointerKind (exported as POINTER_KINDS).
constexpr const char* kKindNames[] = {"pageable", "pinned", "device", "managed"};
bool on_gpu(const batch::PointerInfo& k) {
  return k.kind == batch::PointerKind::device || k.kind == batch::PointerKind::managed;
}
const char* way(bool upload) { return upload ? "host to GPU" : "GPU to host"; }

// One end's kind as the driver tells (remembered per live object read natively: `obj`).
batch::PointerInfo kind_of(PyObject* obj, const End& e, std::uintptr_t address,
                           batch::Classifier& classifier) {
  const bool kept = obj && e.remembered;
  if (kept) {
    if (const batch::PointerInfo* got = recall(obj, e)) return *got;
  }
  batch::PointerInfo k = classifier.of(address);
  if (kept) remember(obj, e, k);
  return k;
}

// Which rule of a batch going `upload` to GPU `device` a pair breaks, if any.
enum class Fit { ok, way, gpu, read_only };
Fit fit(const batch::PointerInfo& destination, const batch::PointerInfo& source, bool upload,
        int device, bool read_only) {
  if (on_gpu(destination) != upload || on_gpu(source) == upload) return Fit::way;
  if ((upload ? destination : source).device != device) return Fit::gpu;
  if (!upload && read_only) return Fit::read_only;
  return Fit::ok;
}

// The CopyRefused of a batch whose pairs do not all go one way between the host and a GPU: the
// first pair with both ends on one side, else the first that goes the other way from pair 0.
[[noreturn]] void refuse_directions(const std::vector<batch::PointerInfo>& kinds, std::size_t count,
                                    bool upload) {
  for (std::size_t i = 0; i < count; ++i) {
    if (on_gpu(kinds[i]) == on_gpu(kinds[count + i])) {
      throw CopyRefused("pair " + std::to_string(i) + ": both ends are " +
                        (on_gpu(kinds[i]) ? "GPU" : "host") + " memory (" +
                        kKindNames[static_cast<int>(kinds[i].kind)] + " and " +
                        kKindNames[static_cast<int>(kinds[count + i].kind)] +
                        "); copy_many copies between host memory and a GPU");
    }
  }
  std::size_t i = 0;
  while (i < count && on_gpu(kinds[i]) == upload) ++i;
  throw CopyRefused("pair " + std::to_string(i) + " copies " + way(on_gpu(kinds[i])) +
                    " while pair 0 copies " + way(upload) + ": one direction per call");
}

// The rules of a batch: every piece one way between the host and one GPU (`device`, -1: the
// first piece's), host destinations writable; a broken one is a CopyRefused.
void settle(Resolved& r, const std::vector<batch::PointerInfo>& kinds,
            const std::vector<char>* read_only, int device) {
  const std::size_t count = r.sizes.size();
  r.upload = on_gpu(kinds[0]) && !on_gpu(kinds[count]);
  const std::size_t gpu_at = r.upload ? 0 : count, host_at = r.upload ? count : 0;
  r.device = device >= 0 ? device : kinds[gpu_at].device;
  auto fits = [&](std::size_t i) {
    return fit(kinds[i], kinds[count + i], r.upload, r.device, read_only && (*read_only)[i]);
  };
  for (std::size_t i = 0; i < count; ++i) {
    if (fits(i) == Fit::way) refuse_directions(kinds, count, r.upload);
  }
  r.pinned = true;
  r.mapped.resize(count);
  r.total = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const Fit f = fits(i);
    if (f == Fit::gpu) {
      throw CopyRefused("pair " + std::to_string(i) + ": its GPU buffer is on GPU " +
                        std::to_string(kinds[gpu_at + i].device) + ", and this copy runs on GPU " +
                        std::to_string(r.device) +
                        "; copy_many moves data between the host and one GPU at a time");
    }
    if (f == Fit::read_only)
      throw CopyRefused("pair " + std::to_string(i) + " destination is read-only");
    const batch::PointerInfo& host = kinds[host_at + i];
    r.pinned = r.pinned && host.kind == batch::PointerKind::pinned;
    r.mapped[i] = host.mapped;
    r.total += r.sizes[i];
  }
}

}  // namespace

namespace xferscope::bindings {

void resolve_pairs(Resolved& r, nb::sequence pairs, int device, nb::handle classify,
                   nb::handle read_pair, Early* early) {
  PyObject* fast = PySequence_Fast(pairs.ptr(), "copy_many: pairs must be a sequence");
  if (!fast) throw nb::python_error();
  nb::object list = nb::steal(fast);
  const auto count = static_cast<std::size_t>(PySequence_Fast_GET_SIZE(list.ptr()));
  PyObject** items = PySequence_Fast_ITEMS(list.ptr());
  ThreadKept<Scratch> kept;
  Scratch& s = kept.get();
  r.keep.clear();
  r.started = 0;
  r.destinations.resize(count);
  r.sources.resize(count);
  r.sizes.resize(count);
  s.objects.assign(2 * count, nullptr);
  s.ends.assign(2 * count, End{});
  s.read_only.assign(count, 0);
  s.kinds.assign(2 * count, batch::PointerInfo{});
  // while `early` takes them: each pair's kinds asked as it is read, and its copy queued
  batch::Classifier classifier;
  std::size_t classified = 0;
  bool going = early && classify.is_none() && count > 1;
  bool upload = true;
  int gpu = -1;
  // pair `at`, read natively: its kinds asked, and its copy queued where it continues the batch
  auto start = [&](std::size_t at) {
    const std::size_t n = count;
    s.kinds[at] = kind_of(s.objects[at], s.ends[at], r.destinations[at], classifier);
    s.kinds[n + at] = kind_of(s.objects[n + at], s.ends[n + at], r.sources[at], classifier);
    classified = at + 1;
    if (at == 0) {
      upload = on_gpu(s.kinds[0]) && !on_gpu(s.kinds[n]);
      gpu = device >= 0 ? device : s.kinds[upload ? 0 : n].device;
      if (!early->begin(upload, gpu, n)) return false;
    }
    if (s.kinds[upload ? n + at : at].kind != batch::PointerKind::pinned ||
        fit(s.kinds[at], s.kinds[n + at], upload, gpu, s.read_only[at] != 0) != Fit::ok)
      return false;
    early->queue(upload, r.destinations[at], r.sources[at], r.sizes[at]);
    r.started = at + 1;
    return true;
  };
  for (std::size_t i = 0; i < count; ++i) {
    PyObject* pair = items[i];
    End& d = s.ends[i];
    End& e = s.ends[count + i];
    const bool two = (PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2) ||
                     (PyList_CheckExact(pair) && PyList_GET_SIZE(pair) == 2);
    PyObject* dst = two ? PySequence_Fast_ITEMS(pair)[0] : nullptr;
    PyObject* src = two ? PySequence_Fast_ITEMS(pair)[1] : nullptr;
    if (two && read_end(dst, d) && read_end(src, e) && d.nbytes == e.nbytes) {
      s.objects[i] = dst;
      s.objects[count + i] = src;
      r.destinations[i] = d.address;
      r.sources[i] = e.address;
      r.sizes[i] = d.nbytes;
      s.read_only[i] = d.read_only;
      if (going) going = start(i);
      continue;
    }
    d = End{};
    e = End{};
    nb::tuple got = nb::cast<nb::tuple>(read_pair(nb::handle(pair), i));
    r.destinations[i] = nb::cast<std::uintptr_t>(got[0]);
    r.sources[i] = nb::cast<std::uintptr_t>(got[1]);
    r.sizes[i] = nb::cast<std::size_t>(got[2]);
    s.read_only[i] = nb::cast<bool>(got[3]);
    r.keep.push_back(nb::borrow(got[4]));
    going = false;  // a pair read in Python goes with the rest
  }
  r.keep.push_back(list);
  ask_kinds(s, r, classified, true, classify, classifier);  // the kinds not asked yet
  settle(r, s.kinds, &s.read_only, device);
}

Resolved resolve_pairs(nb::sequence pairs, int device, nb::handle classify, nb::handle read_pair) {
  Resolved r;
  resolve_pairs(r, pairs, device, classify, read_pair, nullptr);
  return r;
}

Resolved resolve_addresses(Addresses destinations, Addresses sources, Addresses sizes, int device,
                           nb::handle classify) {
  const std::size_t count = destinations.shape(0);
  constexpr std::uint64_t largest = (std::uint64_t{1} << 63) - 2;  // above: negative or absurd
  const Addresses* arrays[] = {&destinations, &sources, &sizes};
  const char* names[] = {"destinations", "sources", "sizes"};
  for (int which = 0; which < 3; ++which) {
    const Addresses& values = *arrays[which];
    bool bad = false;
    std::int64_t least = 0;  // the smallest value as given (negative ones wrapped to uint64)
    for (std::size_t i = 0; i < count; ++i) {
      const std::int64_t value = static_cast<std::int64_t>(values(i));
      if (values(i) - 1 > largest && (!bad || value < least)) least = value;  // 0 wraps round
      bad = bad || values(i) - 1 > largest;
    }
    if (bad) {
      throw CopyRefused(std::string(names[which]) + " holds " + std::to_string(least) +
                        ": addresses and sizes are positive");
    }
  }
  Resolved r;
  r.destinations.assign(destinations.data(), destinations.data() + count);
  r.sources.assign(sources.data(), sources.data() + count);
  r.sizes.assign(sizes.data(), sizes.data() + count);
  ThreadKept<Scratch> kept;
  Scratch& s = kept.get();
  s.kinds.assign(2 * count, batch::PointerInfo{});
  batch::Classifier classifier;
  ask_kinds(s, r, 0, false, classify, classifier);
  settle(r, s.kinds, nullptr, device);
  return r;
}

void refuse_way(bool upload) {
  throw CopyRefused(std::string(upload ? "copy_to_device" : "copy_to_host") + " copies " +
                    way(upload) + ", and these buffers go " + way(!upload) +
                    ": swap the arguments, or call " +
                    (upload ? "copy_to_host" : "copy_to_device"));
}

}  // namespace xferscope::bindings

void bind_resolve(nb::module_& m) {
  nb::exception<CopyRefused>(m, "CopyRefused", PyExc_ValueError);
  m.attr("POINTER_KINDS") =
      nb::make_tuple(kKindNames[0], kKindNames[1], kKindNames[2], kKindNames[3]);
  nb::class_<Resolved>(m, "ResolvedBatch", "A batch of copy_many, read and checked.")
      .def_prop_ro("count", [](const Resolved& r) { return r.sizes.size(); })
      .def_ro("upload", &Resolved::upload)
      .def_ro("pinned", &Resolved::pinned)
      .def_ro("device", &Resolved::device)
      .def_ro("total", &Resolved::total)
      .def_prop_ro(
          "destinations", [](const Resolved& r) { return array_of(as_u64(r.destinations)); },
          nb::rv_policy::move)
      .def_prop_ro(
          "sources", [](const Resolved& r) { return array_of(as_u64(r.sources)); },
          nb::rv_policy::move)
      .def_prop_ro(
          "sizes", [](const Resolved& r) { return array_of(as_u64(r.sizes)); }, nb::rv_policy::move)
      .def_prop_ro(
          "mapped", [](const Resolved& r) { return array_of(as_u64(r.mapped)); },
          nb::rv_policy::move);
  m.def(
      "resolve_pairs",
      [](nb::sequence pairs, int device, nb::handle classify, nb::handle read_pair) {
        return xferscope::bindings::resolve_pairs(pairs, device, classify, read_pair);
      },
      "pairs"_a, "device"_a, "classify"_a.none(), "read_pair"_a,
      "copy_many's pairs read and checked (classify: Python's classify_pointers, or None for "
      "the driver's, whose answers are remembered per live object); CopyRefused for a broken "
      "rule.");
  m.def("resolve_addresses", &xferscope::bindings::resolve_addresses, "destinations"_a, "sources"_a,
        "sizes"_a, "device"_a, "classify"_a.none(),
        "copy_many's three arrays read and checked, as resolve_pairs.");
  xferscope::bindings::bind_readers(m);
  m.def("forget_memory_kinds", &forget_all,
        "Forgets the memory kinds remembered per object (after cudaHostUnregister of memory "
        "that a live object holds).");
}
