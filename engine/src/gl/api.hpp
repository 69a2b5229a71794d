// The slice of EGL and OpenGL xferscope uses, declared here and loaded at run time from the
// system's loader libraries (libEGL.so.1 and libOpenGL.so.0, from glvnd), so the engine builds
// without GL headers and the package imports where no GL library exists. Values are those of
// the Khronos registry (egl.xml, gl.xml).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace xferscope::gl {

using GLenum = unsigned int;
using GLuint = unsigned int;
using GLint = int;
using GLsizei = int;
using GLboolean = unsigned char;
using GLbitfield = unsigned int;
using GLfloat = float;
using GLchar = char;
using GLintptr = std::ptrdiff_t;
using GLsizeiptr = std::ptrdiff_t;
using GLuint64 = std::uint64_t;
using GLsync = struct __GLsync*;

using EGLint = std::int32_t;
using EGLBoolean = unsigned int;
using EGLenum = unsigned int;
using EGLAttrib = std::intptr_t;
using EGLDisplay = void*;
using EGLConfig = void*;
using EGLSurface = void*;
using EGLContext = void*;
using EGLDeviceEXT = void*;

// ---- EGL ----
constexpr EGLint EGL_SUCCESS = 0x3000;
constexpr EGLint EGL_NONE = 0x3038;
constexpr EGLint EGL_ALPHA_SIZE = 0x3021, EGL_BLUE_SIZE = 0x3022, EGL_GREEN_SIZE = 0x3023,
                 EGL_RED_SIZE = 0x3024, EGL_DEPTH_SIZE = 0x3025, EGL_SURFACE_TYPE = 0x3033,
                 EGL_RENDERABLE_TYPE = 0x3040, EGL_WIDTH = 0x3057, EGL_HEIGHT = 0x3056;
constexpr EGLint EGL_PBUFFER_BIT = 0x0001, EGL_OPENGL_BIT = 0x0008;
constexpr EGLint EGL_VENDOR = 0x3053, EGL_VERSION = 0x3054, EGL_EXTENSIONS = 0x3055;
constexpr EGLenum EGL_OPENGL_API = 0x30A2;
constexpr EGLint EGL_CONTEXT_MAJOR_VERSION = 0x3098, EGL_CONTEXT_MINOR_VERSION = 0x30FB,
                 EGL_CONTEXT_OPENGL_PROFILE_MASK = 0x30FD,
                 EGL_CONTEXT_OPENGL_COMPATIBILITY_PROFILE_BIT = 0x0002;
constexpr EGLenum EGL_PLATFORM_DEVICE_EXT = 0x313F;
constexpr EGLint EGL_CUDA_DEVICE_NV = 0x323A;
constexpr EGLint EGL_EXTENSIONS_DEVICE = 0x3055;  // eglQueryDeviceStringEXT(EGL_EXTENSIONS)

// ---- GL ----
constexpr GLenum GL_NO_ERROR = 0, GL_INVALID_ENUM = 0x0500, GL_INVALID_VALUE = 0x0501,
                 GL_INVALID_OPERATION = 0x0502, GL_STACK_OVERFLOW = 0x0503,
                 GL_STACK_UNDERFLOW = 0x0504, GL_OUT_OF_MEMORY = 0x0505,
                 GL_INVALID_FRAMEBUFFER_OPERATION = 0x0506;
constexpr GLenum GL_VENDOR = 0x1F00, GL_RENDERER = 0x1F01, GL_VERSION = 0x1F02,
                 GL_EXTENSIONS = 0x1F03, GL_SHADING_LANGUAGE_VERSION = 0x8B8C,
                 GL_NUM_EXTENSIONS = 0x821D, GL_MAX_TEXTURE_SIZE = 0x0D33,
                 GL_MAX_RECTANGLE_TEXTURE_SIZE = 0x84F8;
constexpr GLenum GL_TEXTURE_2D = 0x0DE1, GL_TEXTURE_RECTANGLE = 0x84F5;
constexpr GLenum GL_TEXTURE_MIN_FILTER = 0x2801, GL_TEXTURE_MAG_FILTER = 0x2800,
                 GL_NEAREST = 0x2600, GL_TEXTURE_MAX_LEVEL = 0x813D;
constexpr GLenum GL_TEXTURE_INTERNAL_FORMAT = 0x1003, GL_TEXTURE_RED_SIZE = 0x805C,
                 GL_TEXTURE_GREEN_SIZE = 0x805D, GL_TEXTURE_BLUE_SIZE = 0x805E,
                 GL_TEXTURE_ALPHA_SIZE = 0x805F, GL_TEXTURE_RED_TYPE = 0x8C10;
constexpr GLenum GL_UNPACK_ALIGNMENT = 0x0CF5, GL_PACK_ALIGNMENT = 0x0D05;
constexpr GLenum GL_FRAMEBUFFER = 0x8D40, GL_READ_FRAMEBUFFER = 0x8CA8,
                 GL_DRAW_FRAMEBUFFER = 0x8CA9, GL_COLOR_ATTACHMENT0 = 0x8CE0,
                 GL_FRAMEBUFFER_COMPLETE = 0x8CD5, GL_RENDERBUFFER = 0x8D41, GL_BACK = 0x0405;
constexpr GLenum GL_FRAMEBUFFER_ATTACHMENT_RED_SIZE = 0x8212,
                 GL_FRAMEBUFFER_ATTACHMENT_GREEN_SIZE = 0x8213,
                 GL_FRAMEBUFFER_ATTACHMENT_BLUE_SIZE = 0x8214,
                 GL_FRAMEBUFFER_ATTACHMENT_ALPHA_SIZE = 0x8215,
                 GL_FRAMEBUFFER_ATTACHMENT_COMPONENT_TYPE = 0x8211;
constexpr GLenum GL_PIXEL_PACK_BUFFER = 0x88EB, GL_PIXEL_UNPACK_BUFFER = 0x88EC;
constexpr GLenum GL_STREAM_DRAW = 0x88E0, GL_STREAM_READ = 0x88E1, GL_STREAM_COPY = 0x88E2,
                 GL_STATIC_DRAW = 0x88E4, GL_STATIC_READ = 0x88E5, GL_STATIC_COPY = 0x88E6,
                 GL_DYNAMIC_DRAW = 0x88E8, GL_DYNAMIC_READ = 0x88E9, GL_DYNAMIC_COPY = 0x88EA;
constexpr GLbitfield GL_MAP_READ_BIT = 0x0001, GL_MAP_WRITE_BIT = 0x0002,
                     GL_MAP_INVALIDATE_BUFFER_BIT = 0x0008, GL_MAP_PERSISTENT_BIT = 0x0040,
                     GL_MAP_COHERENT_BIT = 0x0080, GL_CLIENT_STORAGE_BIT = 0x0200;
constexpr GLenum GL_SYNC_GPU_COMMANDS_COMPLETE = 0x9117, GL_ALREADY_SIGNALED = 0x911A,
                 GL_TIMEOUT_EXPIRED = 0x911B, GL_CONDITION_SATISFIED = 0x911C,
                 GL_WAIT_FAILED = 0x911D;
constexpr GLbitfield GL_SYNC_FLUSH_COMMANDS_BIT = 0x0001;
constexpr GLbitfield GL_COLOR_BUFFER_BIT = 0x4000;
constexpr GLenum GL_POINTS = 0x0000;
constexpr GLenum GL_FRAGMENT_SHADER = 0x8B30, GL_VERTEX_SHADER = 0x8B31, GL_COMPILE_STATUS = 0x8B81,
                 GL_LINK_STATUS = 0x8B82;
constexpr GLenum GL_CLAMP_READ_COLOR = 0x891C, GL_FALSE_ENUM = 0;
constexpr GLenum GL_RGBA8_ENUM = 0x8058;

// Formats, types and internal formats by name (the user's words) and value.
constexpr GLenum GL_RED = 0x1903, GL_RG = 0x8227, GL_RGB = 0x1907, GL_RGBA = 0x1908,
                 GL_BGRA = 0x80E1;
constexpr GLenum GL_BYTE = 0x1400, GL_UNSIGNED_BYTE = 0x1401, GL_SHORT = 0x1402,
                 GL_UNSIGNED_SHORT = 0x1403, GL_INT = 0x1404, GL_UNSIGNED_INT = 0x1405,
                 GL_FLOAT = 0x1406, GL_HALF_FLOAT = 0x140B;

// Every entry point, loaded once per process.
struct Api {
  // EGL
  void* (*eglGetProcAddress)(const char*);
  EGLint (*eglGetError)();
  EGLBoolean (*eglQueryDevicesEXT)(EGLint, EGLDeviceEXT*, EGLint*);
  EGLBoolean (*eglQueryDeviceAttribEXT)(EGLDeviceEXT, EGLint, EGLAttrib*);
  const char* (*eglQueryDeviceStringEXT)(EGLDeviceEXT, EGLint);
  EGLDisplay (*eglGetPlatformDisplayEXT)(EGLenum, void*, const EGLint*);
  EGLBoolean (*eglInitialize)(EGLDisplay, EGLint*, EGLint*);
  EGLBoolean (*eglTerminate)(EGLDisplay);
  const char* (*eglQueryString)(EGLDisplay, EGLint);
  EGLBoolean (*eglBindAPI)(EGLenum);
  EGLBoolean (*eglChooseConfig)(EGLDisplay, const EGLint*, EGLConfig*, EGLint, EGLint*);
  EGLBoolean (*eglGetConfigAttrib)(EGLDisplay, EGLConfig, EGLint, EGLint*);
  EGLSurface (*eglCreatePbufferSurface)(EGLDisplay, EGLConfig, const EGLint*);
  EGLBoolean (*eglDestroySurface)(EGLDisplay, EGLSurface);
  EGLContext (*eglCreateContext)(EGLDisplay, EGLConfig, EGLContext, const EGLint*);
  EGLBoolean (*eglDestroyContext)(EGLDisplay, EGLContext);
  EGLBoolean (*eglMakeCurrent)(EGLDisplay, EGLSurface, EGLSurface, EGLContext);
  EGLContext (*eglGetCurrentContext)();
  EGLSurface (*eglGetCurrentSurface)(EGLint);
  // GL
  GLenum (*glGetError)();
  const unsigned char* (*glGetString)(GLenum);
  const unsigned char* (*glGetStringi)(GLenum, GLuint);
  void (*glGetIntegerv)(GLenum, GLint*);
  void (*glGenTextures)(GLsizei, GLuint*);
  void (*glDeleteTextures)(GLsizei, const GLuint*);
  void (*glBindTexture)(GLenum, GLuint);
  void (*glTexImage2D)(GLenum, GLint, GLint, GLsizei, GLsizei, GLint, GLenum, GLenum, const void*);
  void (*glTexSubImage2D)(GLenum, GLint, GLint, GLint, GLsizei, GLsizei, GLenum, GLenum,
                          const void*);
  void (*glTextureSubImage2D)(GLuint, GLint, GLint, GLint, GLsizei, GLsizei, GLenum, GLenum,
                              const void*);
  void (*glTexParameteri)(GLenum, GLenum, GLint);
  void (*glGetTexLevelParameteriv)(GLenum, GLint, GLenum, GLint*);
  void (*glGetTexImage)(GLenum, GLint, GLenum, GLenum, void*);
  void (*glPixelStorei)(GLenum, GLint);
  void (*glGenFramebuffers)(GLsizei, GLuint*);
  void (*glDeleteFramebuffers)(GLsizei, const GLuint*);
  void (*glBindFramebuffer)(GLenum, GLuint);
  void (*glFramebufferTexture2D)(GLenum, GLenum, GLenum, GLuint, GLint);
  void (*glFramebufferRenderbuffer)(GLenum, GLenum, GLenum, GLuint);
  void (*glGenRenderbuffers)(GLsizei, GLuint*);
  void (*glDeleteRenderbuffers)(GLsizei, const GLuint*);
  void (*glBindRenderbuffer)(GLenum, GLuint);
  void (*glRenderbufferStorage)(GLenum, GLenum, GLsizei, GLsizei);
  GLenum (*glCheckFramebufferStatus)(GLenum);
  void (*glGetFramebufferAttachmentParameteriv)(GLenum, GLenum, GLenum, GLint*);
  void (*glReadBuffer)(GLenum);
  void (*glDrawBuffer)(GLenum);
  void (*glReadPixels)(GLint, GLint, GLsizei, GLsizei, GLenum, GLenum, void*);
  void (*glDrawPixels)(GLsizei, GLsizei, GLenum, GLenum, const void*);
  void (*glWindowPos2i)(GLint, GLint);
  void (*glViewport)(GLint, GLint, GLsizei, GLsizei);
  void (*glGenBuffers)(GLsizei, GLuint*);
  void (*glDeleteBuffers)(GLsizei, const GLuint*);
  void (*glBindBuffer)(GLenum, GLuint);
  void (*glBufferData)(GLenum, GLsizeiptr, const void*, GLenum);
  void (*glBufferStorage)(GLenum, GLsizeiptr, const void*, GLbitfield);
  void* (*glMapBufferRange)(GLenum, GLintptr, GLsizeiptr, GLbitfield);
  GLboolean (*glUnmapBuffer)(GLenum);
  GLsync (*glFenceSync)(GLenum, GLbitfield);
  GLenum (*glClientWaitSync)(GLsync, GLbitfield, GLuint64);
  void (*glDeleteSync)(GLsync);
  void (*glFinish)();
  void (*glFlush)();
  void (*glClampColor)(GLenum, GLenum);
  void (*glEnable)(GLenum);
  void (*glDisable)(GLenum);
  void (*glColor4f)(GLfloat, GLfloat, GLfloat, GLfloat);
  void (*glRectf)(GLfloat, GLfloat, GLfloat, GLfloat);
  void (*glBegin)(GLenum);
  void (*glEnd)();
  void (*glVertex2f)(GLfloat, GLfloat);
  void (*glTexCoord2f)(GLfloat, GLfloat);
  GLuint (*glCreateShader)(GLenum);
  void (*glShaderSource)(GLuint, GLsizei, const GLchar* const*, const GLint*);
  void (*glCompileShader)(GLuint);
  void (*glGetShaderiv)(GLuint, GLenum, GLint*);
  void (*glGetShaderInfoLog)(GLuint, GLsizei, GLsizei*, GLchar*);
  GLuint (*glCreateProgram)();
  void (*glAttachShader)(GLuint, GLuint);
  void (*glLinkProgram)(GLuint);
  void (*glGetProgramiv)(GLuint, GLenum, GLint*);
  void (*glUseProgram)(GLuint);
  void (*glDeleteProgram)(GLuint);
  void (*glDeleteShader)(GLuint);
};

// The loaded entry points. Throws GlUnavailable naming the missing library and the package
// that provides it, or the missing function. $XFERSCOPE_LIBEGL and $XFERSCOPE_LIBOPENGL name
// other files to load (tests point them at files that do not exist).
const Api& api();

// "GL_INVALID_OPERATION" and the like.
std::string gl_error_name(GLenum error);

}  // namespace xferscope::gl
