// A fake NVML (libnvidia-ml.so.1) for GPU-less tests of driver-visible memory. It answers the
// calls the collector makes (collector/live/driver_memory.cpp) from the environment:
//   FAKE_NVML_DEVICES  number of devices (default 2)
//   FAKE_NVML_USED     "DEVICE:BYTES,..." that every process using a CUDA driver (one with a
//                      libcuda.so.1 mapped: on a GPU-less test host, the fake driver) holds as
//                      the driver sees it; devices not listed hold nothing (default "0:1048576")
//   FAKE_NVML_CONTEXT  "DEVICE:BYTES,..." what each CUDA context costs on that device: added to
//                      a process's usage once per context it has there. The fake driver maps
//                      one page of a memfd named "fake-cuda-context-D" per context in being on
//                      device D (fake_driver.cpp; D is the CUDA ordinal, the NVML index of the
//                      same bus unless FAKE_NVML_BUS permutes them); this library counts those
//                      mappings in /proc/PID/maps. Unset: contexts cost nothing
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

// The BYTES of DEVICE in a "DEVICE:BYTES,..." list; 0 when it is not listed.
unsigned long long bytes_for(const std::string& spec, unsigned device) {
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

unsigned long long used_on(unsigned device) {
  const char* v = getenv("FAKE_NVML_USED");
  return bytes_for(v ? v : "0:1048576", device);
}

unsigned long long context_bytes(unsigned device) {
  const char* v = getenv("FAKE_NVML_CONTEXT");
  return v ? bytes_for(v, device) : 0;
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

struct CudaProcess {
  unsigned pid;
  unsigned contexts[64];  // contexts in being per device (the fake driver's marker pages)
};

// A process using a CUDA driver has a libcuda.so.1 mapped: on a GPU-less test host, the fake.
bool read_process(const char* pid, CudaProcess* out) {
  std::ifstream maps(std::string("/proc/") + pid + "/maps");
  bool cuda = false;
  *out = CudaProcess{static_cast<unsigned>(strtoul(pid, nullptr, 10)), {}};
  for (std::string line; std::getline(maps, line);) {
    if (line.size() >= 12 && line.compare(line.size() - 12, 12, "libcuda.so.1") == 0) cuda = true;
    const auto at = line.find("/memfd:fake-cuda-context-");
    if (at != std::string::npos) {
      const unsigned d = static_cast<unsigned>(strtoul(line.c_str() + at + 25, nullptr, 10));
      if (d < 64) ++out->contexts[d];
    }
  }
  return cuda;
}

std::vector<CudaProcess> cuda_processes() {
  std::vector<CudaProcess> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    CudaProcess p;
    if (read_process(e->d_name, &p)) out.push_back(p);
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
  const unsigned long long base = used_on(index);
  const unsigned long long per_context = context_bytes(index);
  std::vector<ProcessInfo> found;
  if (base || per_context) {
    for (const CudaProcess& p : cuda_processes()) {
      const unsigned long long used = base + per_context * (index < 64 ? p.contexts[index] : 0u);
      if (used) found.push_back(ProcessInfo{p.pid, used, 0xffffffff, 0xffffffff});
    }
  }
  if (*count < found.size() || (!infos && !found.empty())) {
    *count = static_cast<unsigned>(found.size());
    return kInsufficientSize;
  }
  *count = static_cast<unsigned>(found.size());
  for (size_t i = 0; i < found.size(); ++i) infos[i] = found[i];
  return kSuccess;
}

}  // extern "C"
