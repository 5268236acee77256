// The snapshot's field tables (collector/snapshot/snapshot_fields.h) against the published schema
// (schemas/snapshot.schema.json): every object the tables describe has exactly the schema's
// properties, the schema's required keys, and each field's kind matches the schema's type, so
// a field added to the table and not to the schema (or the other way) fails here.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "snapshot/snapshot_fields.h"

using namespace cumemtrace;
using json = nlohmann::json;
using snap::fields::Kind;

namespace {

class SchemaCheck {
 public:
  explicit SchemaCheck(json schema) : root_(std::move(schema)) {}

  // Follows $ref and merges allOf: the properties and required keys of one object schema.
  json resolve(const json& node) const {
    if (node.contains("$ref")) {
      const std::string ref = node["$ref"];  // "#/$defs/NAME"
      return resolve(root_["$defs"][ref.substr(ref.rfind('/') + 1)]);
    }
    if (!node.contains("allOf")) return node;
    json merged = {{"properties", json::object()}, {"required", json::array()}};
    for (const auto& part : node["allOf"]) {
      const json r = resolve(part);
      if (r.contains("properties")) merged["properties"].update(r["properties"]);
      if (r.contains("required"))
        for (const auto& k : r["required"]) merged["required"].push_back(k);
    }
    return merged;
  }

  template <typename O>
  void object(const std::string& where, const json& node_in) {
    const json node = resolve(node_in);
    INFO(where);
    std::set<std::string> keys, required;
    O probe{};
    snap::fields::describe(probe, [&](const snap::fields::Field& f, auto& m) {
      const std::string key(f.key);
      keys.insert(key);
      if (f.required) required.insert(key);
      REQUIRE(node["properties"].contains(key));
      field(where + "." + key, f, m, resolve(node["properties"][key]));
    });
    std::set<std::string> schema_keys, schema_required;
    for (const auto& [k, v] : node["properties"].items()) schema_keys.insert(k);
    for (const auto& k : node.value("required", json::array())) schema_required.insert(k);
    CHECK(keys == schema_keys);
    CHECK(required == schema_required);
    ++objects;
  }

  int objects = 0;
  int fields = 0;

 private:
  // A non-negative integer (u64 in the schema; time_resolution_ns, written only when not 0,
  // says minimum 1).
  static bool is_u64(const json& n) {
    return n.value("type", "") == "integer" && n.value("minimum", -1) >= 0 &&
           n.value("maximum", (uint64_t{1} << 53) - 1) == (uint64_t{1} << 53) - 1;
  }

  template <typename M>
  void field(const std::string& where, const snap::fields::Field& f, M&, const json& n) {
    INFO(where);
    ++fields;
    switch (f.kind) {
      case Kind::kCount:
      case Kind::kTime:
      case Kind::kTid:
        CHECK(is_u64(n));
        break;
      case Kind::kDevice:
      case Kind::kInt32:
        CHECK(n.value("type", "") == "integer");
        break;
      case Kind::kSchemaVersion:
        CHECK(n["const"] == snap::kSchemaVersion);
        break;
      case Kind::kString:
      case Kind::kRole:
        CHECK((n.value("type", "") == "string" || n.contains("enum")));
        if (f.one_of_count) {
          std::set<std::string> table(f.one_of, f.one_of + f.one_of_count);
          CHECK(table == n["enum"].get<std::set<std::string>>());
        }
        break;
      case Kind::kBool:
        CHECK(n.value("type", "") == "boolean");
        break;
      case Kind::kFrames:
        CHECK(n == resolve(root_["$defs"]["frames"]));
        break;
      case Kind::kStrings:
        CHECK(n["items"]["type"] == "string");
        break;
      case Kind::kStringMap:
        CHECK(n["additionalProperties"]["type"] == "string");
        break;
      case Kind::kPairs:
        CHECK(n["items"]["type"] == "array");
        CHECK(n["items"]["minItems"] == 2);
        break;
      case Kind::kObject:
      case Kind::kList:
        nested<M>(where, f, n);
        break;
    }
  }

  // Whether T is a struct the tables describe (not a string, map or pair of the model).
  template <typename T>
  static constexpr bool kDescribed = requires(T& t) {
    snap::fields::describe(t, [](const snap::fields::Field&, auto&) {});
  };

  template <typename M>
  void nested(const std::string& where, const snap::fields::Field& f, const json& n) {
    if constexpr (snap::fields::is_vector<M>::value) {
      if constexpr (kDescribed<typename M::value_type>) {
        CHECK(f.kind == Kind::kList);
        CHECK(n["type"] == "array");
        object<typename M::value_type>(where, n["items"]);
      } else {
        FAIL(where << ": a list of something the tables do not describe");
      }
    } else if constexpr (snap::fields::is_optional<M>::value) {
      CHECK(f.kind == Kind::kObject);
      object<typename M::value_type>(where, n);
    } else if constexpr (kDescribed<M>) {
      CHECK(f.kind == Kind::kObject);
      object<M>(where, n);
    } else {
      FAIL(where << ": kind says object or list, the member is neither");
    }
  }

  json root_;
};

json load_schema() {
  std::ifstream in(CUMEMTRACE_SCHEMA);
  REQUIRE(in);
  return json::parse(in);
}

}  // namespace

TEST_CASE("the tool section's field table matches schemas/snapshot.schema.json",
          "[snapshot][fields]") {
  SchemaCheck check(load_schema());
  const json schema = load_schema();
  check.object<snap::ToolSection>("cumemtrace", schema["properties"]["cumemtrace"]);
  // ToolSection, Ended, DeviceSummary, VmmHandle, ImportedMapping, HostAllocation, Anomaly,
  // DriverMemorySample, PoolMemorySample, ContextMemory, OwnerWalk, TensorNames, PytorchInfo and
  // its AllocatorConfChange, MemoryFractionChange, PrivatePoolUse.
  CHECK(check.objects == 16);
  CHECK(check.fields == 100);
}

TEST_CASE("the annotation field table matches schemas/snapshot.schema.json", "[snapshot][fields]") {
  SchemaCheck check(load_schema());
  const json schema = load_schema();
  check.object<snap::Annotation>("external_annotations",
                                 schema["properties"]["external_annotations"]["items"]);
  CHECK(check.objects == 1);
  CHECK(check.fields == 4);
}
