// Contract: per-process device memory as the driver reports it, through NVML (what nvidia-smi
// shows: tracked allocations plus the CUDA context, loaded modules and memory of libraries the
// tracer does not see). NVML is loaded at run time with dlopen: $CUMEMTRACE_NVML_LIBRARY when set
// (tests point it at a fake), else "libnvidia-ml.so.1". Without NVML (or when it fails to
// initialize) every query answers nothing, silently: driver_memory is then an empty list.
// Device numbers are NVML indices, which match CUDA ordinals when CUDA_DEVICE_ORDER=PCI_BUS_ID
// and CUDA_VISIBLE_DEVICES is unset. NVML reports host pids: a collector inside a pid namespace
// other than the GPU host's matches nothing. Not thread-safe; one instance per collector.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace cumemtrace::collect {

struct DriverUsage {
  int device = 0;
  uint64_t used_bytes = 0;
};

class DriverMemory {
 public:
  DriverMemory();
  ~DriverMemory();
  DriverMemory(const DriverMemory&) = delete;
  DriverMemory& operator=(const DriverMemory&) = delete;

  bool available() const { return lib_ != nullptr; }
  // Every process's usage per device, one NVML pass over all devices (pid -> devices).
  std::map<int, std::vector<DriverUsage>> sample_all();
  // One process's usage per device (devices it has no memory on are left out).
  std::vector<DriverUsage> sample(int pid);

 private:
  struct Api;
  void* lib_ = nullptr;
  Api* api_ = nullptr;
  unsigned devices_ = 0;
};

}  // namespace cumemtrace::collect
