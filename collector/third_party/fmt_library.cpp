// fmt's compiled part, built once per tree. Every other translation unit includes fmt's headers
// without FMT_HEADER_ONLY, so it no longer compiles fmt's formatting engine itself (28-36% of a
// collector file's compile time at -O2 -g). Debian's libfmt-dev ships only a shared libfmt,
// and the binaries link no library beyond glibc (their glibc 2.28 floor: scripts/package.sh),
// so the engine is compiled here from the same headers, into the static cumemtrace_thirdparty.
//
// format-inl.h defines the non-template functions; the templates format.h declares FMT_API
// and leaves to the library are instantiated below, for the character types fmt's own
// library provides (char and wchar_t).
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);
template FMT_API void vformat_to(buffer<char>&, string_view,
                                 basic_format_args<FMT_BUFFER_CONTEXT(char)>, locale_ref);

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
template FMT_API void buffer<wchar_t>::append(const wchar_t*, const wchar_t*);

}  // namespace detail
FMT_END_NAMESPACE
