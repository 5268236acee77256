#define STEP unwind_step_o0
#define RECURSE unwind_recurse_o0
#include "frames_impl.inc"
