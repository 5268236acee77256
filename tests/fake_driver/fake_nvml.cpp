// A fake NVML (libnvidia-ml.so.1) for GPU-less tests of driver-visible memory. It answers the
// calls the collector makes (collector/live/driver_memory.cpp) from the environment:
//   FAKE_NVML_DEVICES  number of devices (default 2)
//   FAKE_NVML_USED     "DEVICE:BYTES,..." that every process using a CUDA driver (one with a
//                      libcuda.so.1 mapped: on a GPU-less test host, the fake driver) holds as
//                      the driver sees it; devices not listed hold nothing (default "0:1048576")
//   FAKE_NVML_INIT     "fail" makes nvmlInit_v2 fail (NVML present but unusable)
//   FAKE_NVML_BUS      "BUS,..." the PCI bus number (hex) of each NVML index; by default index i
//                      is on bus 0x10 * (i + 1), like the fake driver's CUDA ordinal i, so a
//                      permuted list models a process that numbers the devices differently
//   FAKE_NVML_NO_PCI   set: nvmlDeviceGetPciInfo_v3 is not supported
// Processes are found by scanning /proc, as the real driver reports every process on the GPU.
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct ProcessInfo {  // nvmlProcessInfo_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kInsufficientSize = 7;
constexpr int kUninitialized = 1;
constexpr int kUnknown = 999;

bool g_initialized = false;

unsigned device_count() {
  const char* v = getenv("FAKE_NVML_DEVICES");
  return v && *v ? static_cast<unsigned>(strtoul(v, nullptr, 10)) : 2;
}

unsigned long long used_on(unsigned device) {
  const char* v = getenv("FAKE_NVML_USED");
  std::string spec = v ? v : "0:1048576";
  size_t at = 0;
  while (at < spec.size()) {
    size_t end = spec.find(',', at);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(at, end - at);
    const size_t colon = item.find(':');
    if (colon != std::string::npos && strtoul(item.c_str(), nullptr, 10) == device) {
      return strtoull(item.c_str() + colon + 1, nullptr, 10);
    }
    at = end + 1;
  }
  return 0;
}

struct PciInfo {  // nvmlPciInfo_t
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

unsigned bus_of(unsigned device) {
  const char* v = getenv("FAKE_NVML_BUS");
  if (!v || !*v) return 0x10 * (device + 1);
  const char* p = v;
  for (unsigned i = 0; i < device && p; ++i) {
    p = strchr(p, ',');
    if (p) ++p;
  }
  return p ? static_cast<unsigned>(strtoul(p, nullptr, 16)) : 0xff;
}

bool uses_cuda(const char* pid) {
  std::ifstream maps(std::string("/proc/") + pid + "/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.size() >= 12 && line.compare(line.size() - 12, 12, "libcuda.so.1") == 0) return true;
  }
  return false;
}

std::vector<unsigned> cuda_processes() {
  std::vector<unsigned> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    if (uses_cuda(e->d_name)) out.push_back(static_cast<unsigned>(strtoul(e->d_name, nullptr, 10)));
  }
  closedir(d);
  return out;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  const char* f = getenv("FAKE_NVML_INIT");
  if (f && strcmp(f, "fail") == 0) return kUnknown;
  g_initialized = true;
  return kSuccess;
}

int nvmlShutdown() {
  g_initialized = false;
  return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!g_initialized) return kUninitialized;
  if (!count) return kInvalidArgument;
  *count = device_count();
  return kSuccess;
}

// Handles are index + 1, so that none is null.
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (!g_initialized) return kUninitialized;
  if (!device || index >= device_count()) return kInvalidArgument;
  *device = reinterpret_cast<void*>(static_cast<uintptr_t>(index) + 1);
  return kSuccess;
}

int nvmlDeviceGetPciInfo_v3(void* device, PciInfo* pci) {
  if (!g_initialized) return kUninitialized;
  if (getenv("FAKE_NVML_NO_PCI")) return kNotSupported;
  if (!device || !pci) return kInvalidArgument;
  const auto index = static_cast<unsigned>(reinterpret_cast<uintptr_t>(device) - 1);
  *pci = PciInfo{};
  pci->bus = bus_of(index);
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
  snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
  return kSuccess;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, ProcessInfo* infos) {
  if (!g_initialized) return kUninitialized;
  if (!device || !count) return kInvalidArgument;
  const auto index = static_cast<unsigned>(reinterpret_cast<uintptr_t>(device) - 1);
  const unsigned long long used = used_on(index);
  std::vector<unsigned> pids;
  if (used) pids = cuda_processes();
  if (*count < pids.size() || (!infos && !pids.empty())) {
    *count = static_cast<unsigned>(pids.size());
    return kInsufficientSize;
  }
  *count = static_cast<unsigned>(pids.size());
  for (size_t i = 0; i < pids.size(); ++i)
    infos[i] = ProcessInfo{pids[i], used, 0xffffffff, 0xffffffff};
  return kSuccess;
}

}  // extern "C"
