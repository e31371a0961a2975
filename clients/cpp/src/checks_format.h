// Python `str.format` over numpy payload values, as jaxport's Python consumer
// (clients/python/artifact/checks.py format_failure) applies a check message template: the
// C++ port of the server's bridge/front/engine/checks_format.go, with the same subset and the
// same refusal texts. What is reproduced exactly:
//
//   - `{N}` / `{N:spec}` of a numpy scalar: float16/32/64 and bfloat16 formatted as Python's
//     float.__format__ of the float64 value (so `{}` of float32 0.1 is "0.10000000149011612"),
//     ints as int.__format__, bool as str when the spec is empty and as int otherwise; the spec
//     mini-language [[fill]align][sign][z][0][width][,|_][.precision][type] with the types
//     e E f F g G % and none for floats, d b o x X, none and the float types for ints;
//   - `{N!s}` / `{N!s:spec}`: numpy's str of the scalar (shortest round-trip digits in its own
//     dtype; bfloat16: ml_dtypes' "%g"), then the spec as for a string;
//   - `{N[i]}`: element i of a rank-1 leaf;
//   - `{N}` / `{N!s}` of a rank-1 integer or bool leaf short enough for one numpy line.
//
// Everything else is refused when the template is parsed, naming the field.
#ifndef JAXPORT_SRC_CHECKS_FORMAT_H_
#define JAXPORT_SRC_CHECKS_FORMAT_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "jaxport/tensor.h"

namespace jaxport::internal {

// Why a template cannot be reproduced (the message is the server's text).
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One payload result: its position among the program's results, dtype and shape.
struct PayloadLeaf {
  int at = 0;
  DType dtype = DType::kInt32;
  std::vector<int64_t> shape;
};

struct FormatSpec {
  std::string raw;      // as written ("" is not the same as "<")
  uint32_t fill = 0;    // a code point; 0: not given
  char align = 0;       // '<', '>', '=', '^' or 0
  char sign = 0;        // '+', '-', ' ' or 0
  bool z = false, alt = false, zero = false;
  int width = 0;
  char group = 0;  // ',', '_' or 0
  int prec = -1;   // -1: not given
  char typ = 0;    // 0: none
};

// A literal, or one replacement field `{N}`, `{N[i]}`, `{N!s}`, `{N:spec}`.
struct Piece {
  std::string literal;
  bool field = false;
  int leaf = 0;
  int elem = -1;  // element i of a rank-1 leaf, -1 for the whole leaf
  bool str = false;
  FormatSpec spec;
};

// Parses a template over an effect's payload leaves and validates every field against its
// leaf's dtype and shape; FormatError otherwise.
std::vector<Piece> ParseTemplate(const std::string& text, const std::vector<PayloadLeaf>& leaves);

// The field rendered over the payload bytes (one buffer per leaf); cannot fail after
// ParseTemplate accepted it.
std::string Render(const Piece& piece, const std::vector<PayloadLeaf>& leaves,
                   const std::vector<const uint8_t*>& payload);

// Go's fmt %v of an int64 slice ("[2 2]") and %q of a string, for the server's texts.
std::string GoInts(const std::vector<int64_t>& v);
std::string GoQuote(const std::string& s);

}  // namespace jaxport::internal

#endif  // JAXPORT_SRC_CHECKS_FORMAT_H_
