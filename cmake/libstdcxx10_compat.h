/* libstdcxx10_compat.h: force-included into every C++ translation unit of the portable build
 * (cmake/bullseye-sysroot.cmake), which compiles with the host's GCC against bullseye's GCC 10
 * C++ library headers (their libstdc++.a is the one that runs on glibc 2.28).
 *
 * It supplies what the project uses from C++20 that GCC 10's library lacks, with the standard's
 * meaning, so that the sources stay written for the host's newer library:
 *  - std::bit_cast (GCC 11), through the compiler's __builtin_bit_cast;
 *  - <initializer_list>, which GCC 12's headers include transitively and GCC 10's do not. */
#ifndef CUMEMTRACE_LIBSTDCXX10_COMPAT_H
#define CUMEMTRACE_LIBSTDCXX10_COMPAT_H
#include <initializer_list>
#include <type_traits>
#if __cplusplus >= 202002L && !defined(__cpp_lib_bit_cast)
namespace std {
// clang-format 14 folds a requires-clause into the declaration's line: keep it as written.
// clang-format off
template <typename To, typename From>
  requires(sizeof(To) == sizeof(From) && is_trivially_copyable_v<To> &&
           is_trivially_copyable_v<From>)
constexpr To bit_cast(const From& from) noexcept {
  return __builtin_bit_cast(To, from);
}
// clang-format on
}  // namespace std
#endif
#endif
