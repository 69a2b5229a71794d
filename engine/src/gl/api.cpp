// Loads libEGL and libOpenGL (glvnd's loaders) at run time and resolves every entry point once.
#include "gl/api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "xferscope/gl.hpp"

namespace xferscope::gl {

namespace {

void* open_library(const char* variable, const char* fallback, const char* package) {
  const char* chosen = std::getenv(variable);
  const char* name = chosen && *chosen ? chosen : fallback;
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    throw GlUnavailable(std::string("cannot load ") + name + " (Debian/Ubuntu package " + package +
                        "; with the NVIDIA driver's EGL vendor file in " +
                        "/usr/share/glvnd/egl_vendor.d or $__EGL_VENDOR_LIBRARY_FILENAMES)");
  }
  return handle;
}

struct Loaded {
  Api api{};
  std::string error;  // why loading failed, kept for every later call
};

template <typename F>
void resolve(F& slot, void* egl, void* opengl, const char* name, bool required,
             std::string& missing) {
  void* p = nullptr;
  if (opengl) p = dlsym(opengl, name);
  if (!p && egl) p = dlsym(egl, name);
  if (!p && egl) {
    using GetProc = void* (*)(const char*);
    static GetProc get = reinterpret_cast<GetProc>(dlsym(egl, "eglGetProcAddress"));
    if (get) p = get(name);
  }
  slot = reinterpret_cast<F>(p);
  if (!p && required && missing.empty()) missing = name;
}

Loaded load() {
  Loaded out;
  try {
    void* egl = open_library("XFERSCOPE_LIBEGL", "libEGL.so.1", "libegl1");
    void* opengl = open_library("XFERSCOPE_LIBOPENGL", "libOpenGL.so.0", "libopengl0");
    std::string missing;
    Api& a = out.api;
#define XFS_EGL(name) resolve(a.name, egl, nullptr, #name, true, missing)
#define XFS_GL(name) resolve(a.name, egl, opengl, #name, true, missing)
#define XFS_GL_OPTIONAL(name) resolve(a.name, egl, opengl, #name, false, missing)
    XFS_EGL(eglGetProcAddress);
    XFS_EGL(eglGetError);
    XFS_EGL(eglQueryDevicesEXT);
    XFS_EGL(eglQueryDeviceAttribEXT);
    XFS_EGL(eglQueryDeviceStringEXT);
    XFS_EGL(eglGetPlatformDisplayEXT);
    XFS_EGL(eglInitialize);
    XFS_EGL(eglTerminate);
    XFS_EGL(eglQueryString);
    XFS_EGL(eglBindAPI);
    XFS_EGL(eglChooseConfig);
    XFS_EGL(eglGetConfigAttrib);
    XFS_EGL(eglCreatePbufferSurface);
    XFS_EGL(eglDestroySurface);
    XFS_EGL(eglCreateContext);
    XFS_EGL(eglDestroyContext);
    XFS_EGL(eglMakeCurrent);
    XFS_EGL(eglGetCurrentContext);
    XFS_EGL(eglGetCurrentSurface);
    XFS_GL(glGetError);
    XFS_GL(glGetString);
    XFS_GL(glGetStringi);
    XFS_GL(glGetIntegerv);
    XFS_GL(glGenTextures);
    XFS_GL(glDeleteTextures);
    XFS_GL(glBindTexture);
    XFS_GL(glTexImage2D);
    XFS_GL(glTexSubImage2D);
    XFS_GL_OPTIONAL(glTextureSubImage2D);
    XFS_GL(glTexParameteri);
    XFS_GL(glGetTexLevelParameteriv);
    XFS_GL(glGetTexImage);
    XFS_GL(glPixelStorei);
    XFS_GL(glGenFramebuffers);
    XFS_GL(glDeleteFramebuffers);
    XFS_GL(glBindFramebuffer);
    XFS_GL(glFramebufferTexture2D);
    XFS_GL(glFramebufferRenderbuffer);
    XFS_GL(glGenRenderbuffers);
    XFS_GL(glDeleteRenderbuffers);
    XFS_GL(glBindRenderbuffer);
    XFS_GL(glRenderbufferStorage);
    XFS_GL(glCheckFramebufferStatus);
    XFS_GL(glGetFramebufferAttachmentParameteriv);
    XFS_GL(glReadBuffer);
    XFS_GL(glDrawBuffer);
    XFS_GL(glReadPixels);
    XFS_GL(glDrawPixels);
    XFS_GL(glWindowPos2i);
    XFS_GL(glViewport);
    XFS_GL(glGenBuffers);
    XFS_GL(glDeleteBuffers);
    XFS_GL(glBindBuffer);
    XFS_GL(glBufferData);
    XFS_GL_OPTIONAL(glBufferStorage);
    XFS_GL(glMapBufferRange);
    XFS_GL(glUnmapBuffer);
    XFS_GL(glFenceSync);
    XFS_GL(glClientWaitSync);
    XFS_GL(glDeleteSync);
    XFS_GL(glFinish);
    XFS_GL(glFlush);
    XFS_GL_OPTIONAL(glClampColor);
    XFS_GL(glEnable);
    XFS_GL(glDisable);
    XFS_GL(glColor4f);
    XFS_GL(glRectf);
    XFS_GL(glBegin);
    XFS_GL(glEnd);
    XFS_GL(glVertex2f);
    XFS_GL(glTexCoord2f);
    XFS_GL(glCreateShader);
    XFS_GL(glShaderSource);
    XFS_GL(glCompileShader);
    XFS_GL(glGetShaderiv);
    XFS_GL(glGetShaderInfoLog);
    XFS_GL(glCreateProgram);
    XFS_GL(glAttachShader);
    XFS_GL(glLinkProgram);
    XFS_GL(glGetProgramiv);
    XFS_GL(glUseProgram);
    XFS_GL(glDeleteProgram);
    XFS_GL(glDeleteShader);
#undef XFS_EGL
#undef XFS_GL
#undef XFS_GL_OPTIONAL
    if (!missing.empty()) {
      out.error = "the EGL/OpenGL libraries lack " + missing + " (EGL_EXT_device_enumeration " +
                  "and EGL_EXT_platform_device are needed: a GPU driver's EGL, not Mesa's alone)";
    }
  } catch (const GlUnavailable& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace

const Api& api() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.error.empty()) throw GlUnavailable(loaded.error);
  return loaded.api;
}

void preload() {
  const Api& a = api();
  EGLint count = 0;
  a.eglQueryDevicesEXT(0, nullptr, &count);  // with no array: loads the vendor library, counts
}

std::string gl_error_name(GLenum error) {
  switch (error) {
    case GL_NO_ERROR: return "GL_NO_ERROR";
    case GL_INVALID_ENUM: return "GL_INVALID_ENUM";
    case GL_INVALID_VALUE: return "GL_INVALID_VALUE";
    case GL_INVALID_OPERATION: return "GL_INVALID_OPERATION";
    case GL_STACK_OVERFLOW: return "GL_STACK_OVERFLOW";
    case GL_STACK_UNDERFLOW: return "GL_STACK_UNDERFLOW";
    case GL_OUT_OF_MEMORY: return "GL_OUT_OF_MEMORY";
    case GL_INVALID_FRAMEBUFFER_OPERATION: return "GL_INVALID_FRAMEBUFFER_OPERATION";
    default: return "GL error " + std::to_string(error);
  }
}

}  // namespace xferscope::gl
