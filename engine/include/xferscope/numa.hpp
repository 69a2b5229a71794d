// Where host memory lives on a host of several NUMA nodes: the calling thread's memory policy
// (every page it allocates or first touches from then on goes to one node), and the node a page
// is on. Linux system calls (set_mempolicy, get_mempolicy), no libnuma needed.
#pragma once

namespace xferscope {

// From now on the calling thread's new pages come from `node` only (MPOL_BIND); -1 restores the
// default policy (the node the thread runs on). Throws UsageError naming the node when the
// kernel refuses it.
void bind_memory(int node);

// The NUMA node the page at `address` is on, or -1 when the kernel does not say (no page yet,
// memory the driver mapped itself, a kernel without NUMA).
int memory_node(const void* address) noexcept;

}  // namespace xferscope
