// Contract: the settings table (preload/core/settings_table.h) on the collector's side. `run`
// registers one option per row with a flag, its help and check from the row; resolve() then
// applies the one rule (an explicit flag beats the variable, which beats the default) and says
// the first bad variable in one line; pass_on() gives the program only what the user chose by a
// flag (a variable is inherited as it is, a default is the preload's own). env_problem() is the
// same rule for the collector the preload starts (`__collect`), which reads only variables.
// `cumemtrace __settings` prints the table for the test that holds README's table, the Python
// side's table and every CUMEMTRACE_* name read in the tree to it (scripts/settings_check.py).
#pragma once

#include <array>
#include <string>

#include "settings_table.h"

namespace CLI {
class App;
}

namespace cumemtrace::cli {

// Where a setting's value came from.
enum class Source { kDefault, kFlag, kVariable };

struct SettingChoices {
  std::array<std::string, settings::kCount> flag;   // the flag's value as given; "" = not given
  std::array<std::string, settings::kCount> value;  // after resolve(): the value chosen, or ""
  std::array<Source, settings::kCount> source{};
  std::array<settings::Value, settings::kCount> parsed{};

  bool given(settings::Id id) const { return source[i(id)] != Source::kDefault; }
  const std::string& text(settings::Id id) const { return value[i(id)]; }
  const settings::Value& get(settings::Id id) const { return parsed[i(id)]; }
  // The value chosen, else the table's default.
  std::string chosen(settings::Id id) const {
    return given(id) ? value[i(id)] : settings::row(id).fallback;
  }
  // How the user spelled the setting, for messages: "--keep" or "CUMEMTRACE_KEEP".
  const char* spelled(settings::Id id) const;

 private:
  static size_t i(settings::Id id) { return static_cast<size_t>(id); }
};

// One option on `sub` per row of the table with a flag.
void add_setting_options(CLI::App* sub, SettingChoices& c);

// Fills value/source/parsed for every row a user may set (not run's hand-off). Returns "" or, for
// the first variable with a bad value, "invalid CUMEMTRACE_X (expected ...): VALUE"; `bad_reader`
// then says who reads it (settings::kCollector: run itself; else the preload). A row read only
// by the Python side is left to it (one line there, that feature off).
std::string resolve(SettingChoices& c, uint8_t& bad_reader);

// In the child before exec: sets the variable of each setting of the program's side (the preload,
// the Python side) that was given by a flag.
void pass_on(const SettingChoices& c);

// The collector's own variables (rows read by kCollector): "" or the one line for the first bad
// one, as resolve() words it.
std::string env_problem();

void add_settings_command(CLI::App& app);

}  // namespace cumemtrace::cli
