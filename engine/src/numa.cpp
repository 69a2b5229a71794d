#include "xferscope/numa.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "xferscope/error.hpp"

namespace xferscope {

namespace {

// <numaif.h>'s values, which the kernel's ABI fixes
constexpr int kMpolDefault = 0;
constexpr int kMpolBind = 2;
constexpr unsigned long kMpolFNode = 1;
constexpr unsigned long kMpolFAddr = 2;
constexpr int kMostNodes = 1024;

}  // namespace

void bind_memory(int node) {
  if (node >= kMostNodes)
    throw UsageError("NUMA node " + std::to_string(node) + " is out of range");
  long status = 0;
  if (node < 0) {
    status = syscall(SYS_set_mempolicy, kMpolDefault, nullptr, 0UL);
  } else {
    unsigned long mask[kMostNodes / (8 * sizeof(unsigned long))] = {};
    mask[node / (8 * sizeof(unsigned long))] = 1UL << (node % (8 * sizeof(unsigned long)));
    status = syscall(SYS_set_mempolicy, kMpolBind, mask, static_cast<unsigned long>(kMostNodes));
  }
  if (status != 0) {
    throw UsageError("cannot place host memory on NUMA node " + std::to_string(node) +
                     " (set_mempolicy: " + std::strerror(errno) + ")");
  }
}

int memory_node(const void* address) noexcept {
  int node = -1;
  const long status = syscall(SYS_get_mempolicy, &node, nullptr, 0UL, const_cast<void*>(address),
                              kMpolFNode | kMpolFAddr);
  return status == 0 ? node : -1;
}

}  // namespace xferscope
