// SPDX-License-Identifier: Apache-2.0
// core/ipc/description.cc: writing and reading export descriptions.
#include "core/ipc/description.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpualloc::core {
namespace {

// The fixed header: magic, version, kind, reserved, mapping count, pid,
// bytes, offset, counter descriptor, ordinal, backend name, token.
constexpr std::size_t kHeaderBytes =
    8 + 2 + 1 + 1 + 4 + 8 + 8 + 8 + 4 + 4 + 16 + 16;
constexpr std::size_t kMappingBytes = 4 + 4 + 8;
constexpr std::size_t kChecksumBytes = 8;

std::uint64_t Fnv1a(absl::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325u;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3u;
  }
  return h;
}

void Put(std::string* out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}
  std::uint64_t Get(int bytes) {
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) {
      value |= std::uint64_t{static_cast<unsigned char>(bytes_[at_ + i])}
               << (8 * i);
    }
    at_ += bytes;
    return value;
  }
  absl::string_view Take(std::size_t bytes) {
    absl::string_view part = bytes_.substr(at_, bytes);
    at_ += bytes;
    return part;
  }

 private:
  absl::string_view bytes_;
  std::size_t at_ = 0;
};

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("Import: the description is not valid: ", what));
}

}  // namespace

std::string EncodeDescription(const BlockDescription& d) {
  std::string out(kDescriptionMagic, sizeof(kDescriptionMagic));
  Put(&out, kDescriptionVersion, 2);
  Put(&out, static_cast<std::uint8_t>(d.kind), 1);
  Put(&out, 0, 1);
  Put(&out, d.mappings.size(), 4);
  Put(&out, d.pid, 8);
  Put(&out, d.bytes, 8);
  Put(&out, d.offset, 8);
  Put(&out, static_cast<std::uint32_t>(d.counter_fd), 4);
  Put(&out, d.ordinal, 4);
  char name[16] = {};
  std::memcpy(name, d.backend.data(),
              std::min<std::size_t>(15, d.backend.size()));
  out.append(name, sizeof(name));
  out.append(reinterpret_cast<const char*>(d.token.data()), d.token.size());
  if (d.kind == SharedKind::kIpcHandle) {
    out.append(reinterpret_cast<const char*>(d.handle.bytes),
               IpcHandle::kBytes);
  }
  for (const DescribedMapping& m : d.mappings) {
    Put(&out, static_cast<std::uint32_t>(m.fd), 4);
    Put(&out, 0, 4);
    Put(&out, m.bytes, 8);
  }
  Put(&out, Fnv1a(out), 8);
  return out;
}

absl::StatusOr<BlockDescription> DecodeDescription(absl::string_view bytes) {
  if (bytes.size() < kHeaderBytes + kChecksumBytes) {
    return Bad(
        absl::StrFormat("%d bytes, shorter than any description (at least %d)",
                        bytes.size(), kHeaderBytes + kChecksumBytes));
  }
  Reader r(bytes);
  if (r.Take(sizeof(kDescriptionMagic)) !=
      absl::string_view(kDescriptionMagic, sizeof(kDescriptionMagic))) {
    return Bad(
        "it does not start with \"gpualipc\" (not what Export returned)");
  }
  const auto version = static_cast<std::uint16_t>(r.Get(2));
  if (version != kDescriptionVersion) {
    return Bad(
        absl::StrFormat("version %d, and this library reads version %d only",
                        version, kDescriptionVersion));
  }
  BlockDescription d;
  const auto kind = static_cast<std::uint8_t>(r.Get(1));
  if (kind != static_cast<std::uint8_t>(SharedKind::kIpcHandle) &&
      kind != static_cast<std::uint8_t>(SharedKind::kMappings)) {
    return Bad(
        absl::StrFormat("unknown kind %d (1: an IPC handle, 2: "
                        "mappings)",
                        kind));
  }
  d.kind = static_cast<SharedKind>(kind);
  (void)r.Get(1);
  const auto count = static_cast<std::uint32_t>(r.Get(4));
  if (count > kMaxDescribedMappings) {
    return Bad(absl::StrFormat("%d mappings (at most %d)", count,
                               kMaxDescribedMappings));
  }
  const std::size_t expected =
      kHeaderBytes +
      (d.kind == SharedKind::kIpcHandle ? IpcHandle::kBytes : 0) +
      std::size_t{count} * kMappingBytes + kChecksumBytes;
  if (bytes.size() != expected) {
    return Bad(absl::StrFormat(
        "%d bytes, but its header says %d (truncated or extended)",
        bytes.size(), expected));
  }
  const absl::string_view body = bytes.substr(0, bytes.size() - kChecksumBytes);
  Reader tail(bytes.substr(body.size()));
  if (tail.Get(8) != Fnv1a(body)) {
    return Bad("its checksum does not match (garbled on the way)");
  }
  d.pid = r.Get(8);
  d.bytes = r.Get(8);
  d.offset = r.Get(8);
  d.counter_fd = static_cast<std::int32_t>(r.Get(4));
  d.ordinal = static_cast<std::uint32_t>(r.Get(4));
  const absl::string_view name = r.Take(16);
  d.backend = std::string(name.substr(0, name.find('\0')));
  std::memcpy(d.token.data(), r.Take(d.token.size()).data(), d.token.size());
  if (d.kind == SharedKind::kIpcHandle) {
    std::memcpy(d.handle.bytes, r.Take(IpcHandle::kBytes).data(),
                IpcHandle::kBytes);
    if (count != 0) return Bad("an IPC handle description names mappings");
  } else if (count == 0) {
    return Bad("a mappings description names no mapping");
  }
  std::uint64_t described = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    DescribedMapping m;
    m.fd = static_cast<std::int32_t>(r.Get(4));
    (void)r.Get(4);
    m.bytes = r.Get(8);
    if (m.fd < 0 || m.bytes == 0 || m.bytes > UINT64_MAX - described) {
      return Bad(absl::StrFormat("mapping %d has descriptor %d and %d bytes", i,
                                 m.fd, m.bytes));
    }
    described += m.bytes;
    d.mappings.push_back(m);
  }
  if (d.pid == 0 || d.bytes == 0 || d.counter_fd < 0 ||
      d.bytes > UINT64_MAX - d.offset) {
    return Bad(
        absl::StrFormat("pid %d, %d bytes at offset %d, counter descriptor %d",
                        d.pid, d.bytes, d.offset, d.counter_fd));
  }
  if (d.kind == SharedKind::kMappings &&
      (d.offset >= described || d.bytes > described - d.offset)) {
    return Bad(absl::StrFormat(
        "the block [%d, +%d) runs past the %d bytes of its mappings", d.offset,
        d.bytes, described));
  }
  return d;
}

}  // namespace gpualloc::core
