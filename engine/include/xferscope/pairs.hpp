// GPU to GPU across processes through NCCL (`xferscope fleet`, issue 14): one communicator over
// every rank of the fleet, and a timed one-way stream of ncclSend/ncclRecv between two of its
// ranks (bandwidth) or a ping-pong of small messages (latency). libnccl is opened at run time
// (dlopen), so the engine builds and imports without it; a machine without it refuses here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace xferscope::pairs {

// NCCL is missing (the message says where to get it) or a call of it failed (named).
class NcclError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::size_t kUniqueIdBytes = 128;  // ncclUniqueId

// A new NCCL unique id (rank 0 makes it and hands it to every rank); `library` names libnccl
// ("" : libnccl.so.2 on the loader path, then $XFERSCOPE_LIBNCCL).
std::vector<std::uint8_t> unique_id(const std::string& library = "");
// NCCL's version (2.21.5 -> 22105); NcclError with the reason when it cannot be loaded.
int nccl_version(const std::string& library = "");

struct PairTiming {
  double seconds = 0;  // device time of the whole stream, on this rank's events
  std::int64_t iterations = 0;
};

class PairComm {
 public:
  // Joins the communicator of `ranks` ranks as `rank`, on GPU `device`, with buffers of
  // `capacity` bytes (each rank sends a pattern of its own).
  PairComm(const std::vector<std::uint8_t>& id, int ranks, int rank, int device,
           std::size_t capacity, const std::string& library = "");
  ~PairComm();
  PairComm(const PairComm&) = delete;
  PairComm& operator=(const PairComm&) = delete;

  // `iterations` messages of `bytes` from rank `from` to rank `to`, after a one-byte handshake
  // that starts both streams together; ranks not in the pair return at once. Both ranks get
  // the time between their own events.
  PairTiming stream(int from, int to, std::size_t bytes, std::int64_t iterations);
  // `iterations` round trips of `bytes` between `a` and `b`; the time of all of them.
  PairTiming ping_pong(int a, int b, std::size_t bytes, std::int64_t iterations);
  // The receiver's buffer after a stream: how many of its first `bytes` differ from the
  // pattern the sender sent (0 when the data arrived whole). The buffer is refilled with the
  // pattern's complement before each measurement, so only what that stream delivered counts.
  // A stream or ping-pong whose other rank is gone (an NCCL error, or no progress for two
  // minutes) aborts the communicator and throws NcclError; so does every later one.
  std::uint64_t mismatches(std::size_t bytes);
  int rank() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xferscope::pairs
