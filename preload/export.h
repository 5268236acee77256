// Contract: CUMEMTRACE_EXPORT marks a function the preload exports under its C name: the driver
// hooks (for programs linked with -lcuda), dlsym, the marks API and the PyTorch attach entry.
// The library is built with hidden visibility; exports.map lists what may leave it.
#pragma once

#define CUMEMTRACE_EXPORT extern "C" __attribute__((visibility("default")))
