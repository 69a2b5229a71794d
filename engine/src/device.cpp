#include "xferscope/device.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "xferscope/error.hpp"

namespace xferscope {

namespace {

std::string format_uuid(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[64];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

int attribute(cudaDeviceAttr attr, int index) {
  int value = 0;
  XFS_CUDA_CALL(cudaDeviceGetAttribute(&value, attr, index));
  return value;
}

void check_index(int index) {
  const int count = device_count();
  if (index < 0 || index >= count) {
    throw NoDeviceError("no CUDA device with index " + std::to_string(index) + " (there are " +
                        std::to_string(count) + ")");
  }
}

}  // namespace

int device_count() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw NoDeviceError(std::string("no CUDA device: ") + cudaGetErrorString(status));
  }
  if (count == 0) throw NoDeviceError("no CUDA device: the driver reports none");
  return count;
}

DeviceInfo device_info(int index) {
  check_index(index);
  cudaDeviceProp prop{};
  XFS_CUDA_CALL(cudaGetDeviceProperties(&prop, index));
  DeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.uuid = format_uuid(prop.uuid);
  char bus_id[32] = {};
  XFS_CUDA_CALL(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, index));
  info.pci_bus_id = bus_id;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.total_memory_bytes = prop.totalGlobalMem;
  info.l2_cache_bytes = prop.l2CacheSize;
  info.memory_bus_width_bits = prop.memoryBusWidth;
  info.memory_clock_khz = attribute(cudaDevAttrMemoryClockRate, index);
  info.clock_khz = attribute(cudaDevAttrClockRate, index);
  info.async_engine_count = prop.asyncEngineCount;
  info.can_map_host_memory = prop.canMapHostMemory != 0;
  info.unified_addressing = prop.unifiedAddressing != 0;
  info.pageable_memory_access = attribute(cudaDevAttrPageableMemoryAccess, index) != 0;
  info.host_register_read_only = attribute(cudaDevAttrHostRegisterReadOnlySupported, index) != 0;
  info.managed_memory = attribute(cudaDevAttrManagedMemory, index) != 0;
  info.concurrent_managed_access = attribute(cudaDevAttrConcurrentManagedAccess, index) != 0;
  return info;
}

void memory_info(int index, std::size_t& free_bytes, std::size_t& total_bytes) {
  check_index(index);
  XFS_CUDA_CALL(cudaSetDevice(index));
  XFS_CUDA_CALL(cudaMemGetInfo(&free_bytes, &total_bytes));
}

int runtime_version() {
  int version = 0;
  XFS_CUDA_CALL(cudaRuntimeGetVersion(&version));
  return version;
}

int driver_version() {
  int version = 0;
  if (cudaDriverGetVersion(&version) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return version;
}

void enable_peer_access(int from, int to) {
  XFS_CUDA_CALL(cudaSetDevice(from));
  int can = 0;
  XFS_CUDA_CALL(cudaDeviceCanAccessPeer(&can, from, to));
  if (can == 0) {
    throw UsageError("GPU " + std::to_string(from) + " cannot access GPU " + std::to_string(to) +
                     " directly (no peer access between them)");
  }
  const cudaError_t status = cudaDeviceEnablePeerAccess(to, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
  } else {
    XFS_CUDA_CALL(status);
  }
}

}  // namespace xferscope
