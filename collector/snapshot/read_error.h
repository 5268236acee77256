// Contract: the one error of every snapshot reader (snapshot_reader.h, pickle_reader.h,
// io/snapshot_input.h): what() is one line naming the input, "NAME:offset N: expected X". Its own
// header so that the reader's parts (json_scanner.h, snapshot_read_handler.h) throw it without
// including the reader they serve.
#pragma once

#include <stdexcept>

namespace cumemtrace::snap {

class ReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace cumemtrace::snap
