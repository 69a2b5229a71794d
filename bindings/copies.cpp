// xferscope._engine's copy_many (xferscope.transfer.copy): a Copies per engine reads a batch
// (bindings/resolve.cpp), decides its method and copies it. Its decisions are copy_many's one
// cache: by (GPU, direction, host memory, count, bytes, method asked), each made once by Python's
// policy (xferscope.transfer.policy.choose) and kept until it is looked at again (look_again_s;
// a method asked for holds for good) or a calibration is stored (forget_decisions). The copier
// of each GPU is the engine's: a native one copies here without the GIL, any other (the
// simulated engine's) through its copy_resolved.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "arrays.hpp"
#include "handle.hpp"
#include "resolved.hpp"
#include "xferscope/many.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace batch = xferscope::batch;
using ManyHandle = xferscope::bindings::Handle<batch::ManyCopier>;
using xferscope::bindings::Addresses;
using xferscope::bindings::Resolved;

namespace {

constexpr std::size_t kDecisionsMost = 4096;  // forgotten all at once beyond this many
std::uint64_t generation = 0;                 // forget_decisions() makes every decision stale

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The copy of a resolved batch by a native copier (bindings/batch.cpp's ManyCopier); the
// method that made it (the loop for a staged batch while the staged copier is being made).
// `wait` false: the loop and batch methods return once queued (ManyCopier::copy); `stream` >= 0:
// every copy queued on that stream of the caller's, nothing waited for.
// The pieces an Early queued are not copied again: with none left, the call waits for them.
std::string copy_resolved(ManyHandle& h, const std::string& method, const Resolved& r, bool wait,
                          std::int64_t stream = -1) {
  batch::ManyCopier& c = h.get();
  nb::gil_scoped_release release;
  static_assert(sizeof(std::size_t) == sizeof(std::uintptr_t));
  const std::size_t from = r.started, count = r.sizes.size() - from;
  if (count == 0) {
    if (wait && stream < 0) c.finish();
    return "loop";
  }
  return c.copy(method, r.upload, r.destinations.data() + from, r.sources.data() + from,
                r.sizes.data() + from, count, r.pinned, r.pinned ? r.mapped.data() + from : nullptr,
                wait, stream);
}

class Copies {
 public:
  // classify: the engine's classify_pointers, or None for the driver's; decide(direction,
  // memory, count, bytes, device, asked) -> Choice, made afresh; copier_of(device) -> the
  // engine's copier (its `native` the ManyCopier handle, or None); read_pair(pair, i): the
  // Python reader of resolve_pairs.
  Copies(nb::object classify, nb::object decide, nb::object copier_of, nb::object read_pair,
         double look_again_s)
      : classify_(std::move(classify)),
        decide_(std::move(decide)),
        copier_of_(std::move(copier_of)),
        read_pair_(std::move(read_pair)),
        look_again_s_(look_again_s) {}

  // copy_many's decision for a batch of this shape (the method and the Choice).
  const std::pair<std::string, nb::object>& decide(bool upload, bool pinned, std::size_t count,
                                                   std::size_t total, int device,
                                                   const std::optional<std::string>& asked) {
    Key key{device, upload, pinned, count, total, asked.value_or("")};
    const double now = now_s();
    auto it = decisions_.find(key);
    if (it == decisions_.end() || now >= it->second.until || it->second.generation != generation) {
      nb::object choice = decide_(upload ? "h2d" : "d2h", pinned ? "pinned" : "pageable", count,
                                  total, device, asked ? nb::cast(*asked) : nb::none());
      if (decisions_.size() >= kDecisionsMost) decisions_.clear();
      const double until = asked ? std::numeric_limits<double>::infinity() : now + look_again_s_;
      Decision made{{nb::cast<std::string>(choice.attr("method")), choice}, until, generation};
      it = decisions_.insert_or_assign(key, std::move(made)).first;
    }
    return it->second.made;
  }

  // A batch of pairs: read, decided and copied. Where this shape of pinned batch (GPU, way,
  // count, method asked) last went by the loop, its pieces are queued as they are read (an
  // EarlyCopies), so the copy engine moves the first while the rest are read: on an H100 the
  // reading took 0.5 us a pair (copyapi_call_probe.py), the time a batch of pinned pieces of
  // 96 KiB-1.5 MiB lost to PyTorch's loop, which copies each as soon as it is read.
  nb::object copy_pairs(nb::sequence pairs, int device, const std::optional<std::string>& asked,
                        int upload, bool wait, std::int64_t stream) {
    EarlyCopies early(*this, asked, wait, stream);
    xferscope::bindings::ThreadKept<Resolved> kept;  // read into again by the next call
    Resolved& r = kept.get();
    struct Let {  // of the Python objects read, once this call is over
      Resolved& r;
      ~Let() { r.keep.clear(); }
    } let{r};
    try {
      xferscope::bindings::resolve_pairs(r, pairs, device, classify_, read_pair_,
                                         early_ ? &early : nullptr);
      return copy(r, asked, upload, wait, stream);
    } catch (...) {
      early.drain();  // nothing queued still reads the caller's buffers once this raises
      throw;
    }
  }

  // Whether copy_pairs queues a batch's pieces as they are read (for benchmarks: on or off).
  bool early_ = true;

  nb::object copy_addresses(Addresses destinations, Addresses sources, Addresses sizes, int device,
                            const std::optional<std::string>& asked, int upload, bool wait,
                            std::int64_t stream) {
    return copy(
        xferscope::bindings::resolve_addresses(destinations, sources, sizes, device, classify_),
        asked, upload, wait, stream);
  }

  // Returns once every copy queued on `device`'s copier (wait false) has landed.
  void finish(int device) {
    const Copier with = held(device);
    if (with.native.is_none()) {
      if (nb::hasattr(with.copier, "finish")) with.copier.attr("finish")();
      return;
    }
    batch::ManyCopier& c = nb::cast<ManyHandle&>(with.native).get();
    nb::gil_scoped_release release;
    c.finish();
  }

  // The engine's copier for `device`, asked for again once closed (an engine closed it).
  nb::object copier(int device) { return held(device).copier; }

  // The copiers held, open ones only.
  nb::list held_copiers() {
    nb::list out;
    for (auto& [device, c] : copiers_) {
      if (!closed(c)) out.append(c.copier);
    }
    return out;
  }

  // Closes every copier held (their pinned staging and GPU buffers given back); the next copy
  // asks the engine for one again. How many were closed.
  std::size_t close_copiers() {
    std::map<int, Copier> was;
    was.swap(copiers_);
    for (auto& [device, c] : was) {
      if (!closed(c)) c.copier.attr("close")();
    }
    return was.size();
  }

 private:
  using Key = std::tuple<int, bool, bool, std::size_t, std::size_t, std::string>;
  using Shape = std::tuple<int, bool, std::size_t, std::string>;  // GPU, way, count, asked

  // copy_pairs' early copies (Early): begun where the shape's last pinned batch went by the
  // loop, on the native copier of that GPU.
  class EarlyCopies : public xferscope::bindings::Early {
   public:
    EarlyCopies(Copies& copies, const std::optional<std::string>& asked, bool wait,
                std::int64_t stream)
        : copies_(copies), asked_(asked.value_or("")), wait_(wait), stream_(stream) {}
    bool begin(bool upload, int device, std::size_t count) override {
      auto it = copies_.looped_.find(Shape{device, upload, count, asked_});
      if (it == copies_.looped_.end() || !it->second) return false;
      copier_ = copies_.held(device).native;
      return !copier_.is_none();
    }
    void queue(bool upload, std::uintptr_t destination, std::uintptr_t source,
               std::size_t size) override {
      nb::cast<ManyHandle&>(copier_).get().queue(upload, destination, source, size, wait_, stream_);
      queued_ = true;
    }
    // Waits for the copies queued (their errors dropped: the caller's error is raised).
    void drain() noexcept {
      if (!queued_) return;
      try {
        nb::cast<ManyHandle&>(copier_).get().finish();
      } catch (...) {
      }
    }

   private:
    Copies& copies_;
    std::string asked_;
    bool wait_;            // the call waits for its copies (ManyCopier::queue)
    std::int64_t stream_;  // the caller's stream they go on, or -1 (ManyCopier::copy's `on`)
    nb::object copier_;
    bool queued_ = false;
  };
  struct Decision {
    std::pair<std::string, nb::object> made;  // the method and the Choice
    double until;
    std::uint64_t generation;
  };
  struct Copier {
    nb::object copier, native;  // native: a ManyHandle, or None
  };

  const Copier& held(int device) {
    auto it = copiers_.find(device);
    if (it != copiers_.end() && !closed(it->second)) return it->second;
    nb::object copier = copier_of_(device);
    nb::object native = copier.attr("native");
    return copiers_.insert_or_assign(device, Copier{copier, native}).first->second;
  }

  static bool closed(const Copier& c) {
    if (!c.native.is_none()) return nb::cast<ManyHandle&>(c.native).closed();
    return nb::cast<bool>(c.copier.attr("closed"));
  }

  // `upload` (0 or 1; -1: either): the way the caller named, refused otherwise before copying.
  nb::object copy(const Resolved& r, const std::optional<std::string>& asked, int upload, bool wait,
                  std::int64_t stream = -1) {
    if (upload >= 0 && r.upload != (upload == 1)) xferscope::bindings::refuse_way(upload == 1);
    // copies held while the copy runs: a call from another thread may change the maps meanwhile
    auto [decided, choice] = decide(r.upload, r.pinned, r.sizes.size(), r.total, r.device, asked);
    const std::string& method = batch::method_on_stream(decided, stream);
    const Copier with = held(r.device);
    std::string made = method;
    if (!with.native.is_none()) {
      made = copy_resolved(nb::cast<ManyHandle&>(with.native), method, r, wait, stream);
    } else {
      nb::object got = with.copier.attr("copy_resolved")(method, nb::cast(r, nb::rv_policy::copy));
      if (!got.is_none()) made = nb::cast<std::string>(got);
    }
    if (r.pinned && stream < 0) {  // on a caller's stream the loop is its rule, not the shape's
      if (looped_.size() >= kDecisionsMost) looped_.clear();
      looped_[Shape{r.device, r.upload, r.sizes.size(), asked.value_or("")}] = made == "loop";
    }
    // the Choice of this call says what made it: the loop while the staged copier was made,
    // or on the caller's stream
    return made == decided ? choice : choice.attr("made_by")(made, stream >= 0);
  }

  nb::object classify_, decide_, copier_of_, read_pair_;
  double look_again_s_;
  std::map<Key, Decision> decisions_;
  std::map<Shape, bool> looped_;  // whether each shape's last pinned batch went by the loop
  std::map<int, Copier> copiers_;
};

}  // namespace

void bind_copies(nb::module_& m) {
  nb::class_<Copies>(m, "Copies",
                     "copy_many on one engine: its batches read, decided (one cache) and copied.")
      .def(nb::init<nb::object, nb::object, nb::object, nb::object, double>(), "classify"_a.none(),
           "decide"_a, "copier_of"_a, "read_pair"_a, "look_again_s"_a)
      .def(
          "decide",
          [](Copies& c, bool upload, bool pinned, std::size_t count, std::size_t total, int device,
             std::optional<std::string> asked) {
            return c.decide(upload, pinned, count, total, device, asked).second;
          },
          "upload"_a, "pinned"_a, "count"_a, "total"_a, "device"_a, "asked"_a.none(),
          "The Choice for a batch of this shape: remembered, else made by `decide`.")
      .def_rw("early", &Copies::early_,
              "Whether copy_pairs queues a pinned batch's pieces as it reads them, where the "
              "same shape last went by the loop (on by default; off for benchmarks).")
      .def("held_copiers", &Copies::held_copiers, "The copiers held, open ones only.")
      .def("close_copiers", &Copies::close_copiers,
           "Closes every copier held; the next copy makes one again. How many were held.")
      .def("copy_pairs", &Copies::copy_pairs, "pairs"_a, "device"_a, "asked"_a.none(),
           "upload"_a = -1, "wait"_a = true, "stream"_a = -1,
           "Reads, decides and copies (destination, source) pairs; returns the Choice. "
           "upload 1 or 0: the way the caller named (CopyRefused otherwise); -1: either. wait "
           "False: the loop and batch methods return once queued (then finish(device)). "
           "stream >= 0: a cudaStream_t of the caller's, every copy queued there and nothing "
           "waited for (ManyCopier::copy's `on`).")
      .def("copy_addresses", &Copies::copy_addresses, "destinations"_a, "sources"_a, "sizes"_a,
           "device"_a, "asked"_a.none(), "upload"_a = -1, "wait"_a = true, "stream"_a = -1,
           "copy_pairs for three arrays of addresses and sizes.")
      .def("finish", &Copies::finish, "device"_a,
           "Returns once every copy queued on this GPU's copier has landed.")
      .def("copier", &Copies::copier, "device"_a, "The engine's copier for `device`.");
  m.def("copy_resolved", &copy_resolved, "copier"_a, "method"_a, "batch"_a, "wait"_a = true,
        "stream"_a = -1,
        "Copies a resolved batch by `method` through a ManyCopier; returns once it has landed "
        "(or once queued on the caller's `stream`), and the method that made it.");
  m.def(
      "forget_decisions", [] { ++generation; },
      "Forgets every copy_many decision (a calibration was stored).");
}
