// What the CUDA runtime says about the GPUs. Link facts (PCIe generation and width, clocks)
// come from NVML, which the Python layer loads at run time.
#pragma once

#include <cstddef>
#include <string>

namespace xferscope {

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::string uuid;        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML prints it
  std::string pci_bus_id;  // "0000:18:00.0"
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  std::size_t total_memory_bytes = 0;
  int l2_cache_bytes = 0;
  int memory_bus_width_bits = 0;
  int memory_clock_khz = 0;  // peak memory clock
  int clock_khz = 0;         // peak SM clock
  int async_engine_count = 0;
  bool can_map_host_memory = false;
  bool unified_addressing = false;
  bool pageable_memory_access = false;     // reads malloc memory in place (HMM, ATS)
  bool host_register_read_only = false;    // cudaHostRegisterReadOnly
  bool managed_memory = false;             // cudaMallocManaged
  bool concurrent_managed_access = false;  // managed pages read in place while the CPU runs
};

// Number of CUDA devices; throws NoDeviceError naming the reason when there is none or the
// driver is missing.
int device_count();
DeviceInfo device_info(int index);
// Free and total device memory in bytes.
void memory_info(int index, std::size_t& free_bytes, std::size_t& total_bytes);
int runtime_version();
int driver_version();  // 0 when no driver is installed
// GPU `from` (made current) reads and writes GPU `to`'s memory directly from now on; UsageError
// when they have no peer access between them. Enabling it twice is not an error.
void enable_peer_access(int from, int to);

}  // namespace xferscope
