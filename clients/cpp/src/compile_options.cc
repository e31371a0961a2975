// CompileOptionsProto: see compile_options.h. Field numbers from xla/pjrt/proto/
// compile_options.proto (ExecutableBuildOptionsProto, OptionOverrideProto, CompileOptionsProto).
#include "compile_options.h"

#include <cstdint>

namespace jaxport::internal {
namespace {

void Varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

// Wire type 0: int64, bool (a negative int64 is its 10-byte two's complement varint).
void VarintField(std::string& out, uint32_t field, uint64_t value) {
  Varint(out, (uint64_t{field} << 3) | 0);
  Varint(out, value);
}

// Wire type 2: strings, bytes and nested messages.
void BytesField(std::string& out, uint32_t field, const std::string& bytes) {
  Varint(out, (uint64_t{field} << 3) | 2);
  Varint(out, bytes.size());
  out += bytes;
}

// OptionOverrideProto { bool bool_field = 2; } (a oneof: the false value is written).
std::string BoolOverride(bool value) {
  std::string out;
  VarintField(out, 2, value ? 1 : 0);
  return out;
}

}  // namespace

std::string CompileOptions(bool fast_min_max) {
  std::string build;  // ExecutableBuildOptionsProto
  VarintField(build, 1, static_cast<uint64_t>(int64_t{-1}));  // device_ordinal: -1 = not set
  VarintField(build, 4, 1);                                    // num_replicas
  VarintField(build, 5, 1);                                    // num_partitions
  std::string options;  // CompileOptionsProto
  BytesField(options, 3, build);  // executable_build_options
  VarintField(options, 4, 1);     // compile_portable_executable
  if (!fast_min_max) {
    // map<string, OptionOverrideProto> env_option_overrides = 7: one entry {key = 1, value = 2}.
    std::string entry;
    BytesField(entry, 1, "xla_cpu_enable_fast_min_max");
    BytesField(entry, 2, BoolOverride(false));
    BytesField(options, 7, entry);
  }
  return options;
}

}  // namespace jaxport::internal
