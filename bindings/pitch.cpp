// xferscope._engine's 2D/3D part (pitch.hpp): the methods, their refusals, a handle.
#include "xferscope/pitch.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <string>

#include "handle.hpp"
#include "xferscope/error.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace pitch = xferscope::pitch;
using PitchedHandle = xferscope::bindings::Handle<pitch::Pitched>;

namespace {

pitch::PitchSpec spec_of(int device, const std::string& direction, const std::string& memory,
                         std::size_t width, std::size_t rows, std::size_t host_pitch, bool pitched,
                         std::uint64_t seed) {
  pitch::PitchSpec s;
  s.device = device;
  s.direction = direction;
  s.memory = memory;
  s.width = width;
  s.rows = rows;
  s.host_pitch = host_pitch;
  s.pitched = pitched;
  s.seed = seed;
  return s;
}

}  // namespace

void bind_pitch(nb::module_& m) {
  m.attr("PITCH_METHODS") = nb::cast(pitch::methods());
  m.attr("PITCH_MOST_LOOP_ROWS") = pitch::kMostLoopRows;
  m.def(
      "pitch_refusal",
      [](const std::string& direction, const std::string& memory, std::size_t width,
         std::size_t rows, std::size_t host_pitch, bool pitched, const std::string& method) {
        return pitch::refusal(spec_of(0, direction, memory, width, rows, host_pitch, pitched, 0),
                              method);
      },
      "direction"_a, "memory"_a, "width"_a, "rows"_a, "host_pitch"_a, "pitched"_a, "method"_a,
      "Why this 2D copy cannot be made by `method`, or ''.");
  nb::class_<pitch::PitchVerification>(m, "PitchVerification")
      .def_ro("wrong_rows", &pitch::PitchVerification::wrong_rows)
      .def_ro("gap_bytes", &pitch::PitchVerification::gap_bytes)
      .def_ro("bytes_checked", &pitch::PitchVerification::bytes_checked);
  nb::class_<PitchedHandle>(m, "Pitched", "Rows of bytes between host and device memory.")
      .def(
          "__init__",
          [](PitchedHandle* h, int device, const std::string& direction, const std::string& memory,
             std::size_t width, std::size_t rows, std::size_t host_pitch, bool pitched,
             std::uint64_t seed) {
            new (h) PitchedHandle(
                "2D copy", nullptr,
                spec_of(device, direction, memory, width, rows, host_pitch, pitched, seed));
          },
          "device"_a, "direction"_a, "memory"_a, "width"_a, "rows"_a, "host_pitch"_a,
          "pitched"_a = true, "seed"_a = xferscope::Limits::default_seed)
      .def(
          "time",
          [](PitchedHandle& h, const std::string& method, std::int64_t iterations) {
            pitch::Pitched& p = h.get();
            pitch::PitchTiming t;
            {
              nb::gil_scoped_release release;
              t = p.time(method, iterations);
            }
            return nb::make_tuple(t.host_s, t.device_s);
          },
          "method"_a, "iterations"_a, "(host seconds, device seconds) per copy.")
      .def(
          "verify",
          [](PitchedHandle& h, const std::string& method) {
            pitch::Pitched& p = h.get();
            nb::gil_scoped_release release;
            return p.verify(method);
          },
          "method"_a, "One copy by `method`, every row and gap compared.")
      .def_prop_ro("bytes", [](PitchedHandle& h) { return h.get().bytes(); })
      .def_prop_ro("device_pitch", [](PitchedHandle& h) { return h.get().device_pitch(); })
      .def_prop_ro("depth", [](PitchedHandle& h) { return h.get().depth(); })
      .def("close", &PitchedHandle::close);
}
