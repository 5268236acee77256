#include "verdicts/limits.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

namespace cumemtrace::analysis {

const std::vector<LimitSpec>& limit_specs() {
  static const std::vector<LimitSpec> specs = {
      {"max_leaked_bytes", "--max-leaked-bytes", &CheckOptions::max_leaked_bytes, "leaked-bytes",
       "Fail when more than SIZE bytes are live at exit on a device",
       "a snapshot written at the process's end, or a completed --range", true},
      {"max_peak_bytes", "--max-peak-bytes", &CheckOptions::max_peak_bytes, "peak-bytes",
       "Fail when a device's peak exceeds SIZE bytes", "any snapshot", false},
      {"max_allocated_peak", "--max-allocated-peak", &CheckOptions::max_allocated_peak,
       "allocated-peak", "Fail when PyTorch's allocated bytes on a device peak above SIZE",
       "PyTorch's allocator data (its own snapshot, or a PyTorch run under cumemtrace); "
       "a device without it gets a warning",
       false},
      {"max_reserved_peak", "--max-reserved-peak", &CheckOptions::max_reserved_peak,
       "reserved-peak",
       "Fail when PyTorch's reserved bytes (cache included) on a device peak above SIZE",
       "PyTorch's allocator data (its own snapshot, or a PyTorch run under cumemtrace); "
       "a device without it gets a warning",
       false},
      {"max_driver_peak", "--max-driver-peak", &CheckOptions::max_driver_peak, "driver-peak",
       "Fail when the driver-visible (NVML) memory of a device peaks above SIZE",
       "driver-visible (NVML) samples; a device without them gets a warning", false},
      {"max_growth", "--max-growth", &CheckOptions::max_growth, "growth",
       "Fail when live bytes grow by more than SIZE between occurrences of --mark (without "
       "--mark: the ends of a PyTorch run's automatic steps)",
       "--warmup + 2 occurrences of the mark (or complete automatic steps) in the kept trace, "
       "in a snapshot written at the process's end or within a completed --range",
       true},
      {"max_growth_per_step", "--max-growth-per-step", &CheckOptions::max_growth_per_step,
       "growth-per-step",
       "Fail when a PyTorch run's tensors grow by more than SIZE a step (automatic steps, after "
       "a warm-up); a run without automatic steps fails",
       "a PyTorch run's automatic steps (docs/pytorch.md), in a snapshot written at the "
       "process's end or within a completed --range",
       true},
      {"max_module_bytes", "--max-module-bytes", &CheckOptions::max_module_bytes, "module-bytes",
       "Fail when a module (at --module-depth) holds more than SIZE: its parameters, gradients "
       "and optimizer state at the end of the last complete step and the activations its "
       "forward saved (report's by-module view)",
       "module names (a PyTorch run under cumemtrace with the automatic phases, CPython 3.11+); "
       "not within --range",
       false},
  };
  return specs;
}

std::string_view flag_of_check(std::string_view check) {
  for (const auto& l : limit_specs())
    if (l.check == check) return l.flag;
  return check;
}

bool any_limit(const CheckOptions& o) {
  for (const auto& l : limit_specs())
    if ((o.*l.member).has_value()) return true;
  return false;
}

std::string given_limit_flags(const CheckOptions& o) {
  std::string s;
  for (const auto& l : limit_specs()) {
    if ((o.*l.member).has_value()) s += fmt::format("{}{}", s.empty() ? "" : ", ", l.flag);
  }
  return s;
}

std::string every_limit_flag() {
  const auto& specs = limit_specs();
  std::string s;
  for (size_t i = 0; i < specs.size(); ++i) {
    s += fmt::format("{}{}", i == 0 ? "" : i + 1 == specs.size() ? " or " : ", ", specs[i].flag);
  }
  return s;
}

bool mid_run_snapshot(const snap::Snapshot& s) {
  return s.tool && mid_run_reason(s.tool->reason);  // no tool: PyTorch's own, whatever it holds
}

bool mid_run_reason(const std::string& r) {
  // "peak" and "growth": bounded capture's windows (live/process_session.h).
  return r == "periodic" || r == "request" || r == "oom" || r == "peak" || r == "growth";
}

void write_limits_json(std::ostream& out) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& l : limit_specs()) {
    list.push_back({{"name", l.name},
                    {"flag", l.flag},
                    {"check", l.check},
                    {"help", l.help},
                    {"needs", l.needs},
                    {"at_end", l.at_end}});
  }
  out << nlohmann::json{{"limits", std::move(list)}}.dump(2) << '\n';
}

void write_limits_text(std::ostream& out) {
  for (const auto& l : limit_specs()) {
    out << fmt::format("{:<24} {:<22} needs {}\n", l.flag, l.name, l.needs);
  }
}

}  // namespace cumemtrace::analysis
