// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference.cc: the reference models by name.
#include "tools/replay/reference.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace gpualloc::replay {

const std::vector<std::string>& ReferenceNames() {
  static const std::vector<std::string>* names = new std::vector<std::string>{
      "pytorch", "pytorch-expandable", "tf", "async"};
  return *names;
}

absl::Status CheckReferenceName(absl::string_view name) {
  for (const std::string& n : ReferenceNames()) {
    if (n == name) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reference \"", name, "\" (expected one of ",
                   absl::StrJoin(ReferenceNames(), ", "), ")"));
}

absl::StatusOr<std::vector<std::string>> ParseReferenceList(
    absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expected reference names separated by commas (",
          absl::StrJoin(ReferenceNames(), ", "), "), got \"", list, "\""));
    }
    absl::Status s = CheckReferenceName(part);
    if (!s.ok()) return s;
    out.emplace_back(part);
  }
  return out;
}

std::string ReferenceLabel(absl::string_view name) {
  return absl::StrCat(name, " model");
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateReference(
    absl::string_view name, std::shared_ptr<Backend> backend,
    std::uint64_t memory_limit) {
  absl::Status s = CheckReferenceName(name);
  if (!s.ok()) return s;
  if (name == "pytorch" || name == "pytorch-expandable") {
    PyTorchModelOptions o;
    o.expandable_segments = name == "pytorch-expandable";
    o.memory_limit = memory_limit;
    return CreatePyTorchModel(o, std::move(backend));
  }
  if (name == "tf") {
    TfModelOptions o;
    o.memory_limit = memory_limit;
    return CreateTfModel(o, std::move(backend));
  }
  AsyncModelOptions o;
  o.memory_limit = memory_limit;
  return CreateAsyncModel(o, std::move(backend));
}

}  // namespace gpualloc::replay
