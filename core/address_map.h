// SPDX-License-Identifier: Apache-2.0
// core/address_map.h: in-use chunk address -> chunk id, for Deallocate (and
// any non-zero 64-bit key -> 32-bit value: the front caches' maps).
//
// Open addressing with linear probing and backward-shift deletion (no
// tombstones, so lookups never degrade after many frees), Fibonacci hashing of
// the address, load factor at most 1/2. Size grows with the number of live
// allocations, never with the size of the pool. Address 0 marks an empty slot:
// backends never hand out address 0.
//
// Thread safety: none; the allocator facade's lock guards it.
#ifndef GPUALLOC_CORE_ADDRESS_MAP_H_
#define GPUALLOC_CORE_ADDRESS_MAP_H_

#include <cstdint>
#include <vector>

#include "absl/base/attributes.h"
#include "core/bfc/chunk_table.h"
#include "core/layer.h"
#include "core/status_macros.h"

namespace gpualloc::core {

class AddressMap {
 public:
  AddressMap() { Rehash(kMinCapacity); }

  // REQUIRES: address != 0 and not present. Always inlined: it is on
  // Allocate's path (measured: 48 instructions per allocate/free pair when
  // the compiler outlined it).
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Insert(std::uint64_t address, ChunkId id) {
    GPUALLOC_DCHECK(address != 0);
    if (2 * (size_ + 1) > slots_.size()) Rehash(2 * slots_.size());
    std::size_t i = Home(address);
    while (slots_[i].address != 0) {
      GPUALLOC_DCHECK(slots_[i].address != address);
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{address, id};
    ++size_;
  }

  // The id stored for `address`, or kNoChunk.
  ChunkId Find(std::uint64_t address) const {
    if (address == 0) return kNoChunk;
    for (std::size_t i = Home(address);; i = (i + 1) & mask_) {
      if (slots_[i].address == address) return slots_[i].id;
      if (slots_[i].address == 0) return kNoChunk;
    }
  }

  // Where the id stored for `address` is (changeable in place), or null.
  ABSL_ATTRIBUTE_ALWAYS_INLINE ChunkId* FindValue(std::uint64_t address) {
    if (address == 0) return nullptr;
    for (std::size_t i = Home(address);; i = (i + 1) & mask_) {
      if (slots_[i].address == address) return &slots_[i].id;
      if (slots_[i].address == 0) return nullptr;
    }
  }
  const ChunkId* FindValue(std::uint64_t address) const {
    return const_cast<AddressMap*>(this)->FindValue(address);
  }

  // Removes `address`; returns its id, or kNoChunk (nothing changes) if absent.
  ChunkId Erase(std::uint64_t address) {
    if (address == 0) return kNoChunk;
    std::size_t i = Home(address);
    while (slots_[i].address != address) {
      if (slots_[i].address == 0) return kNoChunk;
      i = (i + 1) & mask_;
    }
    const ChunkId id = slots_[i].id;
    // Backward shift: pull later members of the probe run into the hole.
    for (std::size_t j = (i + 1) & mask_; slots_[j].address != 0;
         j = (j + 1) & mask_) {
      const std::size_t home = Home(slots_[j].address);
      // Move j to the hole i unless its home lies cyclically in (i, j].
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --size_;
    return id;
  }

  std::size_t size() const { return size_; }
  std::size_t MemoryBytes() const { return slots_.capacity() * sizeof(Slot); }

 private:
  struct Slot {
    std::uint64_t address = 0;
    ChunkId id = kNoChunk;
  };
  static constexpr std::size_t kMinCapacity = 64;

  std::size_t Home(std::uint64_t address) const {
    return static_cast<std::size_t>((address * 0x9E3779B97F4A7C15ull) >>
                                    shift_);
  }

  void Rehash(std::size_t capacity) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64 - __builtin_ctzll(capacity);
    size_ = 0;
    for (const Slot& s : old) {
      if (s.address != 0) Insert(s.address, s.id);
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_ADDRESS_MAP_H_
