// Check results to failures: see jaxport/checks.h. The port of bridge/front/engine/checks.go
// (NewChecks, Failure), with its texts.
#include "jaxport/checks.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "checks_format.h"

namespace jaxport {

using internal::GoInts;
using internal::GoQuote;
using internal::PayloadLeaf;
using internal::Piece;

std::optional<StatusCode> CheckStatus(const std::string& kind) {
  if (kind == "user" || kind == "index") return StatusCode::kInvalidArgument;
  if (kind == "nan" || kind == "div") return StatusCode::kFailedPrecondition;
  return std::nullopt;
}

namespace {

// Where one error effect's leaves are among the program's results.
struct Effect {
  uint32_t effect = 0;
  int pred = 0, code = 0;  // result positions
  std::vector<PayloadLeaf> payload;
};

struct Entry {
  std::string kind;
  uint32_t effect = 0;
  std::vector<Piece> pieces;
};

}  // namespace

struct CheckTable::Impl {
  std::vector<Effect> effects;  // ascending effect: Python's layout order
  std::map<int32_t, Entry> by_code;
  std::vector<uint64_t> sizes;  // byte size of every result, @main order

  void Sized(const std::vector<TensorView>& results, int at) const {
    const size_t got = results[at].size_bytes;
    if (got != sizes[at] || got == 0) {
      throw Error(StatusCode::kInternal, "check result " + std::to_string(at) + ": " +
                                             std::to_string(got) + " bytes, the manifest says " +
                                             std::to_string(sizes[at]));
    }
  }
};

CheckTable::CheckTable() = default;
CheckTable::~CheckTable() = default;
CheckTable::CheckTable(CheckTable&&) noexcept = default;
CheckTable& CheckTable::operator=(CheckTable&&) noexcept = default;

bool CheckTable::empty() const { return impl_ == nullptr; }

namespace {

const char* RoleDTypeName(DType d) { return Name(d); }

void WantScalar(const Result& r, DType dtype) {
  if (!r.shape.empty() || r.dtype != dtype) {
    throw ArtifactError("check result " + r.name + " is " + RoleDTypeName(r.dtype) + GoInts(r.shape) +
                        ", a " + r.check.part + " must be " + Name(dtype) + "[]");
  }
}

}  // namespace

CheckTable CheckTable::Bind(const Checks& table, const std::vector<Result>& results) {
  std::vector<int> check_results;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].role == ResultRole::kCheck) check_results.push_back(static_cast<int>(i));
  }
  CheckTable out;
  if (table.codes.empty()) {
    if (!check_results.empty()) {
      throw ArtifactError(std::to_string(check_results.size()) +
                          " check results but the manifest's check table lists no code");
    }
    return out;
  }
  // Layout: per effect (ascending) its predicate, its code, then payload_size leaves.
  std::map<uint32_t, uint32_t> payload_size;
  for (const ErrorCode& c : table.codes) {
    auto [it, inserted] = payload_size.emplace(c.effect, c.payload_size);
    if (!inserted && it->second != c.payload_size) {
      throw ArtifactError("check table: effect " + std::to_string(c.effect) +
                          " has inconsistent payload sizes");
    }
  }
  auto impl = std::make_unique<Impl>();
  for (const Result& r : results) impl->sizes.push_back(r.byte_size);
  size_t next = 0;
  auto take = [&](const std::string& part, uint32_t effect) -> int {
    if (next >= check_results.size()) {
      throw ArtifactError("the check table needs more check results than the program's " +
                          std::to_string(check_results.size()));
    }
    const Result& r = results[check_results[next]];
    if (r.check.part != part || r.check.effect != effect) {
      throw ArtifactError("check result " + r.name + " is " + r.check.part + " of effect " +
                          std::to_string(r.check.effect) + " where the check table's layout has " +
                          part + " of effect " + std::to_string(effect));
    }
    return check_results[next++];
  };
  for (const auto& [e, size] : payload_size) {  // std::map: ascending effect
    Effect ce;
    ce.effect = e;
    ce.pred = take("predicate", e);
    ce.code = take("code", e);
    WantScalar(results[ce.pred], DType::kBool);
    WantScalar(results[ce.code], DType::kInt32);
    for (uint32_t k = 0; k < size; ++k) {
      const int at = take("payload", e);
      ce.payload.push_back(PayloadLeaf{at, results[at].dtype, results[at].shape});
    }
    impl->effects.push_back(ce);
  }
  if (next != check_results.size()) {
    throw ArtifactError("the program has " + std::to_string(check_results.size()) +
                        " check results, the check table's layout " + std::to_string(next));
  }
  for (const ErrorCode& code : table.codes) {
    const std::string where = "check code " + std::to_string(code.code) + " (" + code.location + ")";
    if (!CheckStatus(code.kind)) throw ArtifactError(where + ": unknown kind " + GoQuote(code.kind));
    if (impl->by_code.count(code.code)) throw ArtifactError(where + ": listed twice");
    const Effect* effect = nullptr;
    for (const Effect& ce : impl->effects) {
      if (ce.effect == code.effect) effect = &ce;
    }
    Entry entry{code.kind, code.effect, {}};
    try {
      entry.pieces = internal::ParseTemplate(code.message_template, effect->payload);
    } catch (const internal::FormatError& e) {
      throw ArtifactError(where + ": message " + GoQuote(code.message_template) + ": " + e.what());
    }
    impl->by_code.emplace(code.code, std::move(entry));
  }
  out.impl_ = std::move(impl);
  return out;
}

std::optional<CheckFailure> CheckTable::Failure(const std::vector<TensorView>& results) const {
  if (impl_ == nullptr) return std::nullopt;
  if (results.size() != impl_->sizes.size()) {
    throw Error(StatusCode::kInternal, "check results: " + std::to_string(results.size()) +
                                           " results, the program has " +
                                           std::to_string(impl_->sizes.size()));
  }
  const Effect* first = nullptr;
  int32_t first_code = 0;
  for (const Effect& e : impl_->effects) {
    impl_->Sized(results, e.pred);
    if (*static_cast<const uint8_t*>(results[e.pred].data) == 0) continue;
    impl_->Sized(results, e.code);
    int32_t code;
    std::memcpy(&code, results[e.code].data, sizeof code);  // little-endian host
    if (first == nullptr || code < first_code) {
      first = &e;
      first_code = code;
    }
  }
  if (first == nullptr) return std::nullopt;
  auto entry = impl_->by_code.find(first_code);
  if (entry == impl_->by_code.end() || entry->second.effect != first->effect) {
    throw Error(StatusCode::kInternal, "check output reports code " + std::to_string(first_code) +
                                           " for effect " + std::to_string(first->effect) +
                                           ", which the error table does not list");
  }
  std::vector<const uint8_t*> payload;
  for (const PayloadLeaf& leaf : first->payload) {
    impl_->Sized(results, leaf.at);
    payload.push_back(static_cast<const uint8_t*>(results[leaf.at].data));
  }
  std::string message;
  for (const Piece& p : entry->second.pieces) message += internal::Render(p, first->payload, payload);
  return CheckFailure{entry->second.kind, *CheckStatus(entry->second.kind), message};
}

}  // namespace jaxport
