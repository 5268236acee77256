#define STEP unwind_step_lib
#define RECURSE unwind_recurse_lib
#include "frames_impl.inc"
