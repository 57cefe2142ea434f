// SPDX-License-Identifier: Apache-2.0
// tests/backends/fake_device_bytes.h: the bytes behind a fake driver's device
// addresses, for the fakes' copies between device and host memory.
//
// The fake drivers hand out addresses that are numbers only. A copy finds,
// through the fake's own books, the region each part of the device range
// lies in (a plain allocation, a pool block, a mapping of a physical handle)
// and reads or writes that region's buffer, kept here by a key the fake
// chooses (the allocation's address, or the handle, so that two mappings of
// one handle share their bytes). Buffers grow to the highest byte written;
// bytes never written read as zero. Not thread-safe: the fake holds its lock.
#ifndef GPUALLOC_TESTS_BACKENDS_FAKE_DEVICE_BYTES_H_
#define GPUALLOC_TESTS_BACKENDS_FAKE_DEVICE_BYTES_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace gpualloc::testing {

// The buffer of one region.
enum class FakeRegionKind { kAllocation, kPhysical };
using FakeRegionKey = std::pair<FakeRegionKind, std::uint64_t>;

// Where a device address lies: the region's buffer, the address's offset
// in it, and how many bytes of the region follow from the address on.
struct FakeRegion {
  FakeRegionKey key;
  std::uint64_t offset = 0;
  std::uint64_t available = 0;
};

class FakeDeviceBytes {
 public:
  // Copies [address, address + bytes) to `to_host` (when not null) or from
  // `from_host`, region by region as `resolve(address)` (an
  // std::optional<FakeRegion>) finds them. False, with nothing copied, when
  // some part of the range lies in no region.
  template <typename Resolve>
  bool Copy(std::uint64_t address, std::uint64_t bytes, void* to_host,
            const void* from_host, Resolve resolve) {
    std::vector<std::pair<FakeRegion, std::uint64_t>> parts;
    for (std::uint64_t done = 0; done < bytes;) {
      const std::optional<FakeRegion> region = resolve(address + done);
      if (!region.has_value() || region->available == 0) return false;
      const std::uint64_t n = std::min(bytes - done, region->available);
      parts.emplace_back(*region, n);
      done += n;
    }
    std::uint64_t done = 0;
    for (const auto& [region, n] : parts) {
      std::vector<unsigned char>& buffer = buffers_[region.key];
      if (to_host != nullptr) {
        auto* out = static_cast<unsigned char*>(to_host) + done;
        std::memset(out, 0, n);
        if (region.offset < buffer.size()) {
          std::memcpy(
              out, buffer.data() + region.offset,
              std::min<std::uint64_t>(n, buffer.size() - region.offset));
        }
      } else {
        if (buffer.size() < region.offset + n) buffer.resize(region.offset + n);
        std::memcpy(buffer.data() + region.offset,
                    static_cast<const unsigned char*>(from_host) + done, n);
      }
      done += n;
    }
    return true;
  }

  // The region is gone (freed, or the handle's memory returned).
  void Drop(FakeRegionKey key) { buffers_.erase(key); }

  // The region of `map` (start -> size, or start -> something `size_of`
  // reads the size from) that holds `address`, keyed by its start.
  template <typename Map, typename SizeOf>
  static std::optional<FakeRegion> In(const Map& map, std::uint64_t address,
                                      SizeOf size_of) {
    auto it = map.upper_bound(address);
    if (it == map.begin()) return std::nullopt;
    --it;
    const std::uint64_t size = size_of(it->second);
    if (address - it->first >= size) return std::nullopt;
    return FakeRegion{{FakeRegionKind::kAllocation, it->first},
                      address - it->first,
                      size - (address - it->first)};
  }

 private:
  std::map<FakeRegionKey, std::vector<unsigned char>> buffers_;
};

}  // namespace gpualloc::testing

#endif  // GPUALLOC_TESTS_BACKENDS_FAKE_DEVICE_BYTES_H_
