// The names of GL's formats, types and internal formats, and the rules of which scenario states
// combine: the one place they are decided.
#include <algorithm>
#include <cstring>

#include "xferscope/gl.hpp"

namespace xferscope::gl {

const std::vector<FormatInfo>& formats() {
  static const std::vector<FormatInfo> table = {
      {"red", 0x1903, 1, false},         {"rg", 0x8227, 2, false},
      {"rgb", 0x1907, 3, false},         {"rgba", 0x1908, 4, false},
      {"bgra", 0x80E1, 4, false},        {"red_integer", 0x8D94, 1, true},
      {"rg_integer", 0x8228, 2, true},   {"rgb_integer", 0x8D98, 3, true},
      {"rgba_integer", 0x8D99, 4, true}, {"bgra_integer", 0x8D9B, 4, true}};
  return table;
}

const std::vector<TypeInfo>& types() {
  static const std::vector<TypeInfo> table = {
      {"byte", 0x1400, 1, Kind::signed_int},  {"ubyte", 0x1401, 1, Kind::unsigned_int},
      {"short", 0x1402, 2, Kind::signed_int}, {"ushort", 0x1403, 2, Kind::unsigned_int},
      {"int", 0x1404, 4, Kind::signed_int},   {"uint", 0x1405, 4, Kind::unsigned_int},
      {"half", 0x140B, 2, Kind::half},        {"float", 0x1406, 4, Kind::floating}};
  return table;
}

const std::vector<InternalInfo>& internal_formats() {
  constexpr Store n = Store::normalized, f = Store::floating, u = Store::unsigned_integer,
                  i = Store::signed_integer;
  static const std::vector<InternalInfo> table = {
      {"none", 0, 4, 8, n},          {"r8", 0x8229, 1, 8, n},        {"rg8", 0x822B, 2, 8, n},
      {"rgb8", 0x8051, 3, 8, n},     {"rgba8", 0x8058, 4, 8, n},     {"rgb10_a2", 0x8059, 4, 10, n},
      {"r16", 0x822A, 1, 16, n},     {"rg16", 0x822C, 2, 16, n},     {"rgba16", 0x805B, 4, 16, n},
      {"r16f", 0x822D, 1, 16, f},    {"rg16f", 0x822F, 2, 16, f},    {"rgb16f", 0x881B, 3, 16, f},
      {"rgba16f", 0x881A, 4, 16, f}, {"r32f", 0x822E, 1, 32, f},     {"rg32f", 0x8230, 2, 32, f},
      {"rgb32f", 0x8815, 3, 32, f},  {"rgba32f", 0x8814, 4, 32, f},  {"r8ui", 0x8232, 1, 8, u},
      {"rgba8ui", 0x8D7C, 4, 8, u},  {"r16ui", 0x8234, 1, 16, u},    {"rgba16ui", 0x8D76, 4, 16, u},
      {"r32ui", 0x8236, 1, 32, u},   {"rgba32ui", 0x8D70, 4, 32, u}, {"r32i", 0x8235, 1, 32, i},
      {"rgba32i", 0x8D82, 4, 32, i}, {"red", 0x1903, 1, 0, n},       {"rg", 0x8227, 2, 0, n},
      {"rgb", 0x1907, 3, 0, n},      {"rgba", 0x1908, 4, 0, n}};
  return table;
}

const char* const kUploadMethods[5] = {"texsubimage", "texsubimage_dsa", "drawpixels", "persistent",
                                       "cuda_interop"};
const char* const kReadbackMethods[3] = {"readpixels", "gettexture", "cuda_interop"};
const char* const kTargets[2] = {"2d", "rectangle"};
const char* const kUsages[9] = {"stream_draw",  "stream_read",  "stream_copy",
                                "static_draw",  "static_read",  "static_copy",
                                "dynamic_draw", "dynamic_read", "dynamic_copy"};
const char* const kDrawModes[3] = {"quad", "pixel", "repeat"};

namespace {

template <typename T>
const T* find(const std::vector<T>& table, const std::string& name) {
  for (const T& entry : table) {
    if (name == entry.name) return &entry;
  }
  return nullptr;
}

template <std::size_t N>
bool one_of(const char* const (&names)[N], const std::string& name) {
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return name == n; });
}

template <std::size_t N>
std::string listed(const char* const (&names)[N]) {
  std::string out;
  for (const char* n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

template <typename T>
std::string listed(const std::vector<T>& table) {
  std::string out;
  for (const T& entry : table) out += (out.empty() ? "" : ", ") + std::string(entry.name);
  return out;
}

bool draws_default_framebuffer(const Scenario& s) {
  return !s.fbo && (s.method == "drawpixels" || s.method == "readpixels");
}

}  // namespace

std::int64_t Scenario::pixel_bytes() const {
  const FormatInfo* f = find(formats(), format);
  const TypeInfo* t = find(types(), type);
  return f && t ? std::int64_t{f->components} * t->bytes : 0;
}

std::int64_t Scenario::row_bytes() const { return pixel_bytes() * width; }

std::int64_t Scenario::row_stride() const {
  const std::int64_t a = alignment > 0 ? alignment : 1;
  return (row_bytes() + a - 1) / a * a;
}

std::int64_t Scenario::frame_bytes() const { return row_bytes() * height; }

std::string refusal(const Scenario& s) {
  std::string reason = engine_refusal(s);
  return reason.empty() ? gl_refusal(s) : reason;
}

std::string gl_refusal(const Scenario& s) {
  const FormatInfo* format = find(formats(), s.format);
  const TypeInfo* type = find(types(), s.type);
  const InternalInfo* internal = find(internal_formats(), s.internal_format);
  if (!format || !type || !internal) return "";  // engine_refusal names them
  if (format->integer && (type->kind == Kind::half || type->kind == Kind::floating)) {
    return "--type: an _integer format (" + s.format +
           ") takes byte, ubyte, short, ushort, int or uint data; the GL refuses " + s.type;
  }
  const bool integer_store =
      internal->store == Store::unsigned_integer || internal->store == Store::signed_integer;
  if (format->integer == integer_store) return "";
  const std::string store =
      s.internal_format == "none" ? "the default framebuffer (RGBA8)" : s.internal_format;
  if (integer_store) {
    return "--internal: an integer texture (" + store + ") takes only _integer formats, not " +
           s.format + "; the GL refuses the pair";
  }
  return "--internal: " + store + " stores normalized or float values, and the GL refuses " +
         s.format + " with it: give an integer internal format (r8ui, rgba8ui, rgba32ui, " +
         "rgba32i, ...) or a format without _integer";
}

std::string engine_refusal(const Scenario& s) {
  const bool upload = s.op == "upload";
  if (!upload && s.op != "readback") return "op '" + s.op + "' is not upload or readback";
  if (s.width < 1 || s.height < 1 || s.width > 32768 || s.height > 32768) {
    return std::to_string(s.width) + "x" + std::to_string(s.height) +
           " is not a size from 1x1 to 32768x32768";
  }
  if (s.alignment != 1 && s.alignment != 2 && s.alignment != 4 && s.alignment != 8) {
    return "alignment " + std::to_string(s.alignment) + " is not 1, 2, 4 or 8";
  }
  if (s.row_offset < 0 || s.row_offset > 4095) {
    return "row offset " + std::to_string(s.row_offset) + " is not 0 to 4095 bytes";
  }
  if (upload ? !one_of(kUploadMethods, s.method) : !one_of(kReadbackMethods, s.method)) {
    return "method '" + s.method + "' is not one of " +
           (upload ? listed(kUploadMethods) : listed(kReadbackMethods)) + " for " + s.op;
  }
  const FormatInfo* format = find(formats(), s.format);
  if (!format) return "format '" + s.format + "' is not one of " + listed(formats());
  const TypeInfo* type = find(types(), s.type);
  if (!type) return "type '" + s.type + "' is not one of " + listed(types());
  const InternalInfo* internal = find(internal_formats(), s.internal_format);
  if (!internal) {
    return "internal format '" + s.internal_format + "' is not one of " +
           listed(internal_formats());
  }
  const bool no_texture = s.internal_format == "none";
  if (!(no_texture && s.target == "none") && !one_of(kTargets, s.target)) {
    return "target '" + s.target + "' is not one of " + listed(kTargets);
  }
  if (s.pbos < 0 || s.pbos > kMaxPbos) {
    return "pbos " + std::to_string(s.pbos) + " is not 0 to " + std::to_string(kMaxPbos);
  }
  if (s.usage != "none" && !one_of(kUsages, s.usage)) {
    return "PBO usage '" + s.usage + "' is not one of " + listed(kUsages);
  }
  if (s.draw != "none" && !one_of(kDrawModes, s.draw)) {
    return "draw mode '" + s.draw + "' is not one of " + listed(kDrawModes);
  }
  if (draws_default_framebuffer(s)) {
    if (!no_texture) return "";  // normalised() sets it to none: the default framebuffer
  } else if (no_texture) {
    return "--internal: " + s.method + (s.fbo ? " with an FBO" : "") +
           " needs a texture: give an internal format (none is the default framebuffer, for "
           "drawpixels and readpixels without an FBO)";
  }
  if (s.method == "gettexture" && !s.fbo) {
    return "--fbo: gettexture reads the texture the frame is drawn into: it needs an FBO (fbo "
           "on)";
  }
  if (s.method == "persistent" && s.pbos < 1) {
    return "--pbos: persistent maps a ring of buffers: pbos must be 1 or more";
  }
  if (s.method == "cuda_interop") {
    if (s.pbos != 0)
      return "--pbos: cuda_interop copies with CUDA, not through PBOs: pbos must be 0";
    if (!upload && !s.fbo)
      return "--fbo: cuda_interop reads the texture drawn into: it needs an FBO";
    if (internal->bits == 0 || internal->bits == 10 || internal->components == 3) {
      return "--internal: cuda_interop registers textures of 1, 2 or 4 whole components (r8, "
             "rg16f, rgba8, "
             "rgba32f, rgba32ui, ...): not " +
             s.internal_format;
    }
    bool kind = false;
    switch (internal->store) {
      case Store::floating: kind = type->kind == Kind::floating || type->kind == Kind::half; break;
      case Store::signed_integer: kind = type->kind == Kind::signed_int; break;
      default: kind = type->kind == Kind::unsigned_int;
    }
    const bool matches = format->components == internal->components &&
                         s.format.rfind("bgra", 0) != 0 && type->bytes * 8 == internal->bits &&
                         kind;
    if (!matches) {
      return "--format: cuda_interop copies texels as they are stored: " + s.format + "/" + s.type +
             " is not the layout of " + s.internal_format;
    }
  }
  return "";
}

Scenario normalised(Scenario s) {
  if (s.pbos == 0) {
    s.usage = "none";
  } else if (s.usage == "none") {
    s.usage = s.op == "upload" ? "stream_draw" : "stream_read";
  }
  if (s.op == "upload") s.draw = "none";
  if (s.op == "readback" && s.draw == "none") s.draw = "quad";
  if (draws_default_framebuffer(s)) {
    s.internal_format = "none";
    s.target = "none";
  }
  return s;
}

}  // namespace xferscope::gl
