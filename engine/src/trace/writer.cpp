// The injection library's record writer (inject.hpp): the trace file and its totals, CUPTI's
// activity buffers and their records, the queued API calls formatted by the writer thread, and
// the trace's last lines.
#include <dlfcn.h>

#include <cinttypes>
#include <cstdlib>
#include <set>

#include "trace/inject.hpp"

namespace xferscope::trace {

std::mutex out_mutex;
FILE* out = nullptr;
std::uint64_t limit = 1000000;
std::atomic<bool> closed{false};
std::atomic<std::uint64_t> kernels_delivered{0};
Queue& queue = *new Queue;
std::atomic<std::uint64_t> part_ns[kParts], part_count[kParts];

namespace {

// 1 MiB: about 4,800 kernel records, so a window closed by its kernels' count (inject.cpp)
// learns the count a buffer at a time (some thousand kernels past it on each thread that
// launches); zeroed by calloc, as CUPTI is told (ZEROED_OUT_ACTIVITY_BUFFER)
constexpr std::size_t kBufferBytes = 1u << 20;

struct Totals {
  std::uint64_t records = 0, written = 0, bytes = 0, gpu_ns = 0;
};
const char* const kTypeNames[kTypes] = {"memcpy", "memset", "kernel", "runtime",
                                        "driver", "call",   "pin",    "nvtx"};
Totals totals[kTypes];                 // by record type, under out_mutex
std::set<std::uintptr_t> frames_seen;  // return addresses to name at the end
const char* const kPartNames[kParts] = {"callbacks", "hash", "unwind", "python", "kernel_switch"};

void write_record(const CUpti_Activity* record) {
  char buf[1024];
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      if (!keep(kMemcpy, m->bytes, m->end - m->start)) return;
      std::snprintf(buf, sizeof buf,
                    "{\"t\":\"memcpy\",\"k\":%u,\"s\":%u,\"d\":%u,\"async\":%d,\"b\":%" PRIu64
                    ",\"st\":%" PRIu64 ",\"en\":%" PRIu64 ",\"dev\":%u,\"str\":%u,\"c\":%" PRIu64
                    ",\"rc\":%" PRIu64 "}",
                    m->copyKind, m->srcKind, m->dstKind,
                    (m->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) ? 1 : 0, m->bytes, m->start,
                    m->end, m->deviceId, m->streamId, correlation(m->correlationId),
                    m->runtimeCorrelationId ? correlation(m->runtimeCorrelationId) : 0);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record);
      if (!keep(kMemcpy, m->bytes, m->end - m->start)) return;
      std::snprintf(buf, sizeof buf,
                    "{\"t\":\"memcpy\",\"k\":%u,\"s\":%u,\"d\":%u,\"async\":%d,\"b\":%" PRIu64
                    ",\"st\":%" PRIu64 ",\"en\":%" PRIu64 ",\"dev\":%u,\"str\":%u,\"c\":%" PRIu64
                    ",\"peer\":%u}",
                    m->copyKind, m->srcKind, m->dstKind,
                    (m->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) ? 1 : 0, m->bytes, m->start,
                    m->end, m->srcDeviceId, m->streamId, correlation(m->correlationId),
                    m->dstDeviceId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      if (!keep(kMemset, m->bytes, m->end - m->start)) return;
      std::snprintf(buf, sizeof buf,
                    "{\"t\":\"memset\",\"m\":%u,\"b\":%" PRIu64 ",\"st\":%" PRIu64
                    ",\"en\":%" PRIu64 ",\"dev\":%u,\"str\":%u,\"c\":%" PRIu64 "}",
                    m->memoryKind, m->bytes, m->start, m->end, m->deviceId, m->streamId,
                    correlation(m->correlationId));
      break;
    }
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      kernels_delivered.fetch_add(1, std::memory_order_relaxed);
      if (!keep(kKernel, 0, k->end - k->start)) return;
      std::snprintf(buf, sizeof buf,
                    "{\"t\":\"kernel\",\"n\":\"%.300s\",\"st\":%" PRIu64 ",\"en\":%" PRIu64
                    ",\"dev\":%u,\"str\":%u,\"c\":%" PRIu64 "}",
                    escaped(k->name).c_str(), k->start, k->end, k->deviceId, k->streamId,
                    correlation(k->correlationId));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {  // an NVTX range's start or end, or a mark
      const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(record);
      const bool thread = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD;
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
        std::snprintf(buf, sizeof buf, "{\"t\":\"nvtx\",\"id\":%u,\"b\":%" PRIu64 "}", m->id,
                      m->timestamp);
      } else if (m->flags &
                 (CUPTI_ACTIVITY_FLAG_MARKER_START | CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS)) {
        if (!keep(kMarker, 0, 0)) return;
        std::snprintf(buf, sizeof buf,
                      "{\"t\":\"nvtx\",\"id\":%u,\"a\":%" PRIu64
                      ",\"n\":\"%.200s\",\"dom\":\"%.80s\",\"tid\":%u,\"i\":%d}",
                      m->id, m->timestamp, escaped(m->name ? m->name : "").c_str(),
                      escaped(m->domain ? m->domain : "").c_str(),
                      thread ? m->objectId.pt.threadId : 0,
                      (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) ? 1 : 0);
      } else {
        return;
      }
      break;
    }
    default: return;
  }
  line(buf);
}

// Format and write the queued calls (under out_mutex).
void write_calls(const std::vector<Call>& calls) {
  char buf[2304];
  for (const Call& c : calls) {
    if (c.pin) {
      if (!keep(kPin, 0, 0)) continue;
      int used = std::snprintf(buf, sizeof buf,
                               "{\"t\":\"pin\",\"how\":\"%s\",\"f\":\"%s\",\"p\":%" PRIuPTR
                               ",\"b\":%zu,\"c\":%" PRIu64,
                               c.pin, c.function, c.src, c.bytes, c.correlation);
      if (c.python) used += std::snprintf(buf + used, sizeof buf - used, ",\"py\":%u", c.python);
      used += write_frames(buf + used, sizeof buf - used, c.frames, c.frame_count);
      std::snprintf(buf + used, sizeof buf - used, "}");
      line(buf);
      continue;
    }
    if (c.copy) keep(kCall, 0, 0);
    if (!knob_api || !keep(c.runtime ? kRuntime : kDriver, 0, c.end - c.start)) continue;
    const CUpti_CallbackDomain domain =
        c.runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
    int used = std::snprintf(buf, sizeof buf,
                             "{\"t\":\"api\",\"rt\":%d,\"f\":\"%s\",\"st\":%" PRIu64
                             ",\"en\":%" PRIu64 ",\"tid\":%u,\"c\":%" PRIu64 ",\"o\":%u",
                             c.runtime ? 1 : 0, api_name(domain, c.cbid).c_str(), c.start, c.end,
                             c.thread, c.correlation, c.own);
    if (c.copy) {
      used += std::snprintf(buf + used, sizeof buf - used,
                            ",\"src\":%" PRIuPTR ",\"dst\":%" PRIuPTR ",\"b\":%zu,\"kind\":%d",
                            c.src, c.dst, c.bytes, c.kind);
      if (c.hashed) used += std::snprintf(buf + used, sizeof buf - used, ",\"h\":%" PRIu64, c.hash);
    }
    if (c.copy || c.sync) {  // the callers of a copy or a synchronization
      used += write_frames(buf + used, sizeof buf - used, c.frames, c.frame_count);
      if (c.python) used += std::snprintf(buf + used, sizeof buf - used, ",\"py\":%u", c.python);
    }
    std::snprintf(buf + used, sizeof buf - used, "}");
    line(buf);
  }
}

}  // namespace

bool keep(Type type, std::uint64_t bytes, std::uint64_t ns) {
  Totals& t = totals[type];
  ++t.records;
  t.bytes += bytes;
  t.gpu_ns += ns;
  if (t.written >= limit) return false;
  ++t.written;
  return true;
}

void line(const char* text) {
  if (out) {
    std::fputs(text, out);
    std::fputc('\n', out);
  }
}

std::string escaped(const char* s) {
  std::string r;
  for (const char* p = s ? s : ""; *p; ++p) {
    if (*p == '"' || *p == '\\') r += '\\';
    if (static_cast<unsigned char>(*p) < 0x20) continue;
    r += *p;
  }
  return r;
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::calloc(1, kBufferBytes));  // 16-byte aligned
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                               std::size_t valid) {
  drain();
  {
    std::lock_guard<std::mutex> lock(out_mutex);
    CUpti_Activity* record = nullptr;
    while (cupti.cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS)
      write_record(record);
    std::size_t dropped = 0;
    cupti.cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
    if (dropped) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "{\"t\":\"dropped\",\"n\":%zu}", dropped);
      line(buf);
    }
    if (out) std::fflush(out);
  }
  std::free(buffer);
}

int write_frames(char* buf, std::size_t size, const std::uintptr_t* frames, int count) {
  if (count < 0) return 0;
  int used = std::snprintf(buf, size, ",\"at\":[");
  for (int i = 0; i < count && used + 24 < static_cast<int>(size); ++i) {
    frames_seen.insert(frames[i]);
    used += std::snprintf(buf + used, size - used, "%s%" PRIuPTR, i ? "," : "", frames[i]);
  }
  used += std::snprintf(buf + used, size - used, "]");
  return used;
}

void drain() {
  std::lock_guard<std::mutex> lock(out_mutex);
  std::vector<Call> calls;
  {
    std::lock_guard<std::mutex> taken(queue.mutex);
    calls.swap(queue.calls);
  }
  if (!out) return;
  write_stacks();  // before the calls that name them
  write_calls(calls);
}

void writer() {
  while (!closed.load(std::memory_order_relaxed)) {
    {
      std::unique_lock<std::mutex> lock(queue.mutex);
      queue.wake.wait_for(lock, std::chrono::milliseconds(100),
                          [] { return queue.calls.size() >= kWakeWriter; });
    }
    if (closed.load(std::memory_order_relaxed)) break;
    drain();
    if (DriverDrop drop; drop_driver_callbacks(drop)) {
      std::uint64_t now = 0;
      cupti.cuptiGetTimestamp(&now);
      char buf[128];
      std::snprintf(buf, sizeof buf,
                    "{\"t\":\"driver_off\",\"ts\":%" PRIu64 ",\"took\":%" PRIu64
                    ",\"held\":%u,\"went_on\":%u}",
                    now, drop.took_ns, drop.held, drop.went_on);
      std::lock_guard<std::mutex> lock(out_mutex);
      line(buf);
    }
  }
}

void write_end() {
  drain();
  std::lock_guard<std::mutex> lock(out_mutex);
  if (!out) return;
  char buf[1024];
  for (int type = 0; type < kTypes; ++type) {
    const Totals& t = totals[type];
    if (!t.records) continue;
    std::snprintf(buf, sizeof buf,
                  "{\"t\":\"totals\",\"of\":\"%s\",\"records\":%" PRIu64 ",\"written\":%" PRIu64
                  ",\"b\":%" PRIu64 ",\"ns\":%" PRIu64 "}",
                  kTypeNames[type], t.records, t.written, t.bytes, t.gpu_ns);
    line(buf);
  }
  std::string cost = "{\"t\":\"cost\"";
  for (int part = 0; part < kParts; ++part) {
    cost += ",\"" + std::string(kPartNames[part]) + "\":[" +
            std::to_string(part_count[part].load()) + "," + std::to_string(part_ns[part].load()) +
            "]";
  }
  line((cost + "}").c_str());
  // name the callers' return addresses: the object, the symbol where exported, the offset
  for (std::uintptr_t a : frames_seen) {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(a), &info) || !info.dli_fname) continue;
    std::snprintf(buf, sizeof buf,
                  "{\"t\":\"frame\",\"a\":%" PRIuPTR ",\"obj\":\"%s\",\"off\":%" PRIuPTR
                  ",\"sym\":\"%.200s\"}",
                  a, escaped(info.dli_fname).c_str(),
                  a - reinterpret_cast<std::uintptr_t>(info.dli_fbase),
                  escaped(info.dli_sname).c_str());
    line(buf);
  }
  std::uint64_t now = 0;
  cupti.cuptiGetTimestamp(&now);
  std::snprintf(buf, sizeof buf, "{\"t\":\"end\",\"ts\":%" PRIu64 "}", now);
  line(buf);
  std::fclose(out);
  out = nullptr;
}

}  // namespace xferscope::trace
