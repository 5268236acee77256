#define STEP unwind_step_o2fp
#define RECURSE unwind_recurse_o2fp
#include "frames_impl.inc"
