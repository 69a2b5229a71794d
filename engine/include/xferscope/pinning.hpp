// What pinning host memory costs, against what it saves per transfer.
#pragma once

#include <cstddef>

namespace xferscope {

struct PinningCosts {
  double host_alloc_s = 0;       // cudaMallocHost
  double host_free_s = 0;        // cudaFreeHost
  double register_s = 0;         // cudaHostRegister of touched pageable memory
  double unregister_s = 0;       // cudaHostUnregister
  double pageable_copy_s = 0;    // one H2D cudaMemcpy from pageable memory (median of 3)
  double pinned_copy_s = 0;      // ... from memory cudaMallocHost gave
  double registered_copy_s = 0;  // ... from registered memory
  double host_copy_s = 0;        // memcpy of the pageable data into the pinned buffer, once
};

// Times each step once for `bytes` on `device` (host clock), and three copies of each kind.
PinningCosts measure_pinning(int device, std::size_t bytes);

}  // namespace xferscope
