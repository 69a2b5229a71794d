// xferscope._engine's OpenGL part: the state tables and rules (gl.hpp), a context handle and a
// scenario handle. Results cross as read-only classes the simulated engine builds too.
#include "xferscope/gl.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>

#include "handle.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace gl = xferscope::gl;
using ContextHandle = xferscope::bindings::Handle<gl::Context, gl::GlError>;
using SessionHandle = xferscope::bindings::Handle<gl::Session, gl::GlError>;

namespace {

template <std::size_t N>
nb::tuple words(const char* const (&names)[N]) {
  nb::list out;
  for (const char* n : names) out.append(std::string(n));
  return nb::tuple(out);
}

const char* kind_name(gl::Kind kind) {
  switch (kind) {
    case gl::Kind::unsigned_int: return "unsigned";
    case gl::Kind::signed_int: return "signed";
    case gl::Kind::half: return "half";
    case gl::Kind::floating: return "float";
  }
  return "?";
}

const char* store_name(gl::Store store) {
  switch (store) {
    case gl::Store::normalized: return "normalized";
    case gl::Store::floating: return "float";
    case gl::Store::unsigned_integer: return "unsigned_integer";
    case gl::Store::signed_integer: return "signed_integer";
  }
  return "?";
}

}  // namespace

void bind_gl(nb::module_& m) {
  nb::exception<gl::GlUnavailable>(m, "GlUnavailable", PyExc_RuntimeError);
  nb::exception<gl::GlError>(m, "GlError", PyExc_RuntimeError);

  nb::list formats, types, internals;
  for (const auto& f : gl::formats()) {
    formats.append(nb::make_tuple(std::string(f.name), f.value, f.components, f.integer));
  }
  for (const auto& t : gl::types()) {
    types.append(nb::make_tuple(std::string(t.name), t.value, t.bytes, kind_name(t.kind)));
  }
  for (const auto& i : gl::internal_formats()) {
    internals.append(
        nb::make_tuple(std::string(i.name), i.value, i.components, i.bits, store_name(i.store)));
  }
  m.attr("GL_FORMATS") = nb::tuple(formats);             // (name, enum, components)
  m.attr("GL_TYPES") = nb::tuple(types);                 // (name, enum, bytes, kind)
  m.attr("GL_INTERNAL_FORMATS") = nb::tuple(internals);  // (name, enum, comps, bits, store)
  m.attr("GL_UPLOAD_METHODS") = words(gl::kUploadMethods);
  m.attr("GL_READBACK_METHODS") = words(gl::kReadbackMethods);
  m.attr("GL_TARGETS") = words(gl::kTargets);
  m.attr("GL_USAGES") = words(gl::kUsages);
  m.attr("GL_DRAW_MODES") = words(gl::kDrawModes);
  m.attr("GL_MAX_PBOS") = gl::kMaxPbos;

  nb::class_<gl::Scenario>(m, "GlScenario", "Every state of one GL transfer scenario.")
      .def(
          "__init__",
          [](gl::Scenario* s, const std::string& op, int width, int height, int alignment,
             int row_offset, const std::string& method, const std::string& format,
             const std::string& type, const std::string& internal_format, const std::string& target,
             bool fbo, bool shader, int pbos, const std::string& usage, const std::string& draw,
             std::uint64_t seed) {
            new (s) gl::Scenario{
                op,     width, height, alignment, row_offset, method, format, type, internal_format,
                target, fbo,   shader, pbos,      usage,      draw,   seed};
          },
          "op"_a, "width"_a, "height"_a, "alignment"_a = 4, "row_offset"_a = 0,
          "method"_a = "texsubimage", "format"_a = "rgba", "type"_a = "ubyte",
          "internal_format"_a = "rgba8", "target"_a = "2d", "fbo"_a = true, "shader"_a = false,
          "pbos"_a = 0, "usage"_a = "none", "draw"_a = "quad",
          "seed"_a = xferscope::Limits::default_seed)
      .def_ro("op", &gl::Scenario::op)
      .def_ro("width", &gl::Scenario::width)
      .def_ro("height", &gl::Scenario::height)
      .def_ro("alignment", &gl::Scenario::alignment)
      .def_ro("row_offset", &gl::Scenario::row_offset)
      .def_ro("method", &gl::Scenario::method)
      .def_ro("format", &gl::Scenario::format)
      .def_ro("type", &gl::Scenario::type)
      .def_ro("internal_format", &gl::Scenario::internal_format)
      .def_ro("target", &gl::Scenario::target)
      .def_ro("fbo", &gl::Scenario::fbo)
      .def_ro("shader", &gl::Scenario::shader)
      .def_ro("pbos", &gl::Scenario::pbos)
      .def_ro("usage", &gl::Scenario::usage)
      .def_ro("draw", &gl::Scenario::draw)
      .def_ro("seed", &gl::Scenario::seed)
      .def_prop_ro("pixel_bytes", &gl::Scenario::pixel_bytes)
      .def_prop_ro("row_bytes", &gl::Scenario::row_bytes)
      .def_prop_ro("row_stride", &gl::Scenario::row_stride)
      .def_prop_ro("frame_bytes", &gl::Scenario::frame_bytes);
  m.def("gl_refusal", &gl::refusal, "scenario"_a,
        "Why these states cannot combine, or '' when they can.");
  m.def("gl_api_refusal", &gl::gl_refusal, "scenario"_a,
        "What the GL itself refuses of these states (GL_INVALID_OPERATION), or ''.");
  m.def("gl_normalised", &gl::normalised, "scenario"_a,
        "The scenario with the states it ignores set to 'none'.");

  nb::class_<gl::Verification>(m, "GlVerification", "A test frame compared with what was sent.")
      .def(
          "__init__",
          [](gl::Verification* v, bool ok, std::int64_t compared, std::int64_t mismatched,
             std::int64_t first, int expected, int actual, const std::string& internal, int r,
             int g, int b, int a, const std::string& component_type) {
            new (v)
                gl::Verification{ok,       compared, mismatched, first, expected, actual,
                                 internal, r,        g,          b,     a,        component_type};
          },
          "ok"_a, "compared_bytes"_a, "mismatched_bytes"_a, "first_mismatch"_a, "expected"_a,
          "actual"_a, "actual_internal_format"_a, "red_bits"_a, "green_bits"_a, "blue_bits"_a,
          "alpha_bits"_a, "component_type"_a)
      .def_ro("ok", &gl::Verification::ok)
      .def_ro("compared_bytes", &gl::Verification::compared_bytes)
      .def_ro("mismatched_bytes", &gl::Verification::mismatched_bytes)
      .def_ro("first_mismatch", &gl::Verification::first_mismatch)
      .def_ro("expected", &gl::Verification::expected)
      .def_ro("actual", &gl::Verification::actual)
      .def_ro("actual_internal_format", &gl::Verification::actual_internal_format)
      .def_ro("red_bits", &gl::Verification::red_bits)
      .def_ro("green_bits", &gl::Verification::green_bits)
      .def_ro("blue_bits", &gl::Verification::blue_bits)
      .def_ro("alpha_bits", &gl::Verification::alpha_bits)
      .def_ro("component_type", &gl::Verification::component_type);
  nb::class_<gl::FrameLog>(m, "GlFrame", "One frame's blocking times.")
      .def(
          "__init__",
          [](gl::FrameLog* f, double call, double map, double work) {
            new (f) gl::FrameLog{call, map, work};
          },
          "call_s"_a, "map_s"_a, "work_s"_a)
      .def_ro("call_s", &gl::FrameLog::call_s)
      .def_ro("map_s", &gl::FrameLog::map_s)
      .def_ro("work_s", &gl::FrameLog::work_s);
  nb::class_<gl::RunTiming>(m, "GlRunTiming", "A loop of frames: its time and blocking times.")
      .def(
          "__init__",
          [](gl::RunTiming* r, double seconds, std::int64_t frames, std::int64_t bytes, double call,
             double map, double work, std::vector<gl::FrameLog> log) {
            new (r) gl::RunTiming{seconds, frames, bytes, call, map, work, std::move(log)};
          },
          "seconds"_a, "frames"_a, "bytes"_a, "call_s"_a, "map_s"_a, "work_s"_a,
          "log"_a = std::vector<gl::FrameLog>{})
      .def_ro("seconds", &gl::RunTiming::seconds)
      .def_ro("frames", &gl::RunTiming::frames)
      .def_ro("bytes", &gl::RunTiming::bytes)
      .def_ro("call_s", &gl::RunTiming::call_s)
      .def_ro("map_s", &gl::RunTiming::map_s)
      .def_ro("work_s", &gl::RunTiming::work_s)
      .def_ro("log", &gl::RunTiming::log);

  m.def("gl_preload", &gl::preload, nb::call_guard<nb::gil_scoped_release>(),
        "Loads the GL and EGL libraries ahead of a context; GlUnavailable as a context would.");
  nb::class_<ContextHandle>(m, "GlContext", "An OpenGL context on the EGL device of a GPU.")
      .def(
          "__init__",
          [](ContextHandle* h, int cuda_device) {
            new (h) ContextHandle("GL context", nullptr, cuda_device);
          },
          "cuda_device"_a)
      .def("info",
           [](ContextHandle& h) {
             const gl::Info& i = h.get().info();
             nb::dict d;
             d["cuda_device"] = i.cuda_device;
             d["egl_device"] = i.egl_device;
             d["egl_vendor"] = i.egl_vendor;
             d["egl_version"] = i.egl_version;
             d["vendor"] = i.vendor;
             d["renderer"] = i.renderer;
             d["version"] = i.version;
             d["shading_language"] = i.shading_language;
             d["max_texture_size"] = i.max_texture_size;
             d["buffer_storage"] = i.buffer_storage;
             d["direct_state_access"] = i.direct_state_access;
             return d;
           })
      .def("close", &ContextHandle::close);
  nb::class_<SessionHandle>(m, "GlSession", "One scenario's GL objects and host image.")
      .def(
          "__init__",
          [](SessionHandle* h, const ContextHandle& context, const gl::Scenario& scenario) {
            // The scenario's GL objects live in the context: it stays until they are freed.
            std::shared_ptr<gl::Context> shared = context.share();
            new (h) SessionHandle("GL scenario", shared, *shared, scenario);
          },
          "context"_a, "scenario"_a)
      .def_prop_ro("scenario", [](SessionHandle& h) { return h.get().scenario(); })
      .def("verify",
           [](SessionHandle& h) {
             gl::Session& s = h.get();
             nb::gil_scoped_release release;
             return s.verify();
           })
      .def(
          "run",
          [](SessionHandle& h, std::int64_t frames, double work_s, bool log) {
            gl::Session& s = h.get();
            nb::gil_scoped_release release;
            return s.run(frames, work_s, log);
          },
          "frames"_a, "work_s"_a = 0.0, "log"_a = false)
      .def("close", &SessionHandle::close);
}
