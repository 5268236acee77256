// The strict reader's half for the objects snapshot_fields.h describes (the `cumemtrace` tool
// section and its parts, PyTorch's external_annotations): keys, required keys and each value's
// check come from the table; the kind of a field says how its value is checked (Handler::u64,
// ::device...) and its C++ type where it goes.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "snapshot/snapshot_read_handler.h"

namespace cumemtrace::snap::detail {

namespace {

using StringMap = std::map<std::string, std::string>;
using Pairs = std::vector<std::pair<uint64_t, uint64_t>>;

// What a reader says about a scalar where this object belongs, in an array of them.
template <typename O>
constexpr std::string_view kElementError = "expected an object";
template <>
constexpr std::string_view kElementError<Annotation> = "expected an annotation object";

template <typename O>
ObjKind make_kind() {
  ObjKind k;
  O probe{};
  fields::describe(probe, [&](const fields::Field& f, auto&) {
    if (f.required) k.required |= 1u << k.keys.size();
    k.keys.push_back(f.key);
  });
  k.element_error = kElementError<O>;
  k.scalar = &Handler::described_scalar<O>;
  k.start = &Handler::described_start<O>;
  k.set_stack = [](void* obj, int32_t idx) {
    fields::describe(*static_cast<O*>(obj), [&](const fields::Field& f, auto& m) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(m)>, int32_t>) {
        if (f.kind == fields::Kind::kFrames) m = idx;
      }
    });
  };
  k.emplace = [](void* vec) -> void* { return &static_cast<std::vector<O>*>(vec)->emplace_back(); };
  return k;
}

template <typename O>
const ObjKind& kind_of() {
  static const ObjKind kind = make_kind<O>();
  return kind;
}

}  // namespace

const ObjKind& tool_kind() {
  return kind_of<ToolSection>();
}
const ObjKind& annotation_kind() {
  return kind_of<Annotation>();
}
const ObjKind& context_kind() {
  return kind_of<ContextMemory>();
}

template <typename O>
void Handler::described_scalar(void* obj, int key, const Val& v) {
  int i = 0;
  fields::describe(*static_cast<O*>(obj), [&](const fields::Field& f, auto& m) {
    if (i++ == key) set_field(f, m, v);
  });
}

template <typename O>
void Handler::described_start(void* obj, int key, bool object, std::string_view key_name) {
  int i = 0;
  fields::describe(*static_cast<O*>(obj), [&](const fields::Field& f, auto& m) {
    if (i++ == key) open_field(f, m, object, key_name);
  });
}

template <typename M>
void Handler::set_field(const fields::Field& f, M& m, const Val& v) {
  using fields::Kind;
  if constexpr (std::is_same_v<M, std::string>) {
    m = str(v);
    if (f.one_of_count &&
        std::find(f.one_of, f.one_of + f.one_of_count, m) == f.one_of + f.one_of_count)
      fail(f.invalid);
  } else if constexpr (std::is_same_v<M, bool>) {
    m = boolean_of(v);
  } else if constexpr (std::is_same_v<M, OwnerRole>) {
    if (v.kind != Val::kString) fail("expected a string");
    auto role = parse_owner_role(*v.s);
    if (!role) fail("expected role \"parameter\", \"gradient\" or \"optimizer_state\"");
    m = *role;
  } else if constexpr (std::is_same_v<M, uint64_t>) {
    m = u64(v);
  } else if constexpr (std::is_same_v<M, int64_t>) {
    m = static_cast<int64_t>(u64(v));
    if (f.nonzero && m == 0) fail(f.invalid);
  } else if constexpr (std::is_same_v<M, uint32_t>) {
    m = tid(v);
  } else if constexpr (std::is_same_v<M, int>) {
    switch (f.kind) {
      case Kind::kDevice:
        m = device(v);
        return;
      case Kind::kSchemaVersion: {
        const uint64_t ver = u64(v);
        if (ver != static_cast<uint64_t>(kSchemaVersion))
          fail_plain(fmt::format("unsupported schema_version {} (this cumemtrace reads {})", ver,
                                 kSchemaVersion));
        m = kSchemaVersion;
        return;
      }
      case Kind::kFrames:
        fail("expected an array");
      default:
        m = small_int(v);
        return;
    }
  } else if constexpr (std::is_same_v<M, StringMap> || fields::is_optional<M>::value ||
                       (std::is_class_v<M> && !fields::is_vector<M>::value)) {
    fail("expected an object");
  } else {
    fail("expected an array");
  }
}

template <typename M>
void Handler::open_field(const fields::Field&, M& m, bool object, std::string_view key_name) {
  if constexpr (std::is_same_v<M, std::vector<std::string>>) {
    need(object, false);
    m.clear();
    push(C::kStrings, key_name, nullptr, &m);
  } else if constexpr (std::is_same_v<M, StringMap>) {
    need(object, true);
    push(C::kStrMap, key_name, nullptr, &m);
  } else if constexpr (std::is_same_v<M, Pairs>) {
    need(object, false);
    push(C::kPairs, key_name, nullptr, &m);
  } else if constexpr (fields::is_optional<M>::value) {
    need(object, true);
    m.emplace();
    push(C::kObject, key_name, &kind_of<typename M::value_type>(), &*m);
  } else if constexpr (fields::is_vector<M>::value) {
    need(object, false);
    push(C::kObjects, key_name, &kind_of<typename M::value_type>(), &m);
  } else if constexpr (std::is_class_v<M> && !std::is_same_v<M, std::string>) {
    need(object, true);
    push(C::kObject, key_name, &kind_of<M>(), &m);
  } else {
    fail("expected a number or string");
  }
}

}  // namespace cumemtrace::snap::detail
