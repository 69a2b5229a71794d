// One scenario: its texture, framebuffer, PBOs and host image, and the verification of a test
// frame (seed 000's download and readback tools); frames.cpp has its frames and the timed loop.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "gl/api.hpp"
#include "gl/session_impl.hpp"
#include "xferscope/error.hpp"
#include "xferscope/gl.hpp"
#include "xferscope/pattern.hpp"

// From cuda_gl_interop.h, which needs GL headers this build does without.
extern "C" cudaError_t cudaGraphicsGLRegisterImage(cudaGraphicsResource** resource,
                                                   unsigned int image, unsigned int target,
                                                   unsigned int flags);

namespace xferscope::gl {

namespace {

template <typename T>
const T& lookup(const std::vector<T>& table, const std::string& name) {
  for (const T& entry : table) {
    if (name == entry.name) return entry;
  }
  throw GlError("unknown name " + name);
}

GLenum usage_enum(const std::string& usage) {
  static const GLenum values[9] = {GL_STREAM_DRAW,  GL_STREAM_READ,  GL_STREAM_COPY,
                                   GL_STATIC_DRAW,  GL_STATIC_READ,  GL_STATIC_COPY,
                                   GL_DYNAMIC_DRAW, GL_DYNAMIC_READ, GL_DYNAMIC_COPY};
  for (int i = 0; i < 9; ++i) {
    if (usage == kUsages[i]) return values[i];
  }
  return GL_STREAM_DRAW;
}

std::string internal_name(GLint value) {
  for (const InternalInfo& f : internal_formats()) {
    if (f.value != 0 && static_cast<GLint>(f.value) == value) return f.name;
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%04X", static_cast<unsigned>(value));
  return hex;
}

std::string component_type_name(GLint value) {
  switch (value) {
    case 0x1406: return "float";
    case 0x8C17: return "unsigned_normalized";
    case 0x8F9C: return "signed_normalized";
    case 0x1404: return "int";
    case 0x1405: return "unsigned_int";
    case 0: return "none";
    default: return std::to_string(value);
  }
}

// Test data that reveals down-conversion: every bit of an integer type is random (an 8-bit
// store loses the low bits of shorts, a float store those of ints beyond 24 bits), floats in
// [2^-27, 1) carry a random 23-bit mantissa (an 8- or 16-bit store loses it), halves a random
// 10-bit one. Signed types stay non-negative so a loss shows as precision, not as clamping.
void fill_component(std::uint8_t* p, const TypeInfo& type, std::uint64_t word) {
  switch (type.kind) {
    case Kind::unsigned_int: std::memcpy(p, &word, type.bytes); break;
    case Kind::signed_int:
      std::memcpy(p, &word, type.bytes);
      p[type.bytes - 1] &= 0x7F;
      break;
    case Kind::half: {
      const std::uint16_t h =
          static_cast<std::uint16_t>(((1 + word % 14) << 10) | (word >> 20 & 0x3FF));
      std::memcpy(p, &h, 2);
      break;
    }
    case Kind::floating: {
      const std::uint32_t f =
          static_cast<std::uint32_t>(((100 + word % 27) << 23) | (word >> 20 & 0x7FFFFF));
      std::memcpy(p, &f, 4);
      break;
    }
  }
}

}  // namespace

Session::Impl::Impl(Context& c, const Scenario& scenario)
    : a(api()),
      context(c),
      s(scenario),
      format(lookup(formats(), s.format)),
      type(lookup(types(), s.type)),
      internal(lookup(internal_formats(), s.internal_format)),
      upload(s.op == "upload") {}

std::uint8_t* Session::Impl::allocate(void*& block) {
  const std::size_t bytes = static_cast<std::size_t>(s.row_offset + host_bytes + 4096);
  block = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!block) throw std::bad_alloc();
  return static_cast<std::uint8_t*>(block) + s.row_offset;
}

GLuint Session::Impl::compile(const char* source) {
  const GLuint shader = a.glCreateShader(GL_FRAGMENT_SHADER);
  a.glShaderSource(shader, 1, &source, nullptr);
  a.glCompileShader(shader);
  GLint ok = 0;
  a.glGetShaderiv(shader, GL_COMPILE_STATUS, &ok);
  if (!ok) {
    char log[512] = {0};
    a.glGetShaderInfoLog(shader, sizeof log - 1, nullptr, log);
    a.glDeleteShader(shader);
    throw GlError(std::string("the pass-through fragment shader does not compile: ") + log);
  }
  const GLuint p = a.glCreateProgram();
  a.glAttachShader(p, shader);
  a.glLinkProgram(p);
  a.glDeleteShader(shader);
  a.glGetProgramiv(p, GL_LINK_STATUS, &ok);
  if (!ok) {
    a.glDeleteProgram(p);
    throw GlError("the pass-through fragment shader does not link");
  }
  return p;
}

void Session::Impl::setup() {
  const bool default_fb = s.internal_format == "none";
  if (default_fb) surface = context.create_pbuffer(s.width, s.height);
  context.make_current(surface);
  while (a.glGetError() != GL_NO_ERROR) {
  }
  if (a.glClampColor) a.glClampColor(GL_CLAMP_READ_COLOR, 0);
  a.glPixelStorei(GL_UNPACK_ALIGNMENT, s.alignment);
  a.glPixelStorei(GL_PACK_ALIGNMENT, s.alignment);
  host_bytes = s.row_stride() * s.height;
  region = (host_bytes + 255) / 256 * 256;
  if (!default_fb) {
    target = s.target == "rectangle" ? GL_TEXTURE_RECTANGLE : GL_TEXTURE_2D;
    a.glGenTextures(1, &texture);
    a.glBindTexture(target, texture);
    a.glTexParameteri(target, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
    a.glTexParameteri(target, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
    if (target == GL_TEXTURE_2D) a.glTexParameteri(target, GL_TEXTURE_MAX_LEVEL, 0);
    a.glTexImage2D(target, 0, static_cast<GLint>(internal.value), s.width, s.height, 0,
                   format.value, type.value, nullptr);
    check("glTexImage2D");
  }
  const bool renders_into_texture = !textured_flush() && s.fbo;
  if (renders_into_texture) {
    a.glGenFramebuffers(1, &fbo);
    a.glBindFramebuffer(GL_FRAMEBUFFER, fbo);
    a.glFramebufferTexture2D(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, target, texture, 0);
    const GLenum status = a.glCheckFramebufferStatus(GL_FRAMEBUFFER);
    if (status != GL_FRAMEBUFFER_COMPLETE) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "0x%04X", status);
      throw GlError("an FBO with a " + s.internal_format + " texture is incomplete (status " + hex +
                    ") for " + states());
    }
    a.glDrawBuffer(GL_COLOR_ATTACHMENT0);
    a.glReadBuffer(GL_COLOR_ATTACHMENT0);
  } else if (textured_flush() && s.fbo) {  // the flush point lands in a 1x1 FBO
    a.glGenRenderbuffers(1, &flush_rb);
    a.glBindRenderbuffer(GL_RENDERBUFFER, flush_rb);
    a.glRenderbufferStorage(GL_RENDERBUFFER, GL_RGBA8_ENUM, 1, 1);
    a.glGenFramebuffers(1, &flush_fbo);
    a.glBindFramebuffer(GL_FRAMEBUFFER, flush_fbo);
    a.glFramebufferRenderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, flush_rb);
    a.glDrawBuffer(GL_COLOR_ATTACHMENT0);
  } else {
    a.glBindFramebuffer(GL_FRAMEBUFFER, 0);
    a.glDrawBuffer(GL_BACK);
    a.glReadBuffer(GL_BACK);
  }
  a.glViewport(0, 0, s.width, s.height);
  check("setting up the framebuffer");
  if (s.shader) {
    if (textured_flush()) {
      program = compile(target == GL_TEXTURE_RECTANGLE
                            ? "#version 120\n#extension GL_ARB_texture_rectangle : require\n"
                              "uniform sampler2DRect t;\n"
                              "void main() { gl_FragColor = texture2DRect(t, vec2(0.5)); }\n"
                            : "#version 120\nuniform sampler2D t;\n"
                              "void main() { gl_FragColor = texture2D(t, vec2(0.5)); }\n");
    } else {
      program = compile("#version 120\nvoid main() { gl_FragColor = gl_Color; }\n");
    }
    a.glUseProgram(program);
    check("glUseProgram");
  }
  image = allocate(base);
  out = allocate(out_base);
  std::memset(image - s.row_offset, 0xA5, static_cast<std::size_t>(s.row_offset + host_bytes));
  fill_image();
  if (s.method == "cuda_interop") {
    XFS_CUDA_CALL(cudaSetDevice(context.info().cuda_device));
    // pinned in place, so CUDA's copies are DMA like the GL driver's own staging
    XFS_CUDA_CALL(cudaHostRegister(image - s.row_offset,
                                   static_cast<std::size_t>(s.row_offset + host_bytes), 0));
    registered = true;
    XFS_CUDA_CALL(cudaHostRegister(out - s.row_offset,
                                   static_cast<std::size_t>(s.row_offset + host_bytes), 0));
    out_registered = true;
    XFS_CUDA_CALL(cudaGraphicsGLRegisterImage(
        &resource, texture, target,
        upload ? cudaGraphicsRegisterFlagsWriteDiscard : cudaGraphicsRegisterFlagsReadOnly));
  }
  if (s.method == "persistent") {
    if (!context.info().buffer_storage) {
      throw GlError("persistent needs ARB_buffer_storage, which this GL lacks");
    }
    a.glGenBuffers(1, &storage);
    a.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, storage);
    const GLbitfield flags = GL_MAP_WRITE_BIT | GL_MAP_PERSISTENT_BIT | GL_MAP_COHERENT_BIT;
    a.glBufferStorage(GL_PIXEL_UNPACK_BUFFER, region * s.pbos, nullptr, flags);
    mapped = static_cast<std::uint8_t*>(
        a.glMapBufferRange(GL_PIXEL_UNPACK_BUFFER, 0, region * s.pbos, flags));
    a.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, 0);
    check("glBufferStorage/glMapBufferRange (persistent)");
    fences.assign(static_cast<std::size_t>(s.pbos), nullptr);
  } else if (s.pbos > 0) {
    const GLenum binding = upload ? GL_PIXEL_UNPACK_BUFFER : GL_PIXEL_PACK_BUFFER;
    pbos.resize(static_cast<std::size_t>(s.pbos));
    a.glGenBuffers(s.pbos, pbos.data());
    for (GLuint b : pbos) {
      a.glBindBuffer(binding, b);
      a.glBufferData(binding, region, nullptr, usage_enum(s.usage));
    }
    a.glBindBuffer(binding, 0);
    check("glBufferData (PBOs)");
  }
  if (s.draw == "pixel") {
    pixel_source.resize(static_cast<std::size_t>(s.width) * s.height * 4);
    fill_host(pixel_source.data(), pixel_source.size(), s.seed ^ 0xD7A3, false);
  }
  if (s.method == "texsubimage_dsa" && !context.info().direct_state_access) {
    throw GlError("texsubimage_dsa needs ARB_direct_state_access, which this GL lacks");
  }
}

void Session::Impl::release() noexcept {
  try {
    context.make_current(surface);
  } catch (...) {
  }
  if (resource) cudaGraphicsUnregisterResource(resource);
  if (registered) cudaHostUnregister(image - s.row_offset);
  if (out_registered) cudaHostUnregister(out - s.row_offset);
  for (GLsync f : fences) {
    if (f) a.glDeleteSync(f);
  }
  if (storage) {
    a.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, storage);
    if (mapped) a.glUnmapBuffer(GL_PIXEL_UNPACK_BUFFER);
    a.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, 0);
    a.glDeleteBuffers(1, &storage);
  }
  a.glBindBuffer(GL_PIXEL_PACK_BUFFER, 0);
  a.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, 0);
  if (!pbos.empty()) a.glDeleteBuffers(static_cast<GLsizei>(pbos.size()), pbos.data());
  a.glUseProgram(0);
  if (program) a.glDeleteProgram(program);
  a.glBindFramebuffer(GL_FRAMEBUFFER, 0);
  if (fbo) a.glDeleteFramebuffers(1, &fbo);
  if (flush_fbo) a.glDeleteFramebuffers(1, &flush_fbo);
  if (flush_rb) a.glDeleteRenderbuffers(1, &flush_rb);
  if (texture) a.glDeleteTextures(1, &texture);
  a.glFinish();
  while (a.glGetError() != GL_NO_ERROR) {
  }
  context.destroy_pbuffer(surface);
  std::free(base);
  std::free(out_base);
}

// The test image: each component from the pattern, rows shared among threads (a 2048x2048
// RGBA8 frame took about 0.1 s on one core of an H100 host, for each of `run`'s 7 sessions).
void Session::Impl::fill_image() {
  const std::int64_t row = s.row_bytes();
  auto rows = [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t y = first; y < last; ++y) {
      std::uint8_t* p = image + y * s.row_stride();
      for (std::int64_t i = 0; i < row / type.bytes; ++i) {
        fill_component(p + i * type.bytes, type,
                       pattern_word(s.seed, static_cast<std::uint64_t>(y * row + i)));
      }
    }
  };
  constexpr std::int64_t kBytesPerThread = std::int64_t{2} << 20;
  const std::int64_t threads = std::clamp<std::int64_t>(
      row * s.height / kBytesPerThread, 1,
      std::max<std::int64_t>(1, std::min<std::int64_t>(16, std::thread::hardware_concurrency())));
  const std::int64_t height = s.height;
  if (threads == 1) {
    rows(0, height);
    return;
  }
  std::vector<std::thread> workers;
  const std::int64_t chunk = (height + threads - 1) / threads;
  for (std::int64_t first = 0; first < height; first += chunk) {
    workers.emplace_back(rows, first, std::min(height, first + chunk));
  }
  for (auto& worker : workers) worker.join();
}

// ---- verification ----

Verification Session::Impl::verify() {
  context.make_current(surface);
  std::memset(out - s.row_offset, 0x5A, static_cast<std::size_t>(s.row_offset + host_bytes));
  FrameLog t{0, 0, 0};
  if (upload) {
    upload_frame(0, t);
    a.glFinish();
    check("the test frame's upload");
    a.glBindBuffer(GL_PIXEL_PACK_BUFFER, 0);
    if (texture) {
      a.glBindTexture(target, texture);
      a.glGetTexImage(target, 0, format.value, type.value, out);
    } else {
      a.glReadPixels(0, 0, s.width, s.height, format.value, type.value, out);
    }
    check("reading the test frame back");
  } else {
    a.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, 0);
    if (texture) {
      a.glBindTexture(target, texture);
      a.glTexSubImage2D(target, 0, 0, 0, s.width, s.height, format.value, type.value, image);
    } else {
      a.glWindowPos2i(0, 0);
      a.glDrawPixels(s.width, s.height, format.value, type.value, image);
    }
    a.glFinish();
    check("placing the test frame");
    if (s.method == "cuda_interop") {
      interop_read(t);
    } else if (pbos.empty()) {
      read_into(out, t);
    } else {
      a.glBindBuffer(GL_PIXEL_PACK_BUFFER, pbos[0]);
      read_into(nullptr, t);
      a.glBindBuffer(GL_PIXEL_PACK_BUFFER, 0);
      collect(0, t, true);
    }
    check("the test frame's readback");
  }
  Verification v;
  const std::int64_t row = s.row_bytes();
  for (std::int64_t y = 0; y < s.height; ++y) {
    const std::uint8_t* want = image + y * s.row_stride();
    const std::uint8_t* got = out + y * s.row_stride();
    v.compared_bytes += row;
    if (std::memcmp(want, got, static_cast<std::size_t>(row)) == 0) continue;
    for (std::int64_t i = 0; i < row; ++i) {
      if (want[i] == got[i]) continue;
      if (v.first_mismatch < 0) {
        v.first_mismatch = y * row + i;
        v.expected = want[i];
        v.actual = got[i];
      }
      ++v.mismatched_bytes;
    }
  }
  v.ok = v.mismatched_bytes == 0;
  if (texture) {
    a.glBindTexture(target, texture);
    GLint value = 0;
    a.glGetTexLevelParameteriv(target, 0, GL_TEXTURE_INTERNAL_FORMAT, &value);
    v.actual_internal_format = internal_name(value);
    a.glGetTexLevelParameteriv(target, 0, GL_TEXTURE_RED_SIZE, &v.red_bits);
    a.glGetTexLevelParameteriv(target, 0, GL_TEXTURE_GREEN_SIZE, &v.green_bits);
    a.glGetTexLevelParameteriv(target, 0, GL_TEXTURE_BLUE_SIZE, &v.blue_bits);
    a.glGetTexLevelParameteriv(target, 0, GL_TEXTURE_ALPHA_SIZE, &v.alpha_bits);
    a.glGetTexLevelParameteriv(target, 0, GL_TEXTURE_RED_TYPE, &value);
    v.component_type = component_type_name(value);
  } else {
    v.actual_internal_format = "rgba8";  // the pbuffer's EGL config
    v.red_bits = v.green_bits = v.blue_bits = v.alpha_bits = 8;
    v.component_type = "unsigned_normalized";
  }
  while (a.glGetError() != GL_NO_ERROR) {
  }
  return v;
}

Session::Session(Context& context, const Scenario& scenario)
    : context_(context), scenario_(normalised(scenario)) {
  const std::string reason = engine_refusal(scenario_);  // the GL's own rules: the GL's to say
  if (!reason.empty()) throw GlError(reason);
  impl_ = std::make_unique<Impl>(context_, scenario_);
  try {
    impl_->setup();
  } catch (...) {
    impl_->release();
    throw;
  }
}

Session::~Session() {
  if (impl_) impl_->release();
}

Verification Session::verify() { return impl_->verify(); }

RunTiming Session::run(std::int64_t frames, double work_s, bool log) {
  if (frames < 1) throw GlError("a run needs at least one frame");
  return impl_->run(frames, work_s, log);
}

}  // namespace xferscope::gl
