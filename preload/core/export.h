// Contract: CUMEMTRACE_EXPORT marks a function the preload exports under its C name: the driver
// hooks (for programs linked with -lcuda), dlsym, _exit/_Exit and the API (marks, the PyTorch
// capture's entry points). Only functions in preload/hooks/ carry it, each on the line that names
// the function: the library is built with hidden visibility, and its export map is made from
// those lines (preload/CMakeLists.txt), so it lists exactly them.
#pragma once

#define CUMEMTRACE_EXPORT extern "C" __attribute__((visibility("default")))
