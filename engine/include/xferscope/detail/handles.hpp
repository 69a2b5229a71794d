// Owners of CUDA streams and events: destroyed on every path out, an exception included, so a
// constructor that throws halfway leaks nothing; and a scope on a GPU that gives the caller's
// current GPU back. Internal to the engine.
#pragma once

#include <cuda_runtime_api.h>

#include <new>
#include <utility>

#include "xferscope/error.hpp"

namespace xferscope::detail {

// A stream of its own, synchronised and destroyed with its owner. A default-constructed one is
// the legacy default stream, which is never destroyed.
class Stream {
 public:
  Stream() = default;
  static Stream create(unsigned flags = cudaStreamNonBlocking) {
    Stream s;
    XFS_CUDA_CALL(cudaStreamCreateWithFlags(&s.stream_, flags));
    return s;
  }
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      reset();
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { reset(); }

  cudaStream_t get() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; }  // NOLINT: used as the raw handle

 private:
  void reset() noexcept {
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
      stream_ = nullptr;
    }
  }
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() = default;
  static Event create(unsigned flags = cudaEventDefault) {
    Event e;
    XFS_CUDA_CALL(cudaEventCreateWithFlags(&e.event_, flags));
    return e;
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    if (this != &other) {
      reset();
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { reset(); }

  cudaEvent_t get() const noexcept { return event_; }
  operator cudaEvent_t() const noexcept { return event_; }  // NOLINT: used as the raw handle

 private:
  void reset() noexcept {
    if (event_ != nullptr) {
      cudaEventDestroy(event_);
      event_ = nullptr;
    }
  }
  cudaEvent_t event_ = nullptr;
};

// Makes `device` the calling thread's current GPU for a scope and gives the caller's back after:
// an engine call must not change it under the caller. The std::nothrow form, for destructors and
// cleanup, swallows a failure to switch.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : DeviceGuard(device, std::nothrow) {
    if (!switched_) XFS_CUDA_CALL(cudaSetDevice(device));
  }
  DeviceGuard(int device, std::nothrow_t) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    switched_ = previous_ == device || cudaSetDevice(device) == cudaSuccess;
    if (!switched_) cudaGetLastError();
  }
  ~DeviceGuard() {
    int now = -1;
    if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_)
      cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace xferscope::detail
