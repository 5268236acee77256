// Contract: behaves like a program linked with static cudart: it never links libcuda, reaches
// the driver only through dlopen + dlsym("cuGetProcAddress_v2") + cuGetProcAddress_v2 lookups
// (gpa_loader.h), and calls the returned pointers directly. Runs every scenario.
#include "gpa_loader.h"
#include "scenarios.h"

namespace cumemtrace::testprog {
namespace {

DriverEntryPoints g_driver;

CUresult init() {
  return g_driver.init(0);
}

CUresult set_device(int ordinal) {
  CUdevice device = 0;
  CUresult r = g_driver.deviceGet(&device, ordinal);
  if (r != CUDA_SUCCESS) return r;
  CUcontext ctx = nullptr;
  r = g_driver.primaryCtxRetain(&ctx, device);
  if (r != CUDA_SUCCESS) return r;
  return g_driver.ctxSetCurrent(ctx);
}

Driver table() {
  Driver d{};
  static_cast<DriverCalls&>(d) = g_driver;  // every call the scenarios make, as looked up
  d.init = init;
  d.setDevice = set_device;
  return d;
}

}  // namespace
}  // namespace cumemtrace::testprog

int main(int argc, char** argv) {
  namespace tp = cumemtrace::testprog;
  if (!tp::load_driver_entry_points(&tp::g_driver)) return 3;
  return tp::run_scenario(tp::table(), argc, argv);
}
