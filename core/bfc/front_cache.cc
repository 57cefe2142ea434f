// SPDX-License-Identifier: Apache-2.0
// core/bfc/front_cache.cc: the front cache's cold paths and checks
// (core/bfc/front_cache.h).
#include "core/bfc/front_cache.h"

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace gpualloc::core {

std::uint32_t FrontCache::NewBlock() {
  std::uint32_t i;
  if (spare_ != kNone) {
    i = spare_;
    spare_ = blocks_[i].next;
    blocks_[i] = Block();
  } else {
    i = static_cast<std::uint32_t>(blocks_.size());
    GPUALLOC_DCHECK(i != kNone);
    blocks_.emplace_back();
  }
  blocks_[i].owned = true;
  return i;
}

void FrontCache::DeleteBlock(std::uint32_t i) {
  blocks_[i].owned = false;
  blocks_[i].cached = false;
  blocks_[i].next = spare_;
  spare_ = i;
}

void FrontCache::Adopt(std::uint64_t address, std::uint64_t size,
                       std::uint64_t core_requested) {
  GPUALLOC_DCHECK(size > 0 && !Owns(address));
  const std::uint32_t i = NewBlock();
  Block& b = blocks_[i];
  b.address = address;
  b.size = size;
  b.core_requested = core_requested;
  b.requested = core_requested;
  owned_.Insert(address, i);
  Cache(i);
}

void FrontCache::Recycle() {
  GPUALLOC_DCHECK(owned_.size() == 0 && age_head_ == kNone);
  wanted_.fill(0);
}

std::optional<FrontCache::Forgotten> FrontCache::Forget(std::uint64_t address) {
  const std::uint32_t* found = owned_.FindValue(address);
  if (found == nullptr || blocks_[*found].cached) return std::nullopt;
  const std::uint32_t i = *found;
  const Forgotten out{address, blocks_[i].requested, blocks_[i].core_requested};
  requested_adjust_ -= static_cast<std::int64_t>(out.requested) -
                       static_cast<std::int64_t>(out.core_requested);
  owned_.Erase(address);
  DeleteBlock(i);
  return out;
}

std::vector<FrontCache::Forgotten> FrontCache::ForgetAllLive() {
  std::vector<std::uint64_t> live;
  for (const Block& b : blocks_) {
    if (b.owned && !b.cached) live.push_back(b.address);
  }
  std::vector<Forgotten> out;
  for (std::uint64_t address : live) out.push_back(*Forget(address));
  return out;
}

void FrontCache::UnlinkStack(std::uint32_t i) {
  Block& b = blocks_[i];
  if (b.newer == kNone) {  // the top
    std::uint32_t* head = stacks_.FindValue(b.size);
    GPUALLOC_DCHECK(head != nullptr && *head == i);
    if (b.next == kNone) {
      stacks_.Erase(b.size);
    } else {
      *head = b.next;
    }
  } else {
    blocks_[b.newer].next = b.next;
  }
  if (b.next != kNone) blocks_[b.next].newer = b.newer;
}

std::optional<FrontCache::Evicted> FrontCache::Evict(bool all) {
  if (age_head_ == kNone) return std::nullopt;
  if (!all && !NeedsEviction()) return std::nullopt;
  const std::uint32_t i = age_head_;
  Block& b = blocks_[i];
  UnlinkStack(i);
  UnlinkAge(i);
  cached_bytes_ -= b.size;
  cached_requested_ -= b.core_requested;
  ++evictions_;
  const Evicted out{b.address, b.size, b.core_requested};
  owned_.Erase(b.address);
  DeleteBlock(i);
  return out;
}

absl::Status FrontCache::Validate() const {
  auto broken = [](absl::string_view what) {
    return absl::InternalError(
        absl::StrCat("front cache invariant broken: ", what));
  };
  std::uint64_t owned = 0, cached = 0, bytes = 0, requested = 0;
  for (std::uint32_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    if (!b.owned) continue;
    ++owned;
    const std::uint32_t* found = owned_.FindValue(b.address);
    if (found == nullptr || *found != i) {
      return broken(absl::StrFormat("FC1: block %#x is not in the address map",
                                    b.address));
    }
    if (b.cached) {
      ++cached;
      bytes += b.size;
      requested += b.core_requested;
      bool on_stack = false;
      const std::uint32_t* head = stacks_.FindValue(b.size);
      for (std::uint32_t j = head == nullptr ? kNone : *head; j != kNone;
           j = blocks_[j].next) {
        if (j == i) on_stack = true;
      }
      if (!on_stack) {
        return broken(absl::StrFormat(
            "FC1: cached block %#x is not on the stack of %d bytes", b.address,
            b.size));
      }
    }
  }
  if (owned != owned_.size()) {
    return broken(absl::StrFormat("FC1: %d owned blocks, %d in the map", owned,
                                  owned_.size()));
  }
  std::uint64_t on_age = 0, last = 0;
  for (std::uint32_t j = age_head_; j != kNone; j = blocks_[j].age_next) {
    if (!blocks_[j].owned || !blocks_[j].cached) {
      return broken("FC1: the age list holds a block that is not cached");
    }
    if (blocks_[j].stamp < last) {
      return broken("FC3: the age list is out of order");
    }
    last = blocks_[j].stamp;
    if (++on_age > cached) break;
  }
  if (on_age != cached || cached != cached_count_) {
    return broken(
        absl::StrFormat("FC1: %d cached blocks, %d on the age list, count %d",
                        cached, on_age, cached_count_));
  }
  if (bytes != cached_bytes_ || requested != cached_requested_) {
    return broken(absl::StrFormat(
        "FC2: cached bytes %d (counted %d), requested %d (counted %d)", bytes,
        cached_bytes_, requested, cached_requested_));
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::core
