// Internal to the GL engine: a Session's state and steps, shared by session.cpp (setup,
// teardown, the test image, verification) and frames.cpp (one frame and the timed loop).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gl/api.hpp"
#include "xferscope/gl.hpp"

namespace xferscope::gl {

struct Session::Impl {
  const Api& a;
  Context& context;
  Scenario s;
  const FormatInfo& format;
  const TypeInfo& type;
  const InternalInfo& internal;
  bool upload;
  GLenum target = GL_TEXTURE_2D;
  GLuint texture = 0, fbo = 0, flush_fbo = 0, flush_rb = 0, program = 0, storage = 0;
  std::vector<GLuint> pbos;
  std::vector<GLsync> fences;
  std::uint8_t* mapped = nullptr;  // the persistent ring
  std::int64_t region = 0;         // one slot of the ring or one PBO
  void* surface = nullptr;         // the pbuffer that is the default framebuffer
  void* base = nullptr;            // host allocations, page-aligned
  void* out_base = nullptr;
  std::uint8_t* image = nullptr;           // the host image: base + row_offset
  std::uint8_t* out = nullptr;             // where readbacks land
  std::int64_t host_bytes = 0;             // row_stride * height
  std::vector<std::uint8_t> pixel_source;  // draw mode pixel: an RGBA8 frame
  cudaGraphicsResource* resource = nullptr;
  bool registered = false, out_registered = false;

  Impl(Context& c, const Scenario& scenario);

  std::string states() const {
    return s.op + " " + std::to_string(s.width) + "x" + std::to_string(s.height) + " " + s.method +
           " " + s.format + "/" + s.type + " -> " + s.internal_format;
  }

  void check(const char* call) const {
    const GLenum e = a.glGetError();
    if (e != GL_NO_ERROR) {
      while (a.glGetError() != GL_NO_ERROR) {
      }
      throw GlError(std::string(call) + " failed for " + states() + ": " + gl_error_name(e));
    }
  }

  bool textured_flush() const { return upload && s.method != "drawpixels"; }

  // ---- session.cpp: setup and teardown, the test image, verification ----

  std::uint8_t* allocate(void*& block);
  GLuint compile(const char* source);
  void setup();
  void release() noexcept;
  void fill_image();
  Verification verify();

  // ---- frames.cpp: one frame, and the timed frame loop ----

  void upload_frame(std::int64_t frame, FrameLog& t);
  void flush_point();
  void draw(std::int64_t frame);
  void read_into(void* destination, FrameLog& t);
  cudaArray_t map_texture(FrameLog& t);
  void unmap_texture(FrameLog& t);
  void interop_read(FrameLog& t);
  void collect(std::size_t index, FrameLog& t, bool copy_out = false);
  void work(std::uint64_t units, FrameLog& t);
  void readback_frame(std::int64_t frame, std::uint64_t units, FrameLog& t);
  RunTiming run(std::int64_t frames, double work_s, bool log);
};

}  // namespace xferscope::gl
