#include "live/driver_memory.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "settings_table.h"

namespace cumemtrace::collect {

namespace {

// The few NVML types used here, as nvml.h defines them (stable ABI; no header needed).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;

struct NvmlProcessInfoV1 {  // nvmlProcessInfo_v1_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct NvmlProcessInfo {  // nvmlProcessInfo_t (v2 and v3 calls)
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct PciInfo {  // nvmlPciInfo_t
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

}  // namespace

int64_t pci_key(const std::string& bus_id) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  char tail = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail) != 4 ||
      domain > 0xffff || bus > 0xff || device > 0x1f) {
    return -1;
  }
  return static_cast<int64_t>(domain) << 16 | bus << 8 | device;
}

struct DriverMemory::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*device_count)(unsigned int*);
  nvmlReturn_t (*device_by_index)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*processes)(nvmlDevice_t, unsigned int*, NvmlProcessInfo*);       // _v3 or _v2
  nvmlReturn_t (*processes_v1)(nvmlDevice_t, unsigned int*, NvmlProcessInfoV1*);  // oldest drivers
  nvmlReturn_t (*pci_info)(nvmlDevice_t, PciInfo*);                               // _v3, optional
};

DriverMemory::DriverMemory() = default;

bool DriverMemory::available() {
  if (tried_) return lib_ != nullptr;
  tried_ = true;
  // A bad CUMEMTRACE_NVML_LIBRARY stopped tracing before a collector got here (settings_table.h).
  const settings::Setting& row = settings::row(settings::Id::kNvmlLibrary);
  const char* path = settings::from_env(row);
  void* lib = dlopen(path ? path : row.fallback, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  auto api = std::make_unique<Api>();
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
  };
  sym(api->init, "nvmlInit_v2");
  sym(api->shutdown, "nvmlShutdown");
  sym(api->device_count, "nvmlDeviceGetCount_v2");
  sym(api->device_by_index, "nvmlDeviceGetHandleByIndex_v2");
  sym(api->processes, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!api->processes) sym(api->processes, "nvmlDeviceGetComputeRunningProcesses_v2");
  sym(api->processes_v1, "nvmlDeviceGetComputeRunningProcesses");
  sym(api->pci_info, "nvmlDeviceGetPciInfo_v3");
  unsigned count = 0;
  if (!api->init || !api->shutdown || !api->device_count || !api->device_by_index ||
      (!api->processes && !api->processes_v1) || api->init() != kNvmlSuccess) {
    dlclose(lib);
    return false;
  }
  if (api->device_count(&count) != kNvmlSuccess) count = 0;
  lib_ = lib;
  api_ = api.release();
  devices_ = count;
  return true;
}

DriverMemory::~DriverMemory() {
  if (!lib_) return;
  api_->shutdown();
  delete api_;
  dlclose(lib_);
}

std::map<int, std::vector<DriverUsage>> DriverMemory::sample_all() {
  std::map<int, std::vector<DriverUsage>> out;
  if (!available()) return out;
  for (unsigned d = 0; d < devices_; ++d) {
    nvmlDevice_t dev = nullptr;
    if (api_->device_by_index(d, &dev) != kNvmlSuccess) continue;
    // The list can grow between the size query and the read: retry with the new size.
    std::vector<NvmlProcessInfo> procs(16);
    std::vector<NvmlProcessInfoV1> procs_v1;
    unsigned n = 0;
    nvmlReturn_t r = kNvmlInsufficientSize;
    for (int attempt = 0; attempt < 4 && r == kNvmlInsufficientSize; ++attempt) {
      n = static_cast<unsigned>(procs.size());
      if (api_->processes) {
        r = api_->processes(dev, &n, procs.data());
      } else {
        procs_v1.resize(procs.size());
        r = api_->processes_v1(dev, &n, procs_v1.data());
        for (unsigned i = 0; r == kNvmlSuccess && i < n; ++i) {
          procs[i] = NvmlProcessInfo{procs_v1[i].pid, procs_v1[i].usedGpuMemory, 0, 0};
        }
      }
      if (r == kNvmlInsufficientSize) procs.resize(std::max<size_t>(n + 8, procs.size() * 2));
    }
    if (r != kNvmlSuccess) continue;
    int64_t pci = -1;
    PciInfo info{};
    if (api_->pci_info && api_->pci_info(dev, &info) == kNvmlSuccess) {
      info.busId[sizeof info.busId - 1] = '\0';
      pci = pci_key(info.busId);
    }
    for (unsigned i = 0; i < n && i < procs.size(); ++i) {
      // Without the rights to see it (some containers, MIG) the driver hides the amount.
      if (procs[i].usedGpuMemory == kNvmlValueNotAvailable) continue;
      out[static_cast<int>(procs[i].pid)].push_back(
          DriverUsage{static_cast<int>(d), procs[i].usedGpuMemory, pci});
    }
  }
  return out;
}

std::vector<DriverUsage> DriverMemory::sample(int pid) {
  auto all = sample_all();
  auto it = all.find(pid);
  return it == all.end() ? std::vector<DriverUsage>{} : std::move(it->second);
}

}  // namespace cumemtrace::collect
