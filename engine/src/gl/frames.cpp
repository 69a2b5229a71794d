// A GL session's frames (session_impl.hpp): one upload or readback frame the scenario's way
// (client memory, PBOs, the persistent ring, CUDA interop) and the timed frame loop.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "gl/session_impl.hpp"
#include "xferscope/cpu_work.hpp"
#include "xferscope/error.hpp"

namespace xferscope::gl {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

// Puts the host image into the GL the scenario's way; map_s gets the host-side staging
// (map, memcpy, unmap, fence waits), call_s the upload call itself.
void Session::Impl::upload_frame(std::int64_t frame, FrameLog& t) {
  const void* source = image;
  if (s.method == "cuda_interop") {
    cudaArray_t array = map_texture(t);
    const auto start = Clock::now();
    XFS_CUDA_CALL(cudaMemcpy2DToArray(array, 0, 0, image, static_cast<std::size_t>(s.row_stride()),
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
void Session::Impl::flush_point() {
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
void Session::Impl::draw(std::int64_t frame) {
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
void Session::Impl::read_into(void* destination, FrameLog& t) {
  const auto start = Clock::now();
  if (s.method == "gettexture") {
    a.glGetTexImage(target, 0, format.value, type.value, destination);
  } else {
    a.glReadPixels(0, 0, s.width, s.height, format.value, type.value, destination);
  }
  t.call_s += since(start);
}

// CUDA interop: the registered texture mapped for CUDA (map_s gets the time), its array.
cudaArray_t Session::Impl::map_texture(FrameLog& t) {
  const auto start = Clock::now();
  XFS_CUDA_CALL(cudaGraphicsMapResources(1, &resource, nullptr));
  cudaArray_t array = nullptr;
  XFS_CUDA_CALL(cudaGraphicsSubResourceGetMappedArray(&array, resource, 0, 0));
  t.map_s += since(start);
  return array;
}

void Session::Impl::unmap_texture(FrameLog& t) {
  const auto start = Clock::now();
  XFS_CUDA_CALL(cudaGraphicsUnmapResources(1, &resource, nullptr));
  t.map_s += since(start);
}

void Session::Impl::interop_read(FrameLog& t) {
  cudaArray_t array = map_texture(t);
  const auto start = Clock::now();
  XFS_CUDA_CALL(cudaMemcpy2DFromArray(out, static_cast<std::size_t>(s.row_stride()), array, 0, 0,
                                      static_cast<std::size_t>(s.row_bytes()),
                                      static_cast<std::size_t>(s.height), cudaMemcpyDeviceToHost));
  t.call_s += since(start);
  unmap_texture(t);
}

// Maps PBO `index` and unmaps it; map_s gets the map call, which waits for the frame. The
// frame counts as read back once mapped: the application reads it there (the paper's loop:
// map and unmap PBO[n - x]); its work is the dummy work. `copy_out` copies it to client
// memory, as verification does.
void Session::Impl::collect(std::size_t index, FrameLog& t, bool copy_out) {
  a.glBindBuffer(GL_PIXEL_PACK_BUFFER, pbos[index]);
  const auto start = Clock::now();
  void* p = a.glMapBufferRange(GL_PIXEL_PACK_BUFFER, 0, host_bytes, GL_MAP_READ_BIT);
  t.map_s += since(start);
  if (!p) check("glMapBufferRange (readback PBO)");
  if (copy_out) std::memcpy(out, p, static_cast<std::size_t>(host_bytes));
  a.glUnmapBuffer(GL_PIXEL_PACK_BUFFER);
  a.glBindBuffer(GL_PIXEL_PACK_BUFFER, 0);
}

void Session::Impl::work(std::uint64_t units, FrameLog& t) {
  if (units == 0) return;
  const auto start = Clock::now();
  do_cpu_work(units);
  t.work_s += since(start);
}

// The paper's loop with x PBOs: bind PBO[n], draw, read, (work), map and unmap the oldest
// outstanding PBO, read x - 1 frames earlier.
void Session::Impl::readback_frame(std::int64_t frame, std::uint64_t units, FrameLog& t) {
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

RunTiming Session::Impl::run(std::int64_t frames, double work_s, bool log) {
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

}  // namespace xferscope::gl
