// xferscope._engine's reading of copy_many's arguments (xferscope.batch.copy): the caller's pairs
// of objects (or three arrays of addresses and sizes) turned into addresses, sizes and memory
// kinds in one pass, with no Python code run for the common objects (PyTorch tensors, CuPy
// arrays, NumPy arrays and other buffers) and no Python object made per piece. Whatever this
// reader does not know, or finds wrong, goes to the Python reader (xferscope.batch.resolve),
// which either reads it or raises the one clear error; the rules of a batch (one direction, one
// GPU, writable destinations) are checked here, their messages made in Python.
// bindings/buffers.cpp reads each object.
//
// The memory kind of an object read here is remembered while the object lives (a weak
// reference tells), so a batch of the same tensors asks the driver nothing on later calls. A
// program that unregisters host memory (cudaHostUnregister) under a live object calls
// forget_memory_kinds() before copying it again.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "buffers.hpp"
#include "handle.hpp"
#include "xferscope/error.hpp"
#include "xferscope/many.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace batch = xferscope::batch;
using ManyHandle = xferscope::bindings::Handle<batch::ManyCopier>;
using xferscope::bindings::Addresses;
using xferscope::bindings::array_of;
using xferscope::bindings::End;
using xferscope::bindings::read_end;

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

// A batch of copy_many read and checked: every piece's addresses and size, the direction, the
// GPU, whether every host piece is pinned (and each host piece's address on the GPU).
struct Resolved {
  std::vector<std::uintptr_t> destinations, sources, mapped;
  std::vector<std::size_t> sizes;
  std::vector<nb::object> keep;  // what the Python reader returned: held while the copy runs
  bool upload = true, pinned = true;
  int device = 0;
  std::size_t total = 0;
};

namespace {

// The kinds of the ends (2 per piece: destinations, then sources); `objects` and `ends`: the
// objects read natively and how, whose kinds may be recalled (null: none). `classify`: Python's
// classify_pointers (the simulated engine's), else the driver's, remembered.
std::vector<batch::PointerInfo> kinds_of(const std::vector<std::uintptr_t>& addresses,
                                         const std::vector<PyObject*>* objects,
                                         const std::vector<End>* ends, nb::handle classify) {
  const std::size_t n = addresses.size();
  std::vector<batch::PointerInfo> kinds(n);
  std::vector<std::size_t> asked;
  std::vector<std::uintptr_t> unknown;
  const bool driver = classify.is_none();
  for (std::size_t i = 0; i < n; ++i) {
    const batch::PointerInfo* got = nullptr;
    if (driver && objects && (*objects)[i] && (*ends)[i].remembered)
      got = recall((*objects)[i], (*ends)[i]);
    if (got) {
      kinds[i] = *got;
    } else {
      asked.push_back(i);
      unknown.push_back(addresses[i]);
    }
  }
  if (asked.empty()) return kinds;
  if (driver) {
    std::vector<batch::PointerInfo> found;
    {
      nb::gil_scoped_release release;
      found = batch::classify(unknown.data(), unknown.size());
    }
    for (std::size_t j = 0; j < asked.size(); ++j) {
      const std::size_t i = asked[j];
      kinds[i] = found[j];
      if (objects && (*objects)[i] && (*ends)[i].remembered)
        remember((*objects)[i], (*ends)[i], found[j]);
    }
    return kinds;
  }
  nb::tuple got = nb::cast<nb::tuple>(classify(array_of(as_u64(unknown))));
  auto kind = nb::cast<nb::ndarray<const std::int8_t, nb::ndim<1>>>(got[0]);
  auto device = nb::cast<nb::ndarray<const std::int32_t, nb::ndim<1>>>(got[1]);
  auto mapped = nb::cast<nb::ndarray<const std::uint64_t, nb::ndim<1>>>(got[2]);
  for (std::size_t j = 0; j < asked.size(); ++j) {
    batch::PointerInfo& k = kinds[asked[j]];
    k.kind = static_cast<batch::PointerKind>(kind(j));
    k.device = device(j);
    k.mapped = static_cast<std::uintptr_t>(mapped(j));
  }
  return kinds;
}

// The rules of a batch: every piece one way between the host and one GPU (`device`, -1: the
// first piece's), host destinations writable (and addresses and sizes positive). A broken rule
// is `refuse`'s error (Python's words): refuse("directions", kinds, count, upload),
// refuse("device", i, gpu, target), refuse("read_only", i), refuse("positive", which array).
void settle(Resolved& r, const std::vector<batch::PointerInfo>& kinds,
            const std::vector<bool>* read_only, int device, nb::handle refuse) {
  const std::size_t count = r.sizes.size();
  auto on_gpu = [&](std::size_t i) { return static_cast<int>(kinds[i].kind) >= 2; };
  r.upload = on_gpu(0) && !on_gpu(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (on_gpu(i) != r.upload || on_gpu(count + i) == r.upload) {
      std::vector<std::int8_t> all(kinds.size());
      for (std::size_t j = 0; j < kinds.size(); ++j)
        all[j] = static_cast<std::int8_t>(kinds[j].kind);
      refuse("directions", array_of(std::move(all)), count, r.upload);
      throw xferscope::UsageError("copy_many: the pairs go more than one way");
    }
  }
  const std::size_t gpu_at = r.upload ? 0 : count, host_at = r.upload ? count : 0;
  r.device = device >= 0 ? device : kinds[gpu_at].device;
  r.pinned = true;
  r.mapped.resize(count);
  r.total = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const int gpu = kinds[gpu_at + i].device;
    if (gpu != r.device) {
      refuse("device", i, gpu, r.device);
      throw xferscope::UsageError("copy_many: the pieces are on more than one GPU");
    }
    if (!r.upload && read_only && (*read_only)[i]) {
      refuse("read_only", i);
      throw xferscope::UsageError("copy_many: a destination is read-only");
    }
    const batch::PointerInfo& host = kinds[host_at + i];
    r.pinned = r.pinned && host.kind == batch::PointerKind::pinned;
    r.mapped[i] = host.mapped;
    r.total += r.sizes[i];
  }
}

// The pairs: each a (destination, source) tuple or list read here, else given to `slow_pair`
// (Python: (pair, index) -> (destination address, source address, nbytes, destination
// read-only, what to keep), or its error).
Resolved resolve_pairs(nb::sequence pairs, int device, nb::handle classify, nb::handle slow_pair,
                       nb::handle refuse) {
  PyObject* fast = PySequence_Fast(pairs.ptr(), "copy_many: pairs must be a sequence");
  if (!fast) throw nb::python_error();
  nb::object list = nb::steal(fast);
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(list.ptr());
  PyObject** items = PySequence_Fast_ITEMS(list.ptr());
  Resolved r;
  r.destinations.resize(count);
  r.sources.resize(count);
  r.sizes.resize(count);
  std::vector<PyObject*> objects(2 * count, nullptr);
  std::vector<End> ends(2 * count);
  std::vector<bool> read_only(count, false);
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* pair = items[i];
    End& d = ends[i];
    End& s = ends[count + i];
    const bool two = (PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2) ||
                     (PyList_CheckExact(pair) && PyList_GET_SIZE(pair) == 2);
    PyObject* dst = two ? PySequence_Fast_ITEMS(pair)[0] : nullptr;
    PyObject* src = two ? PySequence_Fast_ITEMS(pair)[1] : nullptr;
    if (two && read_end(dst, d) && read_end(src, s) && d.nbytes == s.nbytes) {
      objects[i] = dst;
      objects[count + i] = src;
      r.destinations[i] = d.address;
      r.sources[i] = s.address;
      r.sizes[i] = d.nbytes;
      read_only[i] = d.read_only;
      continue;
    }
    d = End{};
    s = End{};
    nb::tuple got = nb::cast<nb::tuple>(slow_pair(nb::handle(pair), i));
    r.destinations[i] = nb::cast<std::uintptr_t>(got[0]);
    r.sources[i] = nb::cast<std::uintptr_t>(got[1]);
    r.sizes[i] = nb::cast<std::size_t>(got[2]);
    read_only[i] = nb::cast<bool>(got[3]);
    r.keep.push_back(nb::borrow(got[4]));
  }
  r.keep.push_back(list);
  std::vector<std::uintptr_t> addresses(r.destinations);
  addresses.insert(addresses.end(), r.sources.begin(), r.sources.end());
  settle(r, kinds_of(addresses, &objects, &ends, classify), &read_only, device, refuse);
  return r;
}

Resolved resolve_addresses(Addresses destinations, Addresses sources, Addresses sizes, int device,
                           nb::handle classify, nb::handle refuse) {
  const std::size_t count = destinations.shape(0);
  constexpr std::uint64_t largest = (std::uint64_t{1} << 63) - 2;  // above: negative or absurd
  const Addresses* arrays[] = {&destinations, &sources, &sizes};
  for (int which = 0; which < 3; ++which) {
    for (std::size_t i = 0; i < count; ++i) {
      if ((*arrays[which])(i)-1 > largest) {  // 0 wraps round
        refuse("positive", which);
        throw xferscope::UsageError("copy_many: addresses and sizes are positive");
      }
    }
  }
  Resolved r;
  r.destinations.assign(destinations.data(), destinations.data() + count);
  r.sources.assign(sources.data(), sources.data() + count);
  r.sizes.assign(sizes.data(), sizes.data() + count);
  std::vector<std::uintptr_t> addresses(r.destinations);
  addresses.insert(addresses.end(), r.sources.begin(), r.sources.end());
  settle(r, kinds_of(addresses, nullptr, nullptr, classify), nullptr, device, refuse);
  return r;
}

}  // namespace

// The copy of a resolved batch by the native copier (bindings/batch.cpp's ManyCopier).
static void copy_resolved(ManyHandle& h, const std::string& method, const Resolved& r) {
  batch::ManyCopier& c = h.get();
  nb::gil_scoped_release release;
  static_assert(sizeof(std::size_t) == sizeof(std::uintptr_t));
  c.copy(method, r.upload, r.destinations.data(), r.sources.data(), r.sizes.data(), r.sizes.size(),
         r.pinned, r.pinned ? r.mapped.data() : nullptr);
}

namespace {

// copy_many's decisions as the native path keeps them, by (GPU, upload, pinned, count, bytes,
// method asked): the method, the Choice Python made (returned again), the GPU's copier, and
// until when it holds (a decision left to the calibration or rule is made again after
// look_again_s, as Python's are; a method asked for holds for good). Forgotten when a
// calibration is stored.
using DecisionKey = std::tuple<int, bool, bool, std::size_t, std::size_t, std::string>;
struct Decision {
  std::string method;
  nb::object choice;
  nb::object copier;  // a ManyHandle: asked for again once closed (an engine closed it)
  double until;
};
std::map<DecisionKey, Decision>& decisions() {
  static auto* map = new std::map<DecisionKey, Decision>;
  return *map;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// copy_many of pairs on the native engine in one call: read and checked (resolve_pairs), the
// method decided (remembered, else `decide(direction, memory, count, bytes, device, asked)`,
// Python's Choice), copied by the copier `copier_of(device)` gives; the Choice returned.
// `upload` (0 or 1; -1: either): the way the caller named, refused otherwise before copying.
// Python's side of copy_pairs, given once (configure_copy_pairs): no arguments a call for them.
struct CopyPairsPython {
  double look_again_s = 1.0;
  nb::object decide, copier_of, slow_pair, refuse;
};
CopyPairsPython& python_side() {
  static auto* side = new CopyPairsPython;
  return *side;
}

nb::object copy_pairs(nb::sequence pairs, int device, std::optional<std::string> asked,
                      int upload) {
  const CopyPairsPython& py = python_side();
  if (!py.decide.is_valid()) throw xferscope::UsageError("copy_pairs: not configured");
  const double look_again_s = py.look_again_s;
  nb::handle decide = py.decide, copier_of = py.copier_of, refuse = py.refuse;
  Resolved r = resolve_pairs(pairs, device, nb::none(), py.slow_pair, refuse);
  if (upload >= 0 && r.upload != (upload == 1)) {  // the way the caller named (copy_to_device)
    refuse("way", upload == 1);
    throw xferscope::UsageError("copy_many: the buffers go the other way");
  }
  const std::size_t count = r.sizes.size();
  DecisionKey key{r.device, r.upload, r.pinned, count, r.total, asked.value_or("")};
  const double now = now_s();
  auto it = decisions().find(key);
  if (it == decisions().end() || now >= it->second.until) {
    nb::object choice = decide(r.upload ? "h2d" : "d2h", r.pinned ? "pinned" : "pageable", count,
                               r.total, r.device, asked ? nb::cast(*asked) : nb::none());
    if (decisions().size() > 4096) decisions().clear();
    const double until = asked ? std::numeric_limits<double>::infinity() : now + look_again_s;
    it = decisions()
             .insert_or_assign(key, Decision{nb::cast<std::string>(choice.attr("method")), choice,
                                             copier_of(r.device), until})
             .first;
  }
  Decision& d = it->second;
  if (nb::cast<ManyHandle&>(d.copier).closed()) d.copier = copier_of(r.device);
  nb::object choice = d.choice;
  nb::object copier = d.copier;  // held while the copy runs (the map may change meanwhile)
  const std::string method = d.method;
  copy_resolved(nb::cast<ManyHandle&>(copier), method, r);
  return choice;
}

}  // namespace

void bind_resolve(nb::module_& m) {
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
  m.def("resolve_pairs", &resolve_pairs, "pairs"_a, "device"_a, "classify"_a.none(), "slow_pair"_a,
        "refuse"_a,
        "copy_many's pairs read and checked (classify: Python's classify_pointers, or None for "
        "the driver's, whose answers are remembered per live object).");
  m.def("resolve_addresses", &resolve_addresses, "destinations"_a, "sources"_a, "sizes"_a,
        "device"_a, "classify"_a.none(), "refuse"_a,
        "copy_many's three arrays read and checked, as resolve_pairs.");
  xferscope::bindings::bind_readers(m);
  m.def("copy_resolved", &copy_resolved, "copier"_a, "method"_a, "batch"_a,
        "Copies a resolved batch by `method` through a ManyCopier; returns once it has landed.");
  m.def("copy_pairs", &copy_pairs, "pairs"_a, "device"_a, "asked"_a.none(), "upload"_a = -1,
        "copy_many of pairs on the native engine in one call; returns the Choice.");
  m.def(
      "configure_copy_pairs",
      [](double look_again_s, nb::object decide, nb::object copier_of, nb::object slow_pair,
         nb::object refuse) {
        python_side() = CopyPairsPython{look_again_s, std::move(decide), std::move(copier_of),
                                        std::move(slow_pair), std::move(refuse)};
      },
      "look_again_s"_a, "decide"_a, "copier_of"_a, "slow_pair"_a, "refuse"_a,
      "copy_pairs' Python side: how long a decision holds, decide(direction, memory, count, "
      "bytes, device, asked) -> Choice, copier_of(device), slow_pair(pair, i), refuse(what, ...).");
  m.def(
      "forget_decisions", [] { decisions().clear(); },
      "Forgets copy_many's decisions (a calibration was stored).");
  m.def(
      "forget_copy_pairs",
      [] {
        decisions().clear();
        python_side() = CopyPairsPython{};
      },
      "Forgets the decisions and copy_pairs' Python side (before the interpreter's teardown).");
  m.def("forget_memory_kinds", &forget_all,
        "Forgets the memory kinds remembered per object (after cudaHostUnregister of memory "
        "that a live object holds).");
}
