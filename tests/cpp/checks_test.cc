// CheckTable: check results -> the failure kind, status and message, held to the server's
// expectations (bridge/front/engine/checks_test.go; every expected text is Python's own, from
// clients/python/artifact/checks.py format_failure) and to the committed parity cases
// (JAXPORT_CHECK_PARITY: Python's messages for random payloads; tests/cpp/test_library.py also
// passes a fresh run of 4000).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "jaxport/artifact.h"
#include "jaxport/checks.h"
#include "test_util.h"

namespace jaxport {
namespace {

using testing::Unhex;

Result Res(const std::string& name, const std::string& part, uint32_t effect, DType dtype,
           std::vector<int64_t> shape = {}) {
  Result r;
  r.name = name;
  r.role = ResultRole::kCheck;
  r.dtype = dtype;
  r.byte_size = static_cast<uint64_t>(NumElements(shape)) * ItemSize(dtype);
  r.shape = std::move(shape);
  r.check = CheckLeaf{part, effect};
  return r;
}

Result Output(const std::string& name, uint64_t bytes) {
  Result r;
  r.name = name;
  r.role = ResultRole::kOutput;
  r.dtype = DType::kFloat32;
  r.byte_size = bytes;
  r.shape = {static_cast<int64_t>(bytes / 4)};
  return r;
}

// A table with one user code whose effect has one payload leaf of dtype/shape, and the
// program's results (an output, then the effect's predicate, code and payload).
std::pair<Checks, std::vector<Result>> OneCode(const std::string& tmpl, DType dtype, std::vector<int64_t> shape = {}) {
  Checks table;
  table.enabled = {"user"};
  table.codes = {ErrorCode{0, "user", 0, tmpl, 1, "m.py:3 (f)"}};
  return {table, {Output("y", 4), Res("check.0.user.predicate", "predicate", 0, DType::kBool),
                  Res("check.0.user.code", "code", 0, DType::kInt32),
                  Res("check.0.user.payload.0", "payload", 0, dtype, std::move(shape))}};
}

struct Values {
  std::vector<std::string> bytes;
  std::vector<TensorView> views() const {
    std::vector<TensorView> out;
    for (const std::string& b : bytes) out.emplace_back(DType::kUInt8, std::vector<int64_t>{static_cast<int64_t>(b.size())}, b.data(), b.size());
    return out;
  }
};

Values Fired(const std::string& payload) { return Values{{std::string(4, '\0'), "\x01", std::string(4, '\0'), payload}}; }

std::string FormatOne(const std::string& tmpl, DType dtype, const std::string& data, std::vector<int64_t> shape = {}) {
  auto [table, results] = OneCode(tmpl, dtype, shape);
  CheckTable c = CheckTable::Bind(table, results);
  auto f = c.Failure(Fired(data).views());
  EXPECT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, "user");
  EXPECT_EQ(f->code, StatusCode::kInvalidArgument);
  return f->message;
}

TEST(CheckMessages, Scalars) {
  struct Case {
    DType dtype;
    const char *hex, *tmpl, *want;
  };
  const Case cases[] = {
      {DType::kFloat32, "cdcccc3d", "{0}", "0.10000000149011612"},
      {DType::kFloat32, "cdcccc3d", "{0!s}", "0.1"},
      {DType::kFloat32, "0000a03f", "x={0:.3f}", "x=1.250"},
      {DType::kFloat32, "00000080", "{0}", "-0.0"},
      {DType::kFloat32, "00000080", "{0!s}", "-0.0"},
      {DType::kFloat32, "0000c0ff", "{0}", "nan"},
      {DType::kFloat32, "0000c0ff", "{0:+.2f}", "+nan"},
      {DType::kFloat32, "000080ff", "{0:>8}", "    -inf"},
      {DType::kFloat64, "0080e03779c34143", "{0}", "1e+16"},
      {DType::kFloat64, "00003426f56b0c43", "{0}", "1000000000000000.0"},
      {DType::kFloat32, "acc52737", "{0!s}", "1e-05"},
      {DType::kFloat32, "17b7d138", "{0!s}", "1e-04"},
      {DType::kFloat32, "a379eb4c", "{0!s}", "1.2345679e+08"},
      {DType::kFloat16, "ff7b", "{0!s}", "6.55e+04"},
      {DType::kFloat16, "662e", "{0!s}", "0.1"},
      {DType::kFloat16, "0024", "{0!s}", "0.01563"},
      {DType::kFloat32, "00102447", "{0!s}", "42000.0"},
      {DType::kFloat32, "00247449", "{0!s}", "1e+06"},
      {DType::kFloat16, "662e", "{0}", "0.0999755859375"},
      {DType::kBFloat16, "cd3d", "{0!s}", "0.100098"},
      {DType::kBFloat16, "cd3d", "{0}", "0.10009765625"},
      {DType::kBFloat16, "4040", "{0!s}", "3"},
      {DType::kBool, "01", "{0}", "True"},
      {DType::kBool, "01", "{0:>3}", "  1"},
      {DType::kBool, "00", "{0!s:^7}", " False "},
      {DType::kInt8, "80", "{0:x}", "-80"},
      {DType::kUInt64, "ffffffffffffffff", "{0:,}", "18,446,744,073,709,551,615"},
      {DType::kInt32, "c0bdf0ff", "{0:_b}", "-1111_0100_0010_0100_0000"},
      {DType::kInt32, "fbffffff", "{0:=+8}", "-      5"},
      {DType::kInt32, "fbffffff", "{0:*^9}", "***-5****"},
      {DType::kInt64, "0700000000000000", "{0:.2e}", "7.00e+00"},
      {DType::kFloat32, "80d6fc3d", "{0:.2%}", "12.35%"},
      {DType::kFloat64, "c642555f948bca7f", "{0:=9%}", "     inf%"},
      {DType::kFloat64, "3374ac3c1f7bacff", "{0:+.1%}", "-inf%"},
      {DType::kFloat64, "0000000000c05e40", "{0:.3}", "1.23e+02"},
      {DType::kFloat64, "0000000000002840", "{0:.3}", "12.0"},
      {DType::kFloat64, "f168e388b5f8e43e", "{0:g}", "1e-05"},
      {DType::kFloat64, "0000000000000000", "{0:.1}", "0e+00"},
      {DType::kFloat64, "7b14ae47e17aa4bf", "{0:z.1f}", "0.0"},
      {DType::kFloat64, "0000008087d63241", "{0:,}", "1,234,567.5"},
      {DType::kFloat64, "0000008087d63241", "{0:_.2f}", "1_234_567.50"},
      {DType::kFloat32, "0000c03f", "{0:E}", "1.500000E+00"},
      {DType::kFloat64, "000000000000f07f", "{0:F}", "INF"},
      {DType::kFloat64, "000000000000e03f", "{0:!<6}", "0.5!!!"},
      {DType::kFloat64, "0000000000000440", "{0:.0f}", "2"},
      {DType::kFloat64, "0100000000000000", "{0}", "5e-324"},
      {DType::kFloat64, "0100000000000000", "{0!s}", "5e-324"},
      {DType::kFloat64, "000000000000f83f", "{0:010.3f}", "000001.500"},
      {DType::kFloat64, "000000000000f8bf", "{0:010.3f}", "-00001.500"},
      {DType::kFloat64, "fca9f1d24d62503f", "{0!s:.3}", "0.0"},
      {DType::kFloat64, "000000000000f83f", "{0!s:07}", "1.50000"},
      {DType::kInt32, "feffffff", "index needs to be non-negative, got {0} (`check` failed)",
       "index needs to be non-negative, got -2 (`check` failed)"},
      {DType::kInt32, "07000000", "{{literal}} {0} }}", "{literal} 7 }"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FormatOne(c.tmpl, c.dtype, Unhex(c.hex)), c.want) << c.tmpl << " over " << Name(c.dtype) << " " << c.hex;
  }
}

TEST(CheckMessages, RankOne) {
  struct Case {
    DType dtype;
    int64_t n;
    const char *hex, *tmpl, *want;
  };
  const Case cases[] = {
      {DType::kInt32, 3, "fbffffff6400000003000000", "{0}", "[ -5 100   3]"},
      {DType::kBool, 2, "0100", "{0!s:>16}", "   [ True False]"},
      {DType::kInt32, 3, "fbffffff6400000003000000", "{0[1]:03d}", "100"},
      {DType::kUInt8, 1, "07", "{0}", "[7]"},
      {DType::kFloat32, 2, "0000003f0000803e", "{0[1]}", "0.25"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FormatOne(c.tmpl, c.dtype, Unhex(c.hex), {c.n}), c.want) << c.tmpl << " over " << Name(c.dtype);
  }
}

// tests/models/checked.py's table as the exporter writes it, and its program's results.
std::pair<Checks, std::vector<Result>> CheckedTable() {
  const std::string oob = "out-of-bounds indexing for array of shape (8,): index {0[0]} is out of bounds for axis {0[1]} with size {0[2]}. ";
  Checks table;
  table.enabled = {"user", "index", "nan", "div"};
  table.codes = {ErrorCode{0, "user", 1, "index needs to be non-negative, got {0} (`check` failed)", 1, ""},
                 ErrorCode{1, "index", 3, oob, 1, ""}, ErrorCode{2, "nan", 2, "nan generated by primitive: log.", 0, ""},
                 ErrorCode{8, "div", 0, "division by zero", 0, ""}};
  std::vector<Result> results = {
      Output("picked", 12), Output("y", 4),
      Res("check.0.div.predicate", "predicate", 0, DType::kBool), Res("check.0.div.code", "code", 0, DType::kInt32),
      Res("check.1.user.predicate", "predicate", 1, DType::kBool), Res("check.1.user.code", "code", 1, DType::kInt32),
      Res("check.1.user.payload.0", "payload", 1, DType::kInt32),
      Res("check.2.nan.predicate", "predicate", 2, DType::kBool), Res("check.2.nan.code", "code", 2, DType::kInt32),
      Res("check.3.index.predicate", "predicate", 3, DType::kBool), Res("check.3.index.code", "code", 3, DType::kInt32),
      Res("check.3.index.payload.0", "payload", 3, DType::kInt32, {3})};
  return {table, results};
}

std::string Le(int32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// All results of the checked program with the given effects fired (code per effect), user
// payload -2 and index payload [100, 0, 8].
Values CheckedValues(const std::map<int, int32_t>& fired) {
  Values v{{std::string(12, '\0'), std::string(4, '\0')}};
  const std::map<int, std::string> payload = {{1, Le(-2)}, {3, Le(100) + Le(0) + Le(8)}};
  for (int e = 0; e < 4; ++e) {
    auto it = fired.find(e);
    v.bytes.push_back(it == fired.end() ? std::string(1, '\0') : std::string(1, '\x01'));
    v.bytes.push_back(Le(it == fired.end() ? -2 : it->second));
    if (payload.count(e)) v.bytes.push_back(payload.at(e));
  }
  return v;
}

TEST(CheckFailure, EveryKind) {
  auto [table, results] = CheckedTable();
  const CheckTable c = CheckTable::Bind(table, results);
  const std::string oob = "out-of-bounds indexing for array of shape (8,): index 100 is out of bounds for axis 0 with size 8. ";
  struct Case {
    std::map<int, int32_t> fired;
    const char* kind;
    StatusCode code;
    std::string msg;
  };
  const Case cases[] = {
      {{{1, 0}}, "user", StatusCode::kInvalidArgument, "index needs to be non-negative, got -2 (`check` failed)"},
      {{{3, 1}}, "index", StatusCode::kInvalidArgument, oob},
      {{{2, 2}}, "nan", StatusCode::kFailedPrecondition, "nan generated by primitive: log."},
      {{{0, 8}}, "div", StatusCode::kFailedPrecondition, "division by zero"},
      // Several fired: the smallest code wins, whatever the effect order.
      {{{0, 8}, {2, 2}, {3, 1}}, "index", StatusCode::kInvalidArgument, oob},
  };
  for (const Case& tc : cases) {
    const Values values = CheckedValues(tc.fired);
    auto f = c.Failure(values.views());
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->kind, tc.kind);
    EXPECT_EQ(f->code, tc.code);
    EXPECT_EQ(f->message, tc.msg);
  }
  const Values none = CheckedValues({});
  EXPECT_FALSE(c.Failure(none.views()).has_value());
  EXPECT_FALSE(CheckTable().Failure({}).has_value());
}

TEST(CheckFailure, NoTable) {
  auto [table, results] = CheckedTable();
  EXPECT_TRUE(CheckTable::Bind(Checks{}, {results[0], results[1]}).empty());
  try {
    CheckTable::Bind(Checks{}, results);
    FAIL() << "check results without a table were accepted";
  } catch (const ArtifactError& e) {
    EXPECT_NE(std::string(e.what()).find("10 check results"), std::string::npos) << e.what();
  }
}

std::string FailureError(const CheckTable& c, const Values& values) {
  try {
    c.Failure(values.views());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInternal);
    return e.what();
  }
  return "(no error)";
}

TEST(CheckFailure, ContradictingResults) {
  auto [table, results] = CheckedTable();
  const CheckTable c = CheckTable::Bind(table, results);
  Values short_values = CheckedValues({{1, 0}});
  short_values.bytes.resize(5);
  Values bad_size = CheckedValues({{1, 0}});
  bad_size.bytes[6] = "\x01\x02";
  EXPECT_NE(FailureError(c, short_values).find("5 results, the program has 12"), std::string::npos);
  EXPECT_NE(FailureError(c, bad_size).find("check result 6: 2 bytes, the manifest says 4"), std::string::npos);
  EXPECT_NE(FailureError(c, CheckedValues({{1, 5}})).find("code 5 for effect 1, which the error table does not list"),
            std::string::npos);
  EXPECT_NE(FailureError(c, CheckedValues({{1, 8}})).find("code 8 for effect 1, which the error table does not list"),
            std::string::npos);
}

std::string BindError(const Checks& table, const std::vector<Result>& results) {
  try {
    CheckTable::Bind(table, results);
  } catch (const ArtifactError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(CheckTableBind, RefusesLayouts) {
  auto edit = [](auto f) {
    auto [table, results] = CheckedTable();
    f(table, results);
    return BindError(table, results);
  };
  EXPECT_NE(edit([](Checks& c, std::vector<Result>&) { c.codes.push_back(ErrorCode{9, "nan", 2, "", 1, ""}); })
                .find("effect 2 has inconsistent payload sizes"), std::string::npos);
  EXPECT_NE(edit([](Checks&, std::vector<Result>& r) { std::swap(r[2], r[3]); })
                .find("check result check.0.div.code is code of effect 0 where the check table's layout has predicate of effect 0"),
            std::string::npos);
  EXPECT_NE(edit([](Checks&, std::vector<Result>& r) { r.resize(11); })
                .find("needs more check results than the program's 9"), std::string::npos);
  EXPECT_NE(edit([](Checks&, std::vector<Result>& r) { r.push_back(Res("check.4.x.predicate", "predicate", 4, DType::kBool)); })
                .find("the program has 11 check results, the check table's layout 10"), std::string::npos);
  EXPECT_NE(edit([](Checks&, std::vector<Result>& r) { r[2] = Res("check.0.div.predicate", "predicate", 0, DType::kInt32); })
                .find("check result check.0.div.predicate is int32[], a predicate must be bool[]"), std::string::npos);
  EXPECT_NE(edit([](Checks& c, std::vector<Result>&) { c.codes[3].kind = "overflow"; })
                .find("check code 8 (): unknown kind \"overflow\""), std::string::npos);
  EXPECT_NE(edit([](Checks& c, std::vector<Result>&) { c.codes[3].code = 2; }).find("check code 2 (): listed twice"),
            std::string::npos);
}

TEST(CheckTableBind, RefusesTemplates) {
  struct Case {
    const char* tmpl;
    DType dtype;
    std::vector<int64_t> shape;
    const char* want;
  };
  const Case cases[] = {
      {"a } b", DType::kInt32, {}, "single '}' at offset 2"},
      {"a {0", DType::kInt32, {}, "unterminated field at offset 2"},
      {"{0:{1}}", DType::kInt32, {}, "nested fields"},
      {"{0!r}", DType::kInt32, {}, "field {0!r}: conversion !r is not supported"},
      {"{x}", DType::kInt32, {}, "field {x}: only numbered fields"},
      {"{}", DType::kInt32, {}, "field {}: only numbered fields"},
      {"{0.real}", DType::kFloat32, {}, "field {0.real}: only numbered fields"},
      {"{1}", DType::kInt32, {}, "payload leaf 1 out of range (the effect has 1)"},
      {"{0[1]}", DType::kInt32, {}, "element index on payload leaf 0 of shape []"},
      {"{0[3]}", DType::kInt32, {3}, "element 3 of payload leaf 0 of shape [3] is out of range"},
      {"{0[-1]}", DType::kInt32, {3}, "only one integer element index"},
      {"{0}", DType::kFloat32, {3}, "payload leaf 0 is a float32 array"},
      {"{0}", DType::kInt32, {2, 2}, "payload leaf 0 of shape [2 2]"},
      {"{0}", DType::kInt64, {4}, "payload leaf 0 (int64[4]) may not fit"},
      {"{0:>9}", DType::kInt32, {3}, "format spec \">9\" on an array"},
      {"{0:.2d}", DType::kInt32, {}, "format spec \".2d\": precision is not allowed for an integer"},
      {"{0:z}", DType::kInt32, {}, "format spec \"z\": 'z' is not allowed"},
      {"{0:,x}", DType::kInt32, {}, "format spec \",x\": ',' with type 'x'"},
      {"{0:c}", DType::kInt32, {}, "format spec \"c\": type 'c' is not supported for an integer"},
      {"{0:n}", DType::kFloat32, {}, "format spec \"n\": type 'n' is not supported for a float"},
      {"{0:d}", DType::kFloat32, {}, "format spec \"d\": type 'd' is not supported for a float"},
      {"{0:#x}", DType::kInt32, {}, "format spec \"#x\": alternate form"},
      {"{0:010,}", DType::kInt32, {}, "format spec \"010,\": zero padding with grouping"},
      {"{0!s:+}", DType::kInt32, {}, "format spec \"+\" is not supported for a string"},
      {"{0:.}", DType::kFloat32, {}, "format spec \".\": missing precision"},
      {"{0:5000}", DType::kFloat32, {}, "format spec \"5000\": 5000 over 1000"},
      {"{0:,_}", DType::kFloat32, {}, "format spec \",_\": type '_' is not supported"},
      {"{0:1.2f3}", DType::kFloat32, {}, "invalid format spec \"1.2f3\""},
      {"{0:\xc3\xa9}", DType::kFloat32, {}, "format spec \"\xc3\xa9\": invalid type"},
  };
  for (const Case& tc : cases) {
    auto [table, results] = OneCode(tc.tmpl, tc.dtype, tc.shape);
    const std::string err = BindError(table, results);
    EXPECT_NE(err.find(tc.want), std::string::npos) << tc.tmpl << ": " << err;
    EXPECT_NE(err.find("check code 0 (m.py:3 (f))"), std::string::npos) << err;
  }
}

// Python's messages for random payloads and templates (the server's test data, or the file
// JAXPORT_CHECK_PARITY names): each formatted exactly, or refused where Python raises or the
// case is outside the reproduced subset (must_accept false).
TEST(CheckMessages, PythonParity) {
  std::string path = testing::Env("JAXPORT_CHECK_PARITY");
  if (path.empty()) path = JAXPORT_CHECK_PARITY_FILE;
  const nlohmann::json cases = nlohmann::json::parse(ReadFile(path));
  ASSERT_TRUE(cases.is_array());
  int compared = 0, refused = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& pc = cases[i];
    const std::string tmpl = pc["template"];
    const DType dtype = *DTypeFromNumpy(pc["dtype"].get<std::string>());
    const std::vector<int64_t> shape = pc["shape"].get<std::vector<int64_t>>();
    const std::string name = "case " + std::to_string(i) + ": " + pc.dump();
    auto [table, results] = OneCode(tmpl, dtype, shape);
    CheckTable c;
    try {
      c = CheckTable::Bind(table, results);
    } catch (const ArtifactError& e) {
      EXPECT_FALSE(pc["must_accept"].get<bool>()) << name << ": refused: " << e.what();
      ++refused;
      continue;
    }
    if (pc["message"].is_null()) {
      ADD_FAILURE() << name << ": accepted, but Python raises on it";
      continue;
    }
    const auto f = c.Failure(Fired(Unhex(pc["data"])).views());
    ASSERT_TRUE(f.has_value()) << name;
    ++compared;
    EXPECT_EQ(f->message, pc["message"].get<std::string>()) << name;
  }
  std::printf("check parity: {\"cases\": %zu, \"compared\": %d, \"refused\": %d}\n", cases.size(), compared, refused);
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace jaxport
