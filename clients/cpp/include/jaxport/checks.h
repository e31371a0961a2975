// Check results of a checkified model (docs/artifact-format.md, "Check outputs") turned into
// the failure a caller sees: JAX's err.get() text, the check kind, and the status the jaxport
// server answers with. The C++ twin of the server's formatter (bridge/front/engine/checks.go,
// checks_format.go), held to the same expectations (Python's own text: tests/cpp).
//
// Use: CheckTable::Bind once per program when the model opens (a table whose messages cannot
// be reproduced exactly is an ArtifactError naming the code and the field), then Failure on
// every execution's results. Model::Run does both; this header is for tools that run programs
// themselves.
#ifndef JAXPORT_CHECKS_H_
#define JAXPORT_CHECKS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jaxport/error.h"
#include "jaxport/manifest.h"
#include "jaxport/tensor.h"

namespace jaxport {

// A check that fired.
struct CheckFailure {
  std::string kind;    // "user", "index", "nan" or "div"
  StatusCode code;     // user, index: kInvalidArgument; nan, div: kFailedPrecondition
  std::string message; // exactly JAX's err.get() text
};

// The status each check kind reaches a caller with; nullopt for an unknown kind.
std::optional<StatusCode> CheckStatus(const std::string& kind);

class CheckTable {
 public:
  // Binds the manifest's check table to one program's results (@main order). A table with no
  // code and no check results gives an empty CheckTable whose Failure never fires.
  // ArtifactError (the server's refusal text) when the layout contradicts the table or a
  // template is outside what is reproduced exactly (docs/cpp.md, "Check failures").
  static CheckTable Bind(const Checks& table, const std::vector<Result>& results);

  CheckTable();
  ~CheckTable();
  CheckTable(CheckTable&&) noexcept;
  CheckTable& operator=(CheckTable&&) noexcept;

  // Whether the program has check results at all.
  bool empty() const;

  // Reads a program's results (every result in @main order, outputs first): nullopt when no
  // check fired; else, among the effects whose predicate is set, the one whose code is
  // smallest, formatted. Error(kInternal) when the results contradict the table (a wrong
  // count or size, a code the table does not list for that effect).
  std::optional<CheckFailure> Failure(const std::vector<TensorView>& results) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace jaxport

#endif  // JAXPORT_CHECKS_H_
