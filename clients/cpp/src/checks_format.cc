// Python str.format over numpy payload values: see checks_format.h. A line-by-line port of
// bridge/front/engine/checks_format.go (same subset, same texts).
#include "checks_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>

namespace jaxport::internal {
namespace {

// maxWidth bounds width and precision: a template asking for more is refused, not rendered.
constexpr int kMaxWidth = 1000;

std::vector<uint32_t> Runes(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {  // invalid UTF-8: U+FFFD, as Go's []rune does
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string Utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string Utf8(const std::vector<uint32_t>& runes, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to; ++i) out += Utf8(runes[i]);
  return out;
}

size_t RuneCount(const std::string& s) { return Runes(s).size(); }

bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// strconv.Atoi of a string of digits: false on overflow.
bool Atoi(const std::string& s, int64_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::string GoQuoteByte(char c) {
  if (c == '\'') return "'\\''";
  if (c == '\\') return "'\\\\'";
  const auto u = static_cast<unsigned char>(c);
  if (u < 0x20 || u == 0x7F) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "'\\x%02x'", u);
    return buf;
  }
  return std::string("'") + c + "'";
}

char DTypeKind(DType d) {
  switch (d) {
    case DType::kBool:
      return 'b';
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64:
      return 'i';
    case DType::kFloat16: case DType::kBFloat16: case DType::kFloat32: case DType::kFloat64:
      return 'f';
  }
  return 0;
}

// The longest numpy str of one element of each integer/bool dtype.
int MaxDigits(DType d) {
  switch (d) {
    case DType::kBool: return 5;
    case DType::kInt8: return 4;
    case DType::kInt16: return 6;
    case DType::kInt32: return 11;
    case DType::kInt64: return 20;
    case DType::kUInt8: return 3;
    case DType::kUInt16: return 5;
    case DType::kUInt32: return 10;
    case DType::kUInt64: return 20;
    default: return 0;
  }
}

FormatSpec ParseSpec(const std::string& s) {
  FormatSpec sp;
  sp.raw = s;
  const std::vector<uint32_t> r = Runes(s);
  size_t i = 0;
  auto is_align = [](uint32_t c) { return c == '<' || c == '>' || c == '=' || c == '^'; };
  if (r.size() >= 2 && is_align(r[1])) {
    sp.fill = r[0];
    sp.align = static_cast<char>(r[1]);
    i = 2;
  } else if (!r.empty() && is_align(r[0])) {
    sp.align = static_cast<char>(r[0]);
    i = 1;
  }
  if (i < r.size() && (r[i] == '+' || r[i] == '-' || r[i] == ' ')) sp.sign = static_cast<char>(r[i++]);
  if (i < r.size() && r[i] == 'z') {
    sp.z = true;
    ++i;
  }
  if (i < r.size() && r[i] == '#') {
    sp.alt = true;
    ++i;
  }
  if (sp.fill == 0 && i < r.size() && r[i] == '0') {
    sp.zero = true;
    ++i;
  }
  // digits reads a decimal number: found says whether there was one.
  auto digits = [&](int& n) -> bool {
    const size_t start = i;
    while (i < r.size() && r[i] >= '0' && r[i] <= '9') ++i;
    if (i == start) return false;
    const std::string text = Utf8(r, start, i);
    int64_t v = 0;
    if (!Atoi(text, v) || v > kMaxWidth) {
      throw FormatError("format spec " + GoQuote(s) + ": " + text + " over " + std::to_string(kMaxWidth));
    }
    n = static_cast<int>(v);
    return true;
  };
  digits(sp.width);
  if (i < r.size() && (r[i] == ',' || r[i] == '_')) sp.group = static_cast<char>(r[i++]);
  if (i < r.size() && r[i] == '.') {
    ++i;
    int n = 0;
    if (!digits(n)) throw FormatError("format spec " + GoQuote(s) + ": missing precision");
    sp.prec = n;
  }
  switch (r.size() - i) {
    case 0:
      break;
    case 1:
      if (r[i] > 127) throw FormatError("format spec " + GoQuote(s) + ": invalid type");
      sp.typ = static_cast<char>(r[i]);
      break;
    default:
      throw FormatError("invalid format spec " + GoQuote(s));
  }
  if (sp.zero && sp.fill == 0) sp.fill = '0';  // and '=' for a number without an alignment
  return sp;
}

// A number's alignment: as given, else '=' with the '0' flag, else right.
char NumberAlign(const FormatSpec& sp) {
  if (sp.align != 0) return sp.align;
  if (sp.zero) return '=';
  return '>';
}

bool In(const char* set, char c) { return c != 0 && std::strchr(set, c) != nullptr; }

void Common(const FormatSpec& sp) {
  if (sp.alt) throw FormatError("format spec " + GoQuote(sp.raw) + ": alternate form '#' is not supported");
  if (sp.group != 0 && sp.fill == '0' && NumberAlign(sp) == '=' && sp.width > 0) {
    throw FormatError("format spec " + GoQuote(sp.raw) + ": zero padding with grouping is not supported");
  }
}

void ValidFloat(const FormatSpec& sp) {
  if (!In("eEfFgG%", sp.typ) && sp.typ != 0) {
    throw FormatError("format spec " + GoQuote(sp.raw) + ": type " + GoQuoteByte(sp.typ) +
                      " is not supported for a float");
  }
  Common(sp);
}

void ValidInt(const FormatSpec& sp) {
  if (sp.typ != 0 && In("eEfFgG%", sp.typ)) return ValidFloat(sp);
  if (sp.typ != 0 && !In("dboxX", sp.typ)) {
    throw FormatError("format spec " + GoQuote(sp.raw) + ": type " + GoQuoteByte(sp.typ) +
                      " is not supported for an integer");
  }
  if (sp.prec >= 0) {
    throw FormatError("format spec " + GoQuote(sp.raw) +
                      ": precision is not allowed for an integer (Python raises ValueError)");
  }
  if (sp.z) {
    throw FormatError("format spec " + GoQuote(sp.raw) +
                      ": 'z' is not allowed for an integer (Python raises ValueError)");
  }
  if (sp.group == ',' && sp.typ != 0 && sp.typ != 'd') {
    throw FormatError("format spec " + GoQuote(sp.raw) + ": ',' with type " + GoQuoteByte(sp.typ) +
                      " (Python raises ValueError)");
  }
  Common(sp);
}

void ValidString(const FormatSpec& sp) {
  if ((sp.typ != 0 && sp.typ != 's') || sp.sign != 0 || sp.z || sp.alt || sp.group != 0 ||
      sp.align == '=') {
    throw FormatError("format spec " + GoQuote(sp.raw) +
                      " is not supported for a string (only fill, align, '0', width, precision)");
  }
}

void Validate(const Piece& p, const PayloadLeaf& leaf) {
  const char kind = DTypeKind(leaf.dtype);
  if (leaf.shape.size() > 1) {
    throw FormatError("payload leaf " + std::to_string(p.leaf) + " of shape " + GoInts(leaf.shape) +
                      ": only scalars and rank-1 integer or bool arrays are formatted");
  }
  if (leaf.shape.size() == 1 && p.elem < 0) {
    if (kind == 'f') {
      throw FormatError("payload leaf " + std::to_string(p.leaf) + " is a " + Name(leaf.dtype) +
                        " array: numpy's float array printing is not reproduced");
    }
    if (!p.str && !p.spec.raw.empty()) {
      throw FormatError("format spec " + GoQuote(p.spec.raw) + " on an array (Python raises TypeError)");
    }
    const int64_t n = leaf.shape[0];
    if (2 + n * static_cast<int64_t>(MaxDigits(leaf.dtype) + 1) > 75) {
      throw FormatError("payload leaf " + std::to_string(p.leaf) + " (" + Name(leaf.dtype) + "[" +
                        std::to_string(n) + "]) may not fit numpy's 75-column line");
    }
    if (p.str) ValidString(p.spec);
    return;
  }
  if (p.str) return ValidString(p.spec);
  if (kind == 'f') return ValidFloat(p.spec);
  if (kind == 'b' && p.spec.raw.empty()) return;
  ValidInt(p.spec);
}

Piece ParseField(const std::string& body, const std::vector<PayloadLeaf>& leaves) {
  Piece p;
  p.field = true;
  const size_t colon = body.find(':');
  std::string name = body.substr(0, colon);
  const bool has_spec = colon != std::string::npos;
  const std::string spec = has_spec ? body.substr(colon + 1) : "";
  if (const size_t bang = name.find('!'); bang != std::string::npos) {
    const std::string conv = name.substr(bang + 1);
    name = name.substr(0, bang);
    if (conv != "s") throw FormatError("conversion !" + conv + " is not supported (only !s)");
    p.str = true;
  }
  const size_t bracket = name.find('[');
  const std::string index = name.substr(0, bracket);
  const std::string rest = bracket == std::string::npos ? "" : name.substr(bracket + 1);
  int64_t n = 0;
  if (!AllDigits(index) || !Atoi(index, n)) {
    throw FormatError("only numbered fields are supported ({0}, {0[1]})");
  }
  if (n >= static_cast<int64_t>(leaves.size())) {
    throw FormatError("payload leaf " + std::to_string(n) + " out of range (the effect has " +
                      std::to_string(leaves.size()) + ")");
  }
  p.leaf = static_cast<int>(n);
  const PayloadLeaf& leaf = leaves[p.leaf];
  if (bracket != std::string::npos && !rest.empty()) {
    const bool closed = rest.back() == ']';
    const std::string i = closed ? rest.substr(0, rest.size() - 1) : rest;
    int64_t e = 0;
    if (!closed || !AllDigits(i) || !Atoi(i, e)) {
      throw FormatError("only one integer element index is supported ({0[1]})");
    }
    if (leaf.shape.size() != 1) {
      throw FormatError("element index on payload leaf " + std::to_string(n) + " of shape " +
                        GoInts(leaf.shape) + " (only rank 1)");
    }
    if (e >= leaf.shape[0]) {
      throw FormatError("element " + std::to_string(e) + " of payload leaf " + std::to_string(n) +
                        " of shape " + GoInts(leaf.shape) + " is out of range");
    }
    p.elem = static_cast<int>(e);
  }
  if (has_spec) p.spec = ParseSpec(spec);
  Validate(p, leaf);
  return p;
}

// ---- values -------------------------------------------------------------------------------

struct Scalar {
  DType dtype = DType::kInt32;
  char kind = 'i';
  bool neg = false;   // integers: sign
  uint64_t mag = 0;   // integers: magnitude; bool: 0 or 1
  double f = 0;       // floats: the value as float64 (exact)
  uint16_t bits = 0;  // float16: the raw bits
};

double Float16Value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f;
  const double frac = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(frac, -24);
  } else if (exp == 0x1f) {
    v = frac != 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(1024 + frac, exp - 25);
  }
  return sign ? -v : v;
}

Scalar ScalarAt(const uint8_t* raw, DType dtype, int64_t i) {
  const size_t n = ItemSize(dtype);
  const uint8_t* b = raw + i * n;
  uint64_t u = 0;
  for (size_t k = n; k-- > 0;) u = (u << 8) | b[k];
  Scalar s;
  s.dtype = dtype;
  s.kind = DTypeKind(dtype);
  switch (dtype) {
    case DType::kBool:
      s.mag = std::min<uint64_t>(u, 1);
      break;
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64: {
      const int shift = static_cast<int>(64 - 8 * n);
      const int64_t v = static_cast<int64_t>(u << shift) >> shift;  // sign-extend
      s.neg = v < 0;
      s.mag = v < 0 ? (~static_cast<uint64_t>(v) + 1) : static_cast<uint64_t>(v);
      break;
    }
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64:
      s.mag = u;
      break;
    case DType::kFloat16:
      s.bits = static_cast<uint16_t>(u);
      s.f = Float16Value(s.bits);
      break;
    case DType::kBFloat16: {
      const uint32_t w = static_cast<uint32_t>(u) << 16;
      float f;
      std::memcpy(&f, &w, sizeof f);
      s.f = f;
      break;
    }
    case DType::kFloat32: {
      const uint32_t w = static_cast<uint32_t>(u);
      float f;
      std::memcpy(&f, &w, sizeof f);
      s.f = f;
      break;
    }
    case DType::kFloat64:
      std::memcpy(&s.f, &u, sizeof s.f);
      break;
  }
  return s;
}

// strconv.FormatFloat(a, 'e', prec, 64) (prec -1: shortest); f32: of the float32 value.
std::string FormatE(double a, int prec, bool f32 = false) {
  char buf[1100];
  std::to_chars_result r;
  if (prec < 0) {
    r = f32 ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(a), std::chars_format::scientific)
            : std::to_chars(buf, buf + sizeof buf, a, std::chars_format::scientific);
  } else {
    r = std::to_chars(buf, buf + sizeof buf, a, std::chars_format::scientific, prec);
  }
  return std::string(buf, r.ptr);
}

// strconv.FormatFloat(a, 'f', prec, 64).
std::string FormatF(double a, int prec) {
  static thread_local char buf[2048];
  auto r = std::to_chars(buf, buf + sizeof buf, a, std::chars_format::fixed, prec);
  if (r.ec != std::errc()) {  // > 2 KiB: a huge value at a large precision
    std::vector<char> big(4096 + static_cast<size_t>(prec));
    auto r2 = std::to_chars(big.data(), big.data() + big.size(), a, std::chars_format::fixed, prec);
    return std::string(big.data(), r2.ptr);
  }
  return std::string(buf, r.ptr);
}

// Splits "1.2345e+06" into digits ("12345") and exponent (6).
std::pair<std::string, int> SplitE(const std::string& s) {
  const size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  const int exp = e == std::string::npos ? 0 : std::stoi(s.substr(e + 1));
  if (const size_t dot = mant.find('.'); dot != std::string::npos) mant.erase(dot, 1);
  return {mant, exp};
}

std::string TrimRightZeros(std::string s) {
  while (!s.empty() && s.back() == '0') s.pop_back();
  return s;
}

bool RoundsToFloat16(double c, uint16_t h) {
  const double v = Float16Value(h);
  double lo = 0.0, hi = 65536.0;
  if (h > 0) lo = Float16Value(static_cast<uint16_t>(h - 1));
  if (h < 0x7bff) hi = Float16Value(static_cast<uint16_t>(h + 1));
  const double mid_lo = (lo + v) / 2, mid_hi = (v + hi) / 2;
  const bool even = (h & 1) == 0;
  return (c > mid_lo || (c == mid_lo && even)) && (c < mid_hi || (c == mid_hi && even));
}

// The shortest decimal digits that round-trip in dtype, with the exponent of the first digit.
std::pair<std::string, int> ShortestDigits(double a, DType dtype, uint16_t h16) {
  if (dtype == DType::kFloat32) return SplitE(FormatE(a, -1, true));
  if (dtype == DType::kFloat16) {
    if (a == 0) return {"0", 0};
    // The first p for which a p-digit decimal rounds back to h16 (5 digits always do), the
    // nearer of the p-digit decimals around a (numpy's Dragon4).
    for (int p = 1;; ++p) {
      auto [d, exp] = SplitE(FormatE(a, p - 1));
      int64_t n = 0;
      Atoi(d, n);
      double best = std::numeric_limits<double>::infinity();
      std::string best_d;
      int best_exp = 0;
      for (int64_t k : {n, n - 1, n + 1}) {
        const std::string text = std::to_string(k) + "e" + std::to_string(exp - p + 1);
        double c = 0;
        std::from_chars(text.data(), text.data() + text.size(), c);
        if (k > 0 && (p >= 5 || RoundsToFloat16(c, h16)) && std::fabs(c - a) < best) {
          auto [kd, kexp] = SplitE(FormatE(c, -1));
          best = std::fabs(c - a);
          best_d = kd;
          best_exp = kexp;
        }
      }
      if (!best_d.empty()) return {TrimRightZeros(best_d), best_exp};
    }
  }
  return SplitE(FormatE(a, -1));
}

// digits (first digit at 10^exp) without an exponent; dot0 adds ".0" to an integer.
std::string Positional(const std::string& digits, int exp, bool dot0) {
  std::string ip, fp;
  if (exp < 0) {
    ip = "0";
    fp = std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else if (static_cast<int>(digits.size()) <= exp + 1) {
    ip = digits + std::string(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0');
  } else {
    ip = digits.substr(0, exp + 1);
    fp = digits.substr(exp + 1);
  }
  if (fp.empty()) return dot0 ? ip + ".0" : ip;
  return ip + "." + fp;
}

// d[.ddd]e±XX (at least two exponent digits).
std::string Scientific(const std::string& digits, int exp, bool upper) {
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%c%c%02d", upper ? 'E' : 'e', exp < 0 ? '-' : '+', std::abs(exp));
  return out + buf;
}

// 'g' with precision p of a >= 0; dot0 is the none type's variant.
std::string GeneralFormat(double a, int p, bool dot0, bool upper) {
  p = std::max(p, 1);
  auto [digits, exp] = SplitE(FormatE(a, p - 1));
  digits = TrimRightZeros(digits);
  if (digits.empty()) digits = "0";
  const int limit = dot0 ? p - 1 : p;
  if (exp < -4 || exp >= limit) return Scientific(digits, exp, upper);
  return Positional(digits, exp, dot0);
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The fill run that brings s to the spec's width.
std::string Padding(const FormatSpec& sp, const std::string& s) {
  const int n = sp.width - static_cast<int>(RuneCount(s));
  if (n <= 0) return "";
  const std::string fill = Utf8(sp.fill == 0 ? uint32_t{' '} : sp.fill);
  std::string out;
  for (int i = 0; i < n; ++i) out += fill;
  return out;
}

std::string Pad(const std::string& s, const FormatSpec& sp, char align) {
  const std::string fill = Padding(sp, s);
  if (align == '<') return s + fill;
  if (align == '^') {
    const std::vector<uint32_t> runes = Runes(fill);
    const size_t left = runes.size() / 2;
    return Utf8(runes, 0, left) + s + Utf8(runes, left, runes.size());
  }
  return fill + s;
}

// Inserts sep every `every` digits into the leading digits of body.
std::string Group(const std::string& body, char sep, int every) {
  if (sep == 0) return body;
  std::string digit = "0123456789";
  if (every == 4) digit += "abcdefABCDEF";
  size_t n = 0;
  while (n < body.size() && digit.find(body[n]) != std::string::npos) ++n;
  const std::string digits = body.substr(0, n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % every == 0) out += sep;
    out += digits[i];
  }
  return out + body.substr(n);
}

std::string PadNumber(bool neg, const std::string& body, const FormatSpec& sp) {
  std::string sign;
  if (neg) {
    sign = "-";
  } else if (sp.sign == '+') {
    sign = "+";
  } else if (sp.sign == ' ') {
    sign = " ";
  }
  const char align = NumberAlign(sp);
  if (align == '=') return sign + Padding(sp, sign + body) + body;
  return Pad(sign + body, sp, align);
}

// Python's float.__format__(v, spec).
std::string FormatFloat(double v, const FormatSpec& sp) {
  const bool upper = sp.typ == 'E' || sp.typ == 'F' || sp.typ == 'G';
  bool neg = std::signbit(v) && !std::isnan(v);  // Python never prints a NaN's sign
  double a = std::fabs(v);
  if (sp.typ == '%') a *= 100;  // before the inf check: 1e307 prints "inf%"
  int prec = sp.prec;
  if (prec < 0 && sp.typ != 0) prec = 6;
  std::string body;
  if (std::isnan(a) || std::isinf(a)) {
    body = std::isnan(a) ? "nan" : "inf";
    if (upper) body = Upper(body);
    if (sp.typ == '%') body += "%";
  } else if (sp.typ == 0 && prec < 0) {  // repr
    auto [digits, exp] = SplitE(FormatE(a, -1));
    body = (exp < -4 || exp >= 16) ? Scientific(digits, exp, false) : Positional(digits, exp, true);
  } else if (sp.typ == 0) {
    body = GeneralFormat(a, prec, true, false);
  } else if (sp.typ == 'g' || sp.typ == 'G') {
    body = GeneralFormat(a, prec, false, upper);
  } else if (sp.typ == 'e' || sp.typ == 'E') {
    body = FormatE(a, prec);
    if (upper) body = Upper(body);
  } else if (sp.typ == '%') {
    body = FormatF(a, prec) + "%";
  } else {  // f F
    body = FormatF(a, prec);
  }
  if (sp.z && neg) {  // 'z': a negative zero after rounding prints unsigned
    const std::string lower = Lower(body);
    const std::string mantissa = lower.substr(0, lower.find('e'));
    if (mantissa.find_first_not_of("0.%") == std::string::npos) neg = false;
  }
  return PadNumber(neg, Group(body, sp.group, 3), sp);
}

std::string FormatUint(uint64_t v, int base) {
  char buf[72];
  auto r = std::to_chars(buf, buf + sizeof buf, v, base);
  return std::string(buf, r.ptr);
}

// Python's int.__format__ for the integer types (d b o x X and none).
std::string FormatInt(bool neg, uint64_t mag, const FormatSpec& sp) {
  int base = 10, every = 3;
  switch (sp.typ) {
    case 'b': base = 2; every = 4; break;
    case 'o': base = 8; every = 4; break;
    case 'x': case 'X': base = 16; every = 4; break;
    default: break;
  }
  std::string body = FormatUint(mag, base);
  if (sp.typ == 'X') body = Upper(body);
  return PadNumber(neg, Group(body, sp.group, every), sp);
}

// Python's str.__format__: precision truncates, default alignment left.
std::string FormatString(std::string s, const FormatSpec& sp) {
  if (sp.prec >= 0) {
    const std::vector<uint32_t> runes = Runes(s);
    if (static_cast<int>(runes.size()) > sp.prec) s = Utf8(runes, 0, static_cast<size_t>(sp.prec));
  }
  return Pad(s, sp, sp.align == 0 ? '<' : sp.align);
}

std::string BoolStr(const Scalar& s) { return s.mag != 0 ? "True" : "False"; }

// str() of the numpy scalar.
std::string NumpyStr(const Scalar& s) {
  if (s.kind == 'b') return BoolStr(s);
  if (s.kind == 'i') return (s.neg ? "-" : "") + std::to_string(s.mag);
  if (std::isnan(s.f)) return "nan";
  const std::string sign = std::signbit(s.f) ? "-" : "";
  const double a = std::fabs(s.f);
  if (std::isinf(a)) return sign + "inf";
  if (s.dtype == DType::kBFloat16) return sign + GeneralFormat(a, 6, false, false);  // "%g"
  auto [digits, exp] = ShortestDigits(a, s.dtype, static_cast<uint16_t>(s.bits & 0x7fff));
  const double cutoff = s.dtype == DType::kFloat16 ? 1e3 : s.dtype == DType::kFloat32 ? 1e6 : 1e16;
  if (a == 0 || (a >= 1e-4 && a < cutoff)) return sign + Positional(digits, exp, true);
  return sign + Scientific(digits, exp, false);
}

// str() of a rank-1 integer or bool array of n elements.
std::string NumpyArrayStr(const uint8_t* raw, DType dtype, int64_t n) {
  std::vector<std::string> words(static_cast<size_t>(n));
  size_t width = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Scalar s = ScalarAt(raw, dtype, i);
    words[i] = NumpyStr(s);
    if (dtype == DType::kBool && s.mag == 1) words[i] = " True";
    width = std::max(width, words[i].size());
  }
  std::string out = "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out += " ";
    out += std::string(width - words[i].size(), ' ') + words[i];
  }
  return out + "]";
}

std::string FormatScalar(const Scalar& s, const FormatSpec& sp) {
  if (s.kind == 'f') return FormatFloat(s.f, sp);
  if (s.kind == 'b' && sp.raw.empty()) return BoolStr(s);
  if (sp.typ != 0 && In("eEfFgG%", sp.typ)) {
    double f = static_cast<double>(s.mag);
    if (s.neg) f = -f;
    return FormatFloat(f, sp);
  }
  return FormatInt(s.neg, s.mag, sp);
}

}  // namespace

std::string GoInts(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? " " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string GoQuote(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\a': out += "\\a"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\v': out += "\\v"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::vector<Piece> ParseTemplate(const std::string& t, const std::vector<PayloadLeaf>& leaves) {
  std::vector<Piece> out;
  std::string lit;
  auto flush = [&] {
    if (!lit.empty()) {
      Piece p;
      p.literal = lit;
      out.push_back(p);
      lit.clear();
    }
  };
  for (size_t i = 0; i < t.size();) {
    const char ch = t[i];
    if ((ch == '{' && t.compare(i, 2, "{{") == 0) || (ch == '}' && t.compare(i, 2, "}}") == 0)) {
      lit += ch;
      i += 2;
    } else if (ch == '}') {
      throw FormatError("single '}' at offset " + std::to_string(i));
    } else if (ch == '{') {
      const size_t end = t.find('}', i + 1);
      if (end == std::string::npos) throw FormatError("unterminated field at offset " + std::to_string(i));
      const std::string body = t.substr(i + 1, end - i - 1);
      if (body.find('{') != std::string::npos) {
        throw FormatError("field {" + body + "}: nested fields are not supported");
      }
      Piece p;
      try {
        p = ParseField(body, leaves);
      } catch (const FormatError& e) {
        throw FormatError("field {" + body + "}: " + e.what());
      }
      flush();
      out.push_back(p);
      i = end + 1;
    } else {
      lit += ch;
      ++i;
    }
  }
  flush();
  return out;
}

std::string Render(const Piece& p, const std::vector<PayloadLeaf>& leaves,
                   const std::vector<const uint8_t*>& payload) {
  if (!p.field) return p.literal;
  const PayloadLeaf& leaf = leaves[p.leaf];
  const uint8_t* raw = payload[p.leaf];
  if (leaf.shape.size() == 1 && p.elem < 0) {
    return FormatString(NumpyArrayStr(raw, leaf.dtype, leaf.shape[0]), p.spec);
  }
  const Scalar v = ScalarAt(raw, leaf.dtype, std::max(p.elem, 0));
  if (p.str) return FormatString(NumpyStr(v), p.spec);
  return FormatScalar(v, p.spec);
}

}  // namespace jaxport::internal
