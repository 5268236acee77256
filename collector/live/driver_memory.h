// Contract: per-process device memory as the driver reports it, through NVML (what nvidia-smi
// shows: tracked allocations plus the CUDA context, loaded modules and memory of libraries the
// tracer does not see). NVML is loaded at run time with dlopen: $CUMEMTRACE_NVML_LIBRARY when set
// (tests point it at a fake), else "libnvidia-ml.so.1". Without NVML (or when it fails to
// initialize) every query answers nothing, silently: driver_memory is then an empty list.
// Device numbers are NVML indices with each device's PCI address, so that the caller can map them
// to the process's CUDA ordinals (which CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER renumber). NVML
// reports host pids: a collector inside a pid namespace other than the GPU host's matches nothing.
// NVML is loaded on first use (its initialization can take a while), so a collector that never
// samples never loads it. Not thread-safe; one instance per collector.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cumemtrace::collect {

struct DriverUsage {
  int device = 0;  // NVML index
  uint64_t used_bytes = 0;
  int64_t pci = -1;  // pci_key() of the device, -1 when NVML did not say
};

// "0000:3B:00.0" (CUDA) or "00000000:3B:00.0" (NVML) as domain << 16 | bus << 8 | device; -1
// when it does not parse. Both spellings of one device give one key.
int64_t pci_key(const std::string& bus_id);

class DriverMemory {
 public:
  DriverMemory();
  ~DriverMemory();
  DriverMemory(const DriverMemory&) = delete;
  DriverMemory& operator=(const DriverMemory&) = delete;

  // Loads NVML on the first call; false when there is none.
  bool available();
  // Every process's usage per device, one NVML pass over all devices (pid -> devices).
  std::map<int, std::vector<DriverUsage>> sample_all();
  // One process's usage per device (devices it has no memory on are left out).
  std::vector<DriverUsage> sample(int pid);

 private:
  struct Api;
  bool tried_ = false;
  void* lib_ = nullptr;
  Api* api_ = nullptr;
  unsigned devices_ = 0;
};

}  // namespace cumemtrace::collect
