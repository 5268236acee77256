// Contract: a PyTorch run's phases and iterations, as the automatic phase marks recorded them
// (preload/python/cumemtrace_phases.py; names below). The marks are annotations: START/END pairs
// `auto:forward`, `auto:loss` (a loss module's call), `auto:backward`, `auto:optimizer`,
// `auto:zero_grad` and a MARK `auto:step` right after each optimizer step's END (the iteration
// boundary). From them:
//  - spans: the run cut into stretches of one phase each, in time order, covering all time. A
//    phase interval is [START, END] (an entry at END's microsecond is still inside; an interval
//    with no END runs to the end). Pairs nest like brackets, an END closing the latest open START
//    of its name. Phases form a stack: the INNERMOST open interval is the phase (a forward,
//    backward or zero_grad inside optimizer.step(closure), as LBFGS and PyTorch Lightning's
//    automatic optimization run them, is that phase; "optimizer" is what remains of the step),
//    except that everything inside a backward is backward (activation checkpointing's
//    recompute). Stretches outside every interval, and the parts of an interval between the
//    intervals nested in it, are named by where they are:
//      setup  before the run's first interval;
//      loss   right after a forward or loss, until the next interval of the step: the loss
//             and whatever the program does with the outputs before backward;
//      optimizer  after a backward when an optimizer step comes next in the step (gradient
//             clipping, GradScaler's unscale_), and inside an optimizer interval;
//      data   any other stretch outside intervals: the loop's own work before a forward
//             (loading and moving the batch), and after the last interval of the run.
//    Adjacent spans of one step with the same phase are one span, except forward and backward
//    (each call its own). No span of a run with automatic phases is "other".
//  - steps (iterations): training (any auto:step MARK, backward or optimizer interval): step k
//    ends at its k-th MARK (an entry at the MARK's microsecond belongs to the step it ends);
//    everything after the last MARK is an incomplete step. Inference: each outermost forward
//    starts an iteration (the first one also holds what came before it); the last is
//    incomplete. A span never crosses a step boundary (one that would is cut in two).
//    Micro-steps: a forward starts a new micro-step when it is the step's first or a backward
//    came after the latest micro-step's start (gradient accumulation: several forward/backward
//    pairs before one step; LBFGS: one per closure evaluation; two roots called one after the
//    other, a GAN's, share one); loss and backward spans share the micro-step of the latest
//    forward before them in their step.
//  - an entry's phase: its span's, except that every entry made on an autograd engine thread
//    (the tool section's threads named `pt_autograd_<N>`) is backward whatever the time says.
// A snapshot without auto:* annotations has one "other" span and one incomplete step, and
// automatic() is false: nothing may be judged per phase or per step from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "analysis/analysed_snapshot.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

inline constexpr std::string_view kAutoForward = "auto:forward";
inline constexpr std::string_view kAutoBackward = "auto:backward";
inline constexpr std::string_view kAutoOptimizer = "auto:optimizer";
inline constexpr std::string_view kAutoLoss = "auto:loss";
inline constexpr std::string_view kAutoZeroGrad = "auto:zero_grad";
inline constexpr std::string_view kAutoStep = "auto:step";
inline constexpr std::string_view kAutogradThreadPrefix = "pt_autograd_";

// The open ends of time: a span from the start of the run begins at kTimeMin, one still open
// (or a tensor never freed) ends at kTimeMax.
inline constexpr int64_t kTimeMin = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kTimeMax = std::numeric_limits<int64_t>::max();

enum class Phase : uint8_t {
  kOther,
  kSetup,
  kData,
  kForward,
  kLoss,
  kBackward,
  kOptimizer,
  kZeroGrad
};
// "other" (no automatic phases), "setup", "data", "forward", "loss", "backward", "optimizer",
// "zero_grad"
std::string_view phase_name(Phase p);
// A phase of the stretches between intervals that holds no model work: setup, data, other.
bool gap_phase(Phase p);

struct PhaseSpan {
  Phase phase = Phase::kOther;
  int64_t begin_us = 0;  // inclusive
  int64_t end_us = 0;    // exclusive (INT64_MAX: to the end)
  int step = 0;
  int micro = -1;     // forward/loss/backward: the micro-step within its step (0-based); else -1
  bool ended = true;  // false for an interval whose END was never recorded
};

struct StepSpan {
  int64_t begin_us = 0;  // inclusive (INT64_MIN for the first)
  int64_t end_us = 0;    // exclusive (INT64_MAX while incomplete)
  bool complete = false;
  int micro_steps = 0;  // forwards within the step
};

class Phases {
 public:
  explicit Phases(const snap::Snapshot& s);
  // How many this process has built (every thread): the tests' count of Phases per command
  // (phases_of: one per analysed snapshot).
  static uint64_t built();

  bool automatic() const { return automatic_; }  // any auto:* annotation
  bool training() const { return training_; }    // any auto:step MARK
  const std::vector<PhaseSpan>& spans() const { return spans_; }
  const std::vector<StepSpan>& steps() const { return steps_; }
  size_t complete_steps() const;

  size_t span_at(int64_t time_us) const;
  int step_at(int64_t time_us) const;
  bool autograd_thread(uint32_t tid) const { return autograd_tids_.count(tid) != 0; }
  // Whether time_us lies inside an outermost auto:optimizer interval ([START, END]): the step
  // itself, not the stretch between backward and the step that its "optimizer" span also holds
  // (gradient clipping, GradScaler's unscale_: the program's own code).
  bool in_optimizer_step(int64_t time_us) const;

  struct Where {
    Phase phase = Phase::kOther;
    int step = 0;
    size_t span = 0;
  };
  Where of(const snap::TraceEntry& e) const;

 private:
  bool automatic_ = false;
  bool training_ = false;
  std::vector<PhaseSpan> spans_;
  std::vector<StepSpan> steps_;
  std::unordered_set<uint32_t> autograd_tids_;
  std::vector<std::pair<int64_t, int64_t>> optimizer_steps_;  // [START, END], by time
};

// The snapshot's phases, built once per analysed view (analysis/analysed_snapshot.h): every
// view of one command reads the same.
inline const Phases& phases_of(const AnalysedSnapshot& a) {
  return a.derived<Phases>();
}

}  // namespace cumemtrace::analysis
