// The CompileOptionsProto bytes, decoded field by field here; with JAXPORT_COMPILE_OPTIONS_OUT
// set they are also written there, for tests/cpp/test_library.py to parse with XLA's own
// CompileOptions (jaxlib).
#include <gtest/gtest.h>

#include <map>

#include "compile_options.h"
#include "test_util.h"

namespace jaxport::internal {
namespace {

// A protobuf message as {field number: [varint value or nested bytes]}.
struct Field {
  uint64_t varint = 0;
  std::string bytes;
};

std::multimap<uint32_t, Field> Decode(const std::string& data) {
  std::multimap<uint32_t, Field> out;
  size_t i = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0; i < data.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(data[i++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return v;
    }
    ADD_FAILURE() << "truncated varint";
    return v;
  };
  while (i < data.size()) {
    const uint64_t key = varint();
    Field f;
    if ((key & 7) == 0) {
      f.varint = varint();
    } else if ((key & 7) == 2) {
      const uint64_t n = varint();
      f.bytes = data.substr(i, n);
      i += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << (key & 7);
      break;
    }
    out.emplace(static_cast<uint32_t>(key >> 3), f);
  }
  return out;
}

TEST(CompileOptions, JaxSemanticsOnOneDevice) {
  const std::string bytes = CompileOptions();
  const auto options = Decode(bytes);
  ASSERT_EQ(options.count(3), 1u);
  const auto build = Decode(options.find(3)->second.bytes);
  EXPECT_EQ(static_cast<int64_t>(build.find(1)->second.varint), -1);  // device_ordinal
  EXPECT_EQ(build.find(4)->second.varint, 1u);                          // num_replicas
  EXPECT_EQ(build.find(5)->second.varint, 1u);                          // num_partitions
  EXPECT_EQ(build.count(3), 0u);  // no DebugOptions: it would replace XLA's defaults
  EXPECT_EQ(options.find(4)->second.varint, 1u);  // compile_portable_executable
  ASSERT_EQ(options.count(7), 1u);                // env_option_overrides: one entry
  const auto entry = Decode(options.find(7)->second.bytes);
  EXPECT_EQ(entry.find(1)->second.bytes, "xla_cpu_enable_fast_min_max");
  const auto value = Decode(entry.find(2)->second.bytes);
  ASSERT_EQ(value.count(2), 1u);  // bool_field
  EXPECT_EQ(value.find(2)->second.varint, 0u);
  EXPECT_EQ(Decode(CompileOptions(/*fast_min_max=*/true)).count(7), 0u);
  if (const std::string out = testing::Env("JAXPORT_COMPILE_OPTIONS_OUT"); !out.empty()) testing::WriteFile(out, bytes);
}

}  // namespace
}  // namespace jaxport::internal
