// An OpenGL context on an EGL device with no display: the device that is the asked-for CUDA
// device (EGL_CUDA_DEVICE_NV), a pbuffer config, OpenGL 4.5 in the compatibility profile (the
// paper's glDrawPixels and fixed function need it).
#include <cstdlib>
#include <string>
#include <vector>

#include "gl/api.hpp"
#include "xferscope/gl.hpp"

namespace xferscope::gl {

namespace {

std::string egl_error(const Api& a) {
  const EGLint e = a.eglGetError();
  static const char* const names[] = {
      "EGL_SUCCESS",       "EGL_NOT_INITIALIZED",     "EGL_BAD_ACCESS",
      "EGL_BAD_ALLOC",     "EGL_BAD_ATTRIBUTE",       "EGL_BAD_CONFIG",
      "EGL_BAD_CONTEXT",   "EGL_BAD_CURRENT_SURFACE", "EGL_BAD_DISPLAY",
      "EGL_BAD_MATCH",     "EGL_BAD_NATIVE_PIXMAP",   "EGL_BAD_NATIVE_WINDOW",
      "EGL_BAD_PARAMETER", "EGL_BAD_SURFACE",         "EGL_CONTEXT_LOST"};
  if (e >= EGL_SUCCESS && e < EGL_SUCCESS + 15) return names[e - EGL_SUCCESS];
  return "EGL error " + std::to_string(e);
}

std::string text(const unsigned char* s) { return s ? reinterpret_cast<const char*>(s) : ""; }

}  // namespace

Context::Context(int cuda_device) {
  const Api& a = api();
  info_.cuda_device = cuda_device;
  std::vector<EGLDeviceEXT> devices(64);
  EGLint count = 0;
  if (!a.eglQueryDevicesEXT(static_cast<EGLint>(devices.size()), devices.data(), &count) ||
      count == 0) {
    const char* vendor_files = std::getenv("__EGL_VENDOR_LIBRARY_FILENAMES");
    throw GlUnavailable(
        "EGL lists no devices (eglQueryDevicesEXT: " + egl_error(a) +
        "): libEGL.so.1 loaded, but not the NVIDIA driver's libEGL_nvidia.so.0, which glvnd finds "
        "through " +
        (vendor_files && *vendor_files
             ? std::string("$__EGL_VENDOR_LIBRARY_FILENAMES (") + vendor_files + ")"
             : std::string("/usr/share/glvnd/egl_vendor.d/10_nvidia.json")) +
        ": install the driver's EGL library (Debian: libegl-nvidia0, Ubuntu: libnvidia-gl-N), "
        "or set __EGL_VENDOR_LIBRARY_FILENAMES to its 10_nvidia.json)");
  }
  for (EGLint i = 0; i < count && info_.egl_device < 0; ++i) {
    EGLAttrib ordinal = -1;
    if (a.eglQueryDeviceAttribEXT(devices[i], EGL_CUDA_DEVICE_NV, &ordinal) &&
        ordinal == cuda_device) {
      info_.egl_device = i;
    }
  }
  a.eglGetError();  // devices without the attribute leave an error behind
  if (info_.egl_device < 0) {
    throw GlUnavailable("none of the " + std::to_string(count) + " EGL devices is CUDA device " +
                        std::to_string(cuda_device) + " (EGL_CUDA_DEVICE_NV)");
  }
  try {
    display_ =
        a.eglGetPlatformDisplayEXT(EGL_PLATFORM_DEVICE_EXT, devices[info_.egl_device], nullptr);
    EGLint major = 0, minor = 0;
    if (!display_ || !a.eglInitialize(display_, &major, &minor)) {
      display_ = nullptr;
      throw GlUnavailable("eglInitialize on EGL device " + std::to_string(info_.egl_device) +
                          " failed: " + egl_error(a));
    }
    const char* vendor = a.eglQueryString(display_, EGL_VENDOR);
    const char* version = a.eglQueryString(display_, EGL_VERSION);
    info_.egl_vendor = vendor ? vendor : "";
    info_.egl_version = version ? version : "";
    if (!a.eglBindAPI(EGL_OPENGL_API)) {
      throw GlUnavailable("eglBindAPI(EGL_OPENGL_API) failed: " + egl_error(a));
    }
    const EGLint config_attributes[] = {EGL_SURFACE_TYPE,
                                        EGL_PBUFFER_BIT,
                                        EGL_RED_SIZE,
                                        8,
                                        EGL_GREEN_SIZE,
                                        8,
                                        EGL_BLUE_SIZE,
                                        8,
                                        EGL_ALPHA_SIZE,
                                        8,
                                        EGL_RENDERABLE_TYPE,
                                        EGL_OPENGL_BIT,
                                        EGL_NONE};
    EGLint configs = 0;
    if (!a.eglChooseConfig(display_, config_attributes, &config_, 1, &configs) || configs < 1) {
      throw GlUnavailable("no EGL config with an RGBA8 pbuffer and OpenGL: " + egl_error(a));
    }
    const EGLint context_attributes[] = {EGL_CONTEXT_MAJOR_VERSION,
                                         4,
                                         EGL_CONTEXT_MINOR_VERSION,
                                         5,
                                         EGL_CONTEXT_OPENGL_PROFILE_MASK,
                                         EGL_CONTEXT_OPENGL_COMPATIBILITY_PROFILE_BIT,
                                         EGL_NONE};
    context_ = a.eglCreateContext(display_, config_, nullptr, context_attributes);
    if (!context_) {
      throw GlUnavailable("cannot create an OpenGL 4.5 compatibility context: " + egl_error(a));
    }
    surface_ = create_pbuffer(16, 16);
    make_current(nullptr);
    info_.vendor = text(a.glGetString(GL_VENDOR));
    info_.renderer = text(a.glGetString(GL_RENDERER));
    info_.version = text(a.glGetString(GL_VERSION));
    info_.shading_language = text(a.glGetString(GL_SHADING_LANGUAGE_VERSION));
    a.glGetIntegerv(GL_MAX_TEXTURE_SIZE, &info_.max_texture_size);
    GLint extensions = 0;
    a.glGetIntegerv(GL_NUM_EXTENSIONS, &extensions);
    for (GLint i = 0; i < extensions; ++i) {
      const std::string name = text(a.glGetStringi(GL_EXTENSIONS, static_cast<GLuint>(i)));
      if (name == "GL_ARB_buffer_storage") info_.buffer_storage = a.glBufferStorage != nullptr;
      if (name == "GL_ARB_direct_state_access") {
        info_.direct_state_access = a.glTextureSubImage2D != nullptr;
      }
    }
    while (a.glGetError() != GL_NO_ERROR) {
    }
  } catch (...) {
    this->~Context();
    throw;
  }
}

Context::~Context() {
  const Api& a = api();
  if (display_) {
    a.eglMakeCurrent(display_, nullptr, nullptr, nullptr);
    if (surface_) a.eglDestroySurface(display_, surface_);
    if (context_) a.eglDestroyContext(display_, context_);
    a.eglTerminate(display_);
  }
  display_ = context_ = surface_ = nullptr;
}

void Context::make_current(void* surface) {
  const Api& a = api();
  void* chosen = surface ? surface : surface_;
  if (a.eglGetCurrentContext() == context_ &&
      a.eglGetCurrentSurface(0x3059 /*EGL_DRAW*/) == chosen) {
    return;
  }
  if (!a.eglMakeCurrent(display_, chosen, chosen, context_)) {
    throw GlUnavailable("eglMakeCurrent failed: " + egl_error(a));
  }
}

void* Context::create_pbuffer(int width, int height) {
  const Api& a = api();
  const EGLint attributes[] = {EGL_WIDTH, width, EGL_HEIGHT, height, EGL_NONE};
  void* surface = a.eglCreatePbufferSurface(display_, config_, attributes);
  if (!surface) {
    throw GlError("cannot create a " + std::to_string(width) + "x" + std::to_string(height) +
                  " pbuffer for the default framebuffer: " + egl_error(a));
  }
  return surface;
}

void Context::destroy_pbuffer(void* surface) noexcept {
  if (!surface || !display_) return;
  const Api& a = api();
  if (a.eglGetCurrentSurface(0x3059) == surface) {
    a.eglMakeCurrent(display_, surface_, surface_, context_);
  }
  a.eglDestroySurface(display_, surface);
}

}  // namespace xferscope::gl
