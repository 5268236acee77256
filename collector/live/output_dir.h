// Contract: prepares the directory snapshots go to: creates it (and parents) with mode 0755
// when missing and checks that this process can create files in it. Returns an empty string when
// usable, else one line saying why not.
#pragma once

#include <string>

namespace cumemtrace::collect {

std::string prepare_output_dir(const std::string& dir);

}  // namespace cumemtrace::collect
