// OpenGL transfers, headless (seed 000's download and readback tools): an EGL device context on
// the GPU that is a given CUDA device, and scenarios that upload pixel data into a texture or a
// framebuffer, or read it back, under every state that decides the speed. EGL and OpenGL are
// loaded at run time (gl/api.hpp), so nothing here needs a GL library until a context is made.
//
// The rules of which states combine (refusal, normalised) and the names of formats, types and
// internal formats are defined here once; Python plans and the simulated engine ask them
// through the bindings.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "xferscope/cases.hpp"

namespace xferscope::gl {

// A GL library or an EGL device context cannot be had (the message names the library and the
// package that provides it, or the EGL step that failed and its error).
class GlUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A GL call failed in a scenario: names the call, the states and the GL error.
class GlError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Kind { unsigned_int, signed_int, half, floating };  // how a type's values are coded

struct FormatInfo {
  const char* name;  // the user's word: red, rg, rgb, rgba, bgra, and their _integer forms
  unsigned value;    // the GLenum
  int components;
  bool integer;  // red_integer ...: for integer textures, values unconverted
};
struct TypeInfo {
  const char* name;  // byte, ubyte, short, ushort, int, uint, half, float
  unsigned value;
  int bytes;
  Kind kind;
};
// How a texture stores its components.
enum class Store { normalized, floating, unsigned_integer, signed_integer };

struct InternalInfo {
  const char* name;  // r8, rgba8, rgb10_a2, rgba16f, rgba32f, rgba32ui, ..., rgba (unsized), none
  unsigned value;    // 0 for none: the default framebuffer of the pbuffer (RGBA8)
  int components;
  int bits;  // per component as requested (the widest for rgb10_a2); 0 unsized
  Store store;
};

const std::vector<FormatInfo>& formats();
const std::vector<TypeInfo>& types();
const std::vector<InternalInfo>& internal_formats();
extern const char* const kUploadMethods[5];    // texsubimage ... cuda_interop
extern const char* const kReadbackMethods[3];  // readpixels, gettexture, cuda_interop
extern const char* const kTargets[2];          // 2d, rectangle
extern const char* const kUsages[9];           // stream_draw ... dynamic_copy
extern const char* const kDrawModes[3];        // quad, pixel, repeat
constexpr int kMaxPbos = 64;

// Every state of one scenario, named as the user names them.
struct Scenario {
  std::string op = "upload";  // upload (download in the paper's words) or readback
  int width = 1024;
  int height = 1024;
  int alignment = 4;   // GL_UNPACK_ALIGNMENT / GL_PACK_ALIGNMENT: 1, 2, 4 or 8
  int row_offset = 0;  // bytes from a page boundary to the image in host memory
  std::string method = "texsubimage";
  std::string format = "rgba";
  std::string type = "ubyte";
  std::string internal_format = "rgba8";
  std::string target = "2d";
  bool fbo = true;
  bool shader = false;         // a pass-through fragment shader instead of the fixed function
  int pbos = 0;                // 0: client memory; N: N pixel buffer objects in rotation
  std::string usage = "none";  // the PBOs' usage hint when pbos > 0
  std::string draw = "quad";   // readback: what each frame draws (quad, pixel, repeat)
  std::uint64_t seed = Limits::default_seed;

  std::int64_t pixel_bytes() const;  // one pixel in host memory
  std::int64_t row_bytes() const;    // one row's payload, padding excluded
  std::int64_t row_stride() const;   // one row in host memory, padded to the alignment
  std::int64_t frame_bytes() const;  // the payload of one frame: width * height * pixel
};

// Why these states cannot combine, or "" (the names are checked too): the engine's own rules,
// then what the GL itself refuses (gl_refusal). A reason that one option decides begins with it
// ("--pbos: ..."), so a plan of which nothing runs names the option at fault.
std::string refusal(const Scenario& s);
// The engine's own rules alone: a session checks these, and leaves the GL's rules to the GL.
std::string engine_refusal(const Scenario& s);
// What the GL refuses with GL_INVALID_OPERATION, known before asking it (OpenGL 4.6, 8.4.4 and
// 18.2.2): an _integer format with half or float data, integer data into or out of a normalized
// or float store (the default framebuffer's is RGBA8), other data into or out of an integer one.
std::string gl_refusal(const Scenario& s);

// Loads libEGL, libOpenGL and the EGL vendor library now (about 0.3 s on an H100 host), so that a
// context made later does not wait for them; throws GlUnavailable as a context would.
void preload();
// The same scenario with the states it ignores set to "none" (so a cross product of lists has
// no duplicates): the texture's internal format and target when drawing into or reading from
// the default framebuffer, the usage hint without PBOs, the draw mode of an upload.
Scenario normalised(Scenario s);

struct Verification {
  bool ok = false;
  std::int64_t compared_bytes = 0;
  std::int64_t mismatched_bytes = 0;
  std::int64_t first_mismatch = -1;  // byte offset in the payload, -1 none
  int expected = 0;                  // the bytes there
  int actual = 0;
  // What the GL actually stores: the internal format it chose and its component sizes and
  // type, read from the texture level (or the default framebuffer's attachment).
  std::string actual_internal_format;
  int red_bits = 0, green_bits = 0, blue_bits = 0, alpha_bits = 0;
  std::string component_type;  // float, unsigned_normalized, ...
};

struct FrameLog {
  double call_s;  // inside the transfer call (glReadPixels, glTexSubImage2D, a CUDA copy)
  double map_s;   // inside glMapBufferRange or a fence wait
  double work_s;  // the dummy CPU work
};

struct RunTiming {
  double seconds = 0;  // the whole loop, host clock, from the first call to glFinish
  std::int64_t frames = 0;
  std::int64_t bytes = 0;
  double call_s = 0;          // time blocked in transfer calls (the paper's read blocking time)
  double map_s = 0;           // time blocked mapping (the paper's map blocking time)
  double work_s = 0;          // dummy work done
  std::vector<FrameLog> log;  // per frame, when asked
};

struct Info {
  int cuda_device = -1;
  int egl_device = -1;  // index among EGL's devices
  std::string egl_vendor, egl_version;
  std::string vendor, renderer, version, shading_language;
  int max_texture_size = 0;
  bool buffer_storage = false;       // ARB_buffer_storage (persistent mapping)
  bool direct_state_access = false;  // ARB_direct_state_access (glTextureSubImage2D)
};

class Context;

// One scenario's GL objects (texture, framebuffer, PBOs, host image) on a context.
class Session {
 public:
  Session(Context& context, const Scenario& scenario);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Moves a test frame with the scenario's states and compares it exactly with what was sent,
  // padding excluded.
  Verification verify();
  // `frames` frames; `work_s` seconds of calibrated CPU work each (the asynchronous mode);
  // `log` keeps each frame's blocking times.
  RunTiming run(std::int64_t frames, double work_s, bool log);
  const Scenario& scenario() const { return scenario_; }

 private:
  struct Impl;
  Context& context_;
  Scenario scenario_;
  std::unique_ptr<Impl> impl_;
};

// An OpenGL 4.5 compatibility-profile context on an EGL device, made current on the calling
// thread by every call.
class Context {
 public:
  explicit Context(int cuda_device);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  const Info& info() const { return info_; }
  void make_current(void* surface = nullptr);   // nullptr: the context's own small pbuffer
  void* create_pbuffer(int width, int height);  // the default framebuffer of a scenario
  void destroy_pbuffer(void* surface) noexcept;

 private:
  Info info_;
  void* display_ = nullptr;
  void* config_ = nullptr;
  void* context_ = nullptr;
  void* surface_ = nullptr;
};

}  // namespace xferscope::gl
