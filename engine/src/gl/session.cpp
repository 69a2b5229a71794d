// One scenario: its texture, framebuffer, PBOs and host image, the verification of a test frame
// and the timed frame loop (seed 000's download and readback tools).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "gl/api.hpp"
#include "xferscope/cpu_work.hpp"
#include "xferscope/error.hpp"
#include "xferscope/gl.hpp"
#include "xferscope/pattern.hpp"

// From cuda_gl_interop.h, which needs GL headers this build does without.
extern "C" cudaError_t cudaGraphicsGLRegisterImage(cudaGraphicsResource** resource,
                                                   unsigned int image, unsigned int target,
                                                   unsigned int flags);

namespace xferscope::gl {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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

  Impl(Context& c, const Scenario& scenario)
      : a(api()),
        context(c),
        s(scenario),
        format(lookup(formats(), s.format)),
        type(lookup(types(), s.type)),
        internal(lookup(internal_formats(), s.internal_format)),
        upload(s.op == "upload") {}

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

  std::uint8_t* allocate(void*& block) {
    const std::size_t bytes = static_cast<std::size_t>(s.row_offset + host_bytes + 4096);
    block = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!block) throw std::bad_alloc();
    return static_cast<std::uint8_t*>(block) + s.row_offset;
  }

  GLuint compile(const char* source) {
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

  bool textured_flush() const { return upload && s.method != "drawpixels"; }

  void setup() {
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
        throw GlError("an FBO with a " + s.internal_format + " texture is incomplete (status " +
                      hex + ") for " + states());
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

  void release() noexcept {
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
  void fill_image() {
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

  // ---- one frame ----

  // Puts the host image into the GL the scenario's way; map_s gets the host-side staging
  // (map, memcpy, unmap, fence waits), call_s the upload call itself.
  void upload_frame(std::int64_t frame, FrameLog& t) {
    const void* source = image;
    if (s.method == "cuda_interop") {
      cudaArray_t array = map_texture(t);
      const auto start = Clock::now();
      XFS_CUDA_CALL(
          cudaMemcpy2DToArray(array, 0, 0, image, static_cast<std::size_t>(s.row_stride()),
                              static_cast<std::size_t>(s.row_bytes()),
                              static_cast<std::size_t>(s.height), cudaMemcpyHostToDevice));
      t.call_s += since(start);
      unmap_texture(t);
      flush_point();
      return;
    }
    if (s.method == "persistent") {
      const std::size_t slot = static_cast<std::size_t>(frame % s.pbos);
      auto start = Clock::now();
      if (fences[slot]) {
        a.glClientWaitSync(fences[slot], GL_SYNC_FLUSH_COMMANDS_BIT, 10'000'000'000ull);
        a.glDeleteSync(fences[slot]);
        fences[slot] = nullptr;
      }
      std::memcpy(mapped + slot * region, image, static_cast<std::size_t>(host_bytes));
      t.map_s += since(start);
      a.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, storage);
      source = reinterpret_cast<const void*>(static_cast<std::intptr_t>(slot * region));
    } else if (!pbos.empty()) {
      const GLuint b = pbos[static_cast<std::size_t>(frame % s.pbos)];
      auto start = Clock::now();
      a.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, b);
      void* p = a.glMapBufferRange(GL_PIXEL_UNPACK_BUFFER, 0, host_bytes,
                                   GL_MAP_WRITE_BIT | GL_MAP_INVALIDATE_BUFFER_BIT);
      if (!p) check("glMapBufferRange (upload PBO)");
      std::memcpy(p, image, static_cast<std::size_t>(host_bytes));
      a.glUnmapBuffer(GL_PIXEL_UNPACK_BUFFER);
      t.map_s += since(start);
      source = nullptr;
    }
    const auto start = Clock::now();
    if (s.method == "drawpixels") {
      a.glWindowPos2i(0, 0);
      a.glDrawPixels(s.width, s.height, format.value, type.value, source);
    } else if (s.method == "texsubimage_dsa") {
      a.glTextureSubImage2D(texture, 0, 0, 0, s.width, s.height, format.value, type.value, source);
    } else {
      a.glTexSubImage2D(target, 0, 0, 0, s.width, s.height, format.value, type.value, source);
    }
    t.call_s += since(start);
    if (s.method == "persistent") {
      fences[static_cast<std::size_t>(frame % s.pbos)] =
          a.glFenceSync(GL_SYNC_GPU_COMMANDS_COMPLETE, 0);
    }
    if (s.method == "persistent" || !pbos.empty()) a.glBindBuffer(GL_PIXEL_UNPACK_BUFFER, 0);
    if (textured_flush()) flush_point();
  }

  // The paper's flush: one point drawn with the texture, so the upload is used.
  void flush_point() {
    if (!program) a.glEnable(target);
    a.glBegin(GL_POINTS);
    a.glTexCoord2f(target == GL_TEXTURE_RECTANGLE ? 0.5f : 0.5f / s.width, 0.5f);
    a.glVertex2f(0.0f, 0.0f);
    a.glEnd();
    if (!program) a.glDisable(target);
  }

  // What each readback frame draws: a plain quad of a new colour, a full-window DrawPixels
  // (upload traffic contending with the readback), or nothing (repeat: the same frame read
  // again, which a driver may shortcut: the paper draws to rule that out).
  void draw(std::int64_t frame) {
    if (s.draw == "repeat") return;
    if (s.draw == "pixel") {
      a.glWindowPos2i(0, 0);
      a.glDrawPixels(s.width, s.height, 0x1908 /*GL_RGBA*/, GL_UNSIGNED_BYTE, pixel_source.data());
    } else {
      const float c = static_cast<float>(frame % 251) / 251.0f;
      a.glColor4f(c, 1.0f - c, 0.5f, 1.0f);
      a.glRectf(-1.0f, -1.0f, 1.0f, 1.0f);
    }
  }

  // Starts reading the frame: into `destination` (client memory), or into PBO offset 0 when a
  // PBO is bound. call_s gets the call.
  void read_into(void* destination, FrameLog& t) {
    const auto start = Clock::now();
    if (s.method == "gettexture") {
      a.glGetTexImage(target, 0, format.value, type.value, destination);
    } else {
      a.glReadPixels(0, 0, s.width, s.height, format.value, type.value, destination);
    }
    t.call_s += since(start);
  }

  // CUDA interop: the registered texture mapped for CUDA (map_s gets the time), its array.
  cudaArray_t map_texture(FrameLog& t) {
    const auto start = Clock::now();
    XFS_CUDA_CALL(cudaGraphicsMapResources(1, &resource, nullptr));
    cudaArray_t array = nullptr;
    XFS_CUDA_CALL(cudaGraphicsSubResourceGetMappedArray(&array, resource, 0, 0));
    t.map_s += since(start);
    return array;
  }

  void unmap_texture(FrameLog& t) {
    const auto start = Clock::now();
    XFS_CUDA_CALL(cudaGraphicsUnmapResources(1, &resource, nullptr));
    t.map_s += since(start);
  }

  void interop_read(FrameLog& t) {
    cudaArray_t array = map_texture(t);
    const auto start = Clock::now();
    XFS_CUDA_CALL(cudaMemcpy2DFromArray(out, static_cast<std::size_t>(s.row_stride()), array, 0, 0,
                                        static_cast<std::size_t>(s.row_bytes()),
                                        static_cast<std::size_t>(s.height),
                                        cudaMemcpyDeviceToHost));
    t.call_s += since(start);
    unmap_texture(t);
  }

  // Maps PBO `index` and unmaps it; map_s gets the map call, which waits for the frame. The
  // frame counts as read back once mapped: the application reads it there (the paper's loop:
  // map and unmap PBO[n - x]); its work is the dummy work. `copy_out` copies it to client
  // memory, as verification does.
  void collect(std::size_t index, FrameLog& t, bool copy_out = false) {
    a.glBindBuffer(GL_PIXEL_PACK_BUFFER, pbos[index]);
    const auto start = Clock::now();
    void* p = a.glMapBufferRange(GL_PIXEL_PACK_BUFFER, 0, host_bytes, GL_MAP_READ_BIT);
    t.map_s += since(start);
    if (!p) check("glMapBufferRange (readback PBO)");
    if (copy_out) std::memcpy(out, p, static_cast<std::size_t>(host_bytes));
    a.glUnmapBuffer(GL_PIXEL_PACK_BUFFER);
    a.glBindBuffer(GL_PIXEL_PACK_BUFFER, 0);
  }

  void work(std::uint64_t units, FrameLog& t) {
    if (units == 0) return;
    const auto start = Clock::now();
    do_cpu_work(units);
    t.work_s += since(start);
  }

  // The paper's loop with x PBOs: bind PBO[n], draw, read, (work), map and unmap the oldest
  // outstanding PBO, read x - 1 frames earlier.
  void readback_frame(std::int64_t frame, std::uint64_t units, FrameLog& t) {
    draw(frame);
    if (s.method == "cuda_interop") {
      interop_read(t);
      work(units, t);
      return;
    }
    if (pbos.empty()) {
      read_into(out, t);
      work(units, t);
      return;
    }
    const std::int64_t x = s.pbos;
    a.glBindBuffer(GL_PIXEL_PACK_BUFFER, pbos[static_cast<std::size_t>(frame % x)]);
    read_into(nullptr, t);
    a.glBindBuffer(GL_PIXEL_PACK_BUFFER, 0);
    work(units, t);
    if (frame >= x - 1) collect(static_cast<std::size_t>((frame - (x - 1)) % x), t);
  }

  RunTiming run(std::int64_t frames, double work_s, bool log) {
    context.make_current(surface);
    const std::uint64_t units = work_s > 0 ? cpu_work_for(work_s) : 0;
    RunTiming r;
    r.frames = frames;
    r.bytes = frames * s.frame_bytes();
    if (log) r.log.reserve(static_cast<std::size_t>(frames));
    a.glFinish();
    const auto start = Clock::now();
    for (std::int64_t f = 0; f < frames; ++f) {
      FrameLog t{0, 0, 0};
      if (upload) {
        upload_frame(f, t);
        work(units, t);
      } else {
        readback_frame(f, units, t);
      }
      r.call_s += t.call_s;
      r.map_s += t.map_s;
      r.work_s += t.work_s;
      if (log) r.log.push_back(t);
    }
    if (!upload && !pbos.empty()) {  // the frames still in flight
      const std::int64_t x = s.pbos;
      for (std::int64_t f = std::max<std::int64_t>(frames, x - 1); f < frames + x - 1; ++f) {
        FrameLog t{0, 0, 0};
        collect(static_cast<std::size_t>((f - (x - 1)) % x), t);
        r.map_s += t.map_s;
      }
    }
    a.glFinish();
    r.seconds = since(start);
    check("the frame loop");
    return r;
  }

  // ---- verification ----

  Verification verify() {
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
};

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
