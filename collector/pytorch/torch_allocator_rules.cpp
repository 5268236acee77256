// PyTorch's caching-allocator rules: see the header. Names follow PyTorch's functions.
#include "pytorch/torch_allocator_rules.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <vector>

namespace cumemtrace::analysis::torch_alloc {

namespace {

int log2_floor(uint64_t v) {
  return 63 - std::countl_zero(v);
}

std::vector<std::string> tokenize(std::string_view text) {
  std::vector<std::string> out;
  std::string buf;
  for (char ch : text) {
    if (ch == ',' || ch == ':' || ch == '[' || ch == ']') {
      if (!buf.empty()) out.push_back(std::move(buf));
      buf.clear();
      out.emplace_back(1, ch);
    } else if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') {
      buf += ch;
    }
  }
  if (!buf.empty()) out.push_back(std::move(buf));
  return out;
}

std::optional<uint64_t> to_unsigned(const std::string& s) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::strtoull(s.c_str(), nullptr, 10);
}

bool is_pow2(uint64_t v) {
  return v && !(v & (v - 1));
}

}  // namespace

std::optional<AllocatorConfig> parse_alloc_conf(std::string_view text, std::string* error) {
  AllocatorConfig c;
  c.text = std::string(text);
  const auto t = tokenize(text);
  auto fail = [&](std::string why) -> std::optional<AllocatorConfig> {
    if (error) *error = "allocator configuration '" + std::string(text) + "': " + why;
    return std::nullopt;
  };
  size_t i = 0;
  // The value after "key:" at t[i] (the key); advances i to it.
  auto value = [&](std::string* v) {
    if (i + 2 >= t.size() || t[i + 1] != ":") return false;
    i += 2;
    *v = t[i];
    return true;
  };
  for (; i < t.size(); ++i) {
    const std::string key = t[i];
    std::string v;
    if (key == "max_split_size_mb" || key == "max_non_split_rounding_mb" ||
        key == "large_segment_size_mb") {
      if (!value(&v)) return fail("expected a value after " + key);
      const auto mb = to_unsigned(v);
      if (!mb) return fail(key + " must be a number of MiB, not '" + v + "'");
      if (key != "large_segment_size_mb" && *mb < kLargeBuffer / kMiB) {
        return fail(key + " too small, must be >= 20");
      }
      if (key == "large_segment_size_mb" && *mb < 2) {
        return fail("large_segment_size_mb too small, must be >= 2");
      }
      const uint64_t bytes = std::min<uint64_t>(*mb, UINT64_MAX / kMiB) * kMiB;
      (key == "max_split_size_mb"           ? c.max_split_size
       : key == "max_non_split_rounding_mb" ? c.max_non_split_rounding_size
                                            : c.large_segment_size) = bytes;
    } else if (key == "garbage_collection_threshold") {
      if (!value(&v)) return fail("expected a value after " + key);
      char* end = nullptr;
      errno = 0;
      const double d = std::strtod(v.c_str(), &end);
      if (errno || end == v.c_str() || *end || !(d > 0 && d < 1)) {
        return fail("garbage_collection_threshold must be in (0.0, 1.0), not '" + v + "'");
      }
      c.garbage_collection_threshold = d;
    } else if (key == "roundup_power2_divisions") {
      if (i + 2 >= t.size() || t[i + 1] != ":") return fail("expected a value after " + key);
      i += 2;
      if (t[i] != "[") {
        const auto d = to_unsigned(t[i]);
        if (!d || !is_pow2(*d)) return fail("roundup_power2_divisions must be a power of 2");
        c.roundup_power2_divisions.fill(*d);
      } else {
        bool first = true;
        size_t last = 0;
        while (++i < t.size() && t[i] != "]") {
          const std::string interval = t[i];
          if (i + 2 >= t.size() || t[i + 1] != ":") return fail("expected INTERVAL:DIVISIONS");
          i += 2;
          const auto d = to_unsigned(t[i]);
          if (!d || (*d != 0 && !is_pow2(*d))) {
            return fail("roundup divisions must be a power of 2 or 0, not '" + t[i] + "'");
          }
          if (interval == ">") {
            std::fill(c.roundup_power2_divisions.begin() + static_cast<std::ptrdiff_t>(last),
                      c.roundup_power2_divisions.end(), *d);
          } else {
            const auto mb = to_unsigned(interval);
            if (!mb || !is_pow2(*mb)) return fail("roundup intervals must be powers of 2 (MiB)");
            const size_t index =
                std::min<size_t>(static_cast<size_t>(log2_floor(*mb)), kRoundupIntervals - 1);
            if (first) {
              std::fill(c.roundup_power2_divisions.begin(),
                        c.roundup_power2_divisions.begin() + static_cast<std::ptrdiff_t>(index),
                        *d);
              first = false;
            }
            c.roundup_power2_divisions[index] = *d;
            last = index;
          }
          if (i + 1 < t.size() && t[i + 1] == ",") ++i;
        }
        if (i >= t.size()) return fail("expected ']' closing roundup_power2_divisions");
      }
    } else if (key == "expandable_segments" || key == "release_lock_on_cudamalloc" ||
               key == "pinned_use_cuda_host_register" || key == "pinned_use_background_threads" ||
               key == "graph_capture_record_stream_reuse") {
      if (!value(&v)) return fail("expected a value after " + key);
      if (v != "True" && v != "False") {
        return fail("expected True or False for " + key + ", not '" + v + "'");
      }
      if (key == "expandable_segments") c.expandable_segments = v == "True";
    } else if (key == "pinned_num_register_threads" || key == "pinned_reserve_segment_size_mb") {
      if (!value(&v) || !to_unsigned(v)) return fail("expected a number after " + key);
    } else if (key == "backend") {
      if (!value(&v)) return fail("expected a value after backend");
      if (v == "cudaMallocAsync") {
        return fail(
            "backend:cudaMallocAsync is the driver's pool, not the caching allocator "
            "this models");
      }
      if (v != "native") return fail("unknown allocator backend '" + v + "'");
    } else {
      return fail("unrecognized CachingAllocator option: " + key);
    }
    if (i + 1 < t.size()) {
      if (t[i + 1] != ",") return fail("expected ',' after " + key);
      ++i;
    }
  }
  return c;
}

uint64_t round_size(const AllocatorConfig& c, uint64_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const int index = std::clamp(log2_floor(size) - 20, 0, static_cast<int>(kRoundupIntervals) - 1);
  const uint64_t divisions = c.roundup_power2_divisions[static_cast<size_t>(index)];
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    if (is_pow2(size)) return size;
    const uint64_t floor = uint64_t{1} << log2_floor(size);
    const uint64_t step = floor >> log2_floor(divisions);
    if (step == 0) return floor << 1;
    const uint64_t down = size & ~(step - 1);
    return down == size ? size : down + step;
  }
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

uint64_t allocation_size(const AllocatorConfig& c, uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return c.large_segment_size;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

bool should_split(const AllocatorConfig& c, bool small, uint64_t block, uint64_t rounded) {
  const uint64_t remaining = block - rounded;
  if (small || c.expandable_segments) return remaining >= kMinBlockSize;
  return rounded < c.max_split_size && remaining > kSmallSize;
}

std::string unmodelled_torch(std::string_view version) {
  const std::string_view v = version.substr(0, version.find('+'));
  const auto dot = v.find('.', v.find('.') + 1);
  if (v.substr(0, dot) == kModelledTorch) return "";
  return "the run used torch " + std::string(version) + ", and the allocator rules are torch " +
         std::string(kModelledTorch) + "'s (the only version checked against recorded segments)";
}

}  // namespace cumemtrace::analysis::torch_alloc
