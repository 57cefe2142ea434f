// SPDX-License-Identifier: Apache-2.0
// core/bfc/private_pools.cc: private memory pools carved from slabs of general
// memory.
#include "core/bfc/private_pools.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/bfc/size_class.h"
#include "core/status_macros.h"

namespace gpualloc {

// Private pools in the modes that have none.
absl::Status Allocator::PoolsUnsupported(absl::string_view call) const {
  return absl::UnimplementedError(absl::StrFormat(
      "%s: private pools need allocator mode bfc; this allocator runs in "
      "mode %s",
      call, AllocatorModeName(options().mode)));
}
absl::StatusOr<PoolId> Allocator::CreatePool() {
  return PoolsUnsupported("CreatePool");
}
absl::Status Allocator::RetainPool(PoolId) {
  return PoolsUnsupported("RetainPool");
}
absl::Status Allocator::ReleasePool(PoolId, Stream) {
  return PoolsUnsupported("ReleasePool");
}
absl::Status Allocator::BeginAllocateToPool(PoolId, Stream) {
  return PoolsUnsupported("BeginAllocateToPool");
}
absl::Status Allocator::EndAllocateToPool(PoolId) {
  return PoolsUnsupported("EndAllocateToPool");
}

namespace core {

RelaxedCapture::RelaxedCapture(Backend& backend, bool capturing)
    : backend_(backend) {
  if (!capturing) return;
  absl::StatusOr<CaptureMode> previous =
      backend_.ExchangeCaptureMode(CaptureMode::kRelaxed);
  if (!previous.ok()) {
    status_ = absl::Status(
        previous.status().code(),
        absl::StrFormat("switching to the relaxed capture mode for device "
                        "calls during a graph capture: %s",
                        previous.status().message()));
    return;
  }
  previous_ = *previous;
  active_ = true;
}

PoolId PrivatePools::Create(std::uintptr_t key, PoolId id) {
  if (id == 0) {
    while (pools_.contains(next_id_)) ++next_id_;
    id = next_id_++;
  }
  Pool& pool = pools_[id];
  pool.id = id;
  pool.key = key;
  pool.core = std::make_unique<BfcCore>(config_);
  return id;
}

absl::StatusOr<PrivatePools::Pool*> PrivatePools::Find(PoolId id,
                                                       absl::string_view call) {
  auto it = pools_.find(id);
  if (it == pools_.end() || it->second.references == 0) {
    return absl::NotFoundError(absl::StrFormat(
        "%s(%s %d): %s", call, kind_, id,
        id == 0 || id >= next_id_
            ? "no such pool (CreatePool makes them)"
            : "the pool was released (its last reference dropped)"));
  }
  return &it->second;
}

absl::Status PrivatePools::Retain(PoolId id) {
  GPUALLOC_ASSIGN_OR_RETURN(Pool * pool, Find(id, "RetainPool"));
  ++pool->references;
  return absl::OkStatus();
}

absl::Status PrivatePools::Release(PoolId id, std::uintptr_t last_use,
                                   SlabSource& slabs) {
  GPUALLOC_ASSIGN_OR_RETURN(Pool * pool, Find(id, "ReleasePool"));
  if (pool->references == 1 && pool->routed != 0) {
    for (const auto& [stream, route] : routes_) {
      if (route.pool != id) continue;
      return absl::FailedPreconditionError(absl::StrFormat(
          "ReleasePool(pool %d): stream %#x still allocates to it; call "
          "EndAllocateToPool first",
          id, stream));
    }
  }
  AddUser(*pool, last_use);
  if (--pool->references == 0) ReturnFree(*pool, slabs);
  return absl::OkStatus();
}

absl::Status PrivatePools::Begin(PoolId id, std::uintptr_t stream) {
  GPUALLOC_ASSIGN_OR_RETURN(Pool * pool, Find(id, "BeginAllocateToPool"));
  auto it = routes_.find(stream);
  if (it != routes_.end()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "BeginAllocateToPool(pool %d, stream %#x): the stream already "
        "allocates to pool %d; call EndAllocateToPool(%d) first",
        id, stream, it->second.pool, it->second.pool));
  }
  routes_[stream] = Route{id};
  ++pool->routed;
  AddUser(*pool, stream);
  return absl::OkStatus();
}

absl::Status PrivatePools::End(PoolId id) {
  GPUALLOC_ASSIGN_OR_RETURN(Pool * pool, Find(id, "EndAllocateToPool"));
  if (pool->routed == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "EndAllocateToPool(pool %d): no stream allocates to it", id));
  }
  for (auto it = routes_.begin(); it != routes_.end();) {
    if (it->second.pool == id) {
      routes_.erase(it++);
    } else {
      ++it;
    }
  }
  pool->routed = 0;
  return absl::OkStatus();
}

std::vector<std::uintptr_t> PrivatePools::RoutedStreams() const {
  std::vector<std::uintptr_t> streams;
  for (const auto& [stream, route] : routes_) streams.push_back(stream);
  return streams;
}

void PrivatePools::AddUser(Pool& pool, std::uintptr_t stream) {
  if (std::find(pool.users.begin(), pool.users.end(), stream) ==
      pool.users.end()) {
    pool.users.push_back(stream);
  }
}

absl::StatusOr<DeviceAddress> PrivatePools::Allocate(
    PoolId id, std::uint64_t size, std::uint64_t requested,
    std::uint64_t alignment, std::uintptr_t stream, ReuseOracle* oracle,
    SlabSource& slabs) {
  Pool& pool = pools_.at(id);
  BfcCore& core = *pool.core;
  AddUser(pool, stream);
  if (std::optional<DeviceAddress> a = core.Allocate(
          size, requested, alignment, stream, oracle, BfcCore::Search::kAll)) {
    return *a;
  }
  // A slab the request fits in wherever the pool core places it.
  std::uint64_t bytes = RoundUpToMultiple(
      size + (alignment - config_.min_block_size), slab_unit_);
  const std::uint64_t wanted = bytes;
  absl::StatusOr<DeviceAddress> taken = slabs.TakeSlab(&bytes, pool.key);
  if (!taken.ok()) {
    return absl::Status(
        taken.status().code(),
        absl::StrFormat("%s %d, Allocate(%d bytes) on stream %#x: "
                        "a new block of %d bytes for the pool: %s",
                        kind_, id, requested, stream, wanted,
                        taken.status().message()));
  }
  const DeviceAddress base = *taken;
  slabs_.emplace(base, Slab{bytes, wanted, id});
  pool.slab_bytes += bytes;
  slab_bytes_ += bytes;
  slab_requested_ += wanted;
  ++slabs_taken_;
  AddSlab(pool, base, bytes, oracle, slabs);
  std::optional<DeviceAddress> a = core.Allocate(
      size, requested, alignment, stream, oracle, BfcCore::Search::kAll);
  if (!a.has_value()) {  // the slab alone holds the request
    return absl::InternalError(
        absl::StrFormat("%s %d: a new block of %d bytes at %#x does not hold a "
                        "request of %d bytes aligned to %d",
                        kind_, id, bytes, base, size, alignment));
  }
  return *a;
}

void PrivatePools::AddSlab(Pool& pool, DeviceAddress base, std::uint64_t bytes,
                           const ReuseOracle* oracle, const SlabSource& slabs) {
  BfcCore& core = *pool.core;
  RegionId id = core.AddRegion(base, bytes);
  // Joined only within one general region: a pool block never spans two
  // backend allocations.
  if (std::optional<RegionId> left = core.RegionAt(base - 1);
      left.has_value() && slabs.Contiguous(base - 1, base)) {
    id = core.JoinRegions(*left, id, oracle);
  }
  if (std::optional<RegionId> right = core.RegionAt(base + bytes);
      right.has_value() && slabs.Contiguous(base + bytes - 1, base + bytes)) {
    id = core.JoinRegions(id, *right, oracle);
  }
}

const PrivatePools::Slab* PrivatePools::SlabAt(DeviceAddress address) const {
  auto it = slabs_.upper_bound(address);
  if (it == slabs_.begin()) return nullptr;
  --it;
  if (address - it->first >= it->second.bytes) return nullptr;
  return &it->second;
}

PrivatePools::Pool& PrivatePools::PoolAt(DeviceAddress address) {
  return pools_.at(SlabAt(address)->pool);  // REQUIRES: Owns(address)
}

PoolId PrivatePools::SlabOwner(DeviceAddress address) const {
  auto it = slabs_.find(address);
  return it == slabs_.end() ? 0 : it->second.pool;
}

absl::Status PrivatePools::Deallocate(DeviceAddress address,
                                      std::uintptr_t stream,
                                      std::uint64_t stamp,
                                      const ReuseOracle* oracle,
                                      SlabSource& slabs) {
  Pool& pool = PoolAt(address);
  GPUALLOC_RETURN_IF_ERROR(
      pool.core->Deallocate(address, stream, stamp, oracle));
  AddUser(pool, stream);
  if (pool.references == 0) ReturnFree(pool, slabs);
  return absl::OkStatus();
}

absl::Status PrivatePools::RecordStream(DeviceAddress address,
                                        std::uintptr_t stream) {
  Pool& pool = PoolAt(address);
  GPUALLOC_RETURN_IF_ERROR(pool.core->RecordStream(address, stream));
  AddUser(pool, stream);
  return absl::OkStatus();
}

void PrivatePools::RenameStream(std::uintptr_t stream, std::uintptr_t key) {
  for (auto& [id, pool] : pools_) {
    if (pool.core->StreamReferences(stream) != 0) {
      pool.core->RenameStream(stream, key);
    }
    for (std::uintptr_t& user : pool.users) {
      if (user == stream) user = key;
    }
  }
}

std::uint64_t PrivatePools::StreamReferences(std::uintptr_t stream) const {
  std::uint64_t n = 0;
  for (const auto& [id, pool] : pools_) {
    n += pool.core->StreamReferences(stream);
    n += std::count(pool.users.begin(), pool.users.end(), stream);
  }
  return n;
}

std::vector<std::pair<DeviceAddress, std::uint64_t>> PrivatePools::Slabs(
    PoolId id) const {
  std::vector<std::pair<DeviceAddress, std::uint64_t>> out;
  for (const auto& [base, slab] : slabs_) {
    if (slab.pool == id) out.emplace_back(base, slab.bytes);
  }
  return out;
}

std::vector<std::pair<DeviceAddress, std::uint64_t>> PrivatePools::ChunksInUse(
    PoolId id) const {
  std::vector<RegionSnapshot> regions;
  pools_.at(id).core->AppendSnapshot(&regions);
  std::vector<std::pair<DeviceAddress, std::uint64_t>> out;
  for (const RegionSnapshot& r : regions) {
    for (const ChunkSnapshot& c : r.chunks) {
      if (c.in_use) out.emplace_back(c.address, c.size);
    }
  }
  return out;
}

void PrivatePools::ReturnFreeSlabs(PoolId id, SlabSource& slabs,
                                   const ReuseOracle& known) {
  Pool& pool = pools_.at(id);
  BfcCore& core = *pool.core;
  if (core.multi_stream()) core.Settle(known);
  for (auto it = slabs_.begin(); it != slabs_.end();) {
    const Slab& slab = it->second;
    if (slab.pool != id || !core.IsFreeRange(it->first, slab.bytes)) {
      ++it;
      continue;
    }
    core.CarveFree(it->first, slab.bytes);
    slabs.ReturnSlab(it->first, pool.users);
    pool.slab_bytes -= slab.bytes;
    slab_bytes_ -= slab.bytes;
    slab_requested_ -= slab.requested;
    it = slabs_.erase(it);
  }
}

std::vector<PoolId> PrivatePools::Ids() const {
  std::vector<PoolId> ids;
  for (const auto& [id, pool] : pools_) ids.push_back(id);
  return ids;
}

void PrivatePools::ReturnFree(Pool& pool, SlabSource& slabs) {
  BfcCore& core = *pool.core;
  // A released pool's free memory goes back whatever streams freed it, with
  // every stream that used the pool named at its free (ReturnSlab).
  if (core.multi_stream()) core.Settle(AllComplete());
  for (RegionId region : core.FreeRegions()) {
    const DeviceAddress base = core.region_base(region);
    const DeviceAddress end = base + core.region_size(region);
    for (auto it = slabs_.lower_bound(base);
         it != slabs_.end() && it->first < end;) {
      slabs.ReturnSlab(it->first, pool.users);
      pool.slab_bytes -= it->second.bytes;
      slab_bytes_ -= it->second.bytes;
      slab_requested_ -= it->second.requested;
      it = slabs_.erase(it);
    }
    core.RemoveRegion(region);
  }
  if (core.num_regions() == 0) {
    forgotten_allocs_ += core.counters().num_allocs;
    pools_.erase(pool.id);  // `pool` is gone
  }
}

std::uint64_t PrivatePools::bytes_in_use() const {
  std::uint64_t n = 0;
  for (const auto& [id, pool] : pools_) n += pool.core->counters().bytes_in_use;
  return n;
}

std::uint64_t PrivatePools::num_chunks_in_use() const {
  std::uint64_t n = 0;
  for (const auto& [id, pool] : pools_) {
    n += pool.core->counters().num_chunks_in_use;
  }
  return n;
}

std::uint64_t PrivatePools::bytes_requested() const {
  std::uint64_t n = 0;
  for (const auto& [id, pool] : pools_) {
    n += pool.core->counters().bytes_requested;
  }
  return n;
}

std::uint64_t PrivatePools::num_allocs() const {
  std::uint64_t n = forgotten_allocs_;
  for (const auto& [id, pool] : pools_) n += pool.core->counters().num_allocs;
  return n;
}

absl::Status PrivatePools::Validate(const BfcCore& general) const {
  std::uint64_t total = 0;
  for (const auto& [id, pool] : pools_) {
    absl::Status valid = pool.core->Validate();
    if (!valid.ok()) {
      return absl::Status(valid.code(), absl::StrFormat("%s %d: %s", kind_, id,
                                                        valid.message()));
    }
    if (pool.core->counters().bytes_reserved != pool.slab_bytes) {
      return absl::InternalError(absl::StrFormat(
          "invariant G1 broken: pool %d's core reserves %d bytes, its slabs "
          "hold %d",
          id, pool.core->counters().bytes_reserved, pool.slab_bytes));
    }
    total += pool.slab_bytes;
  }
  std::uint64_t indexed = 0;
  for (const auto& [base, slab] : slabs_) {
    auto it = pools_.find(slab.pool);
    if (it == pools_.end()) {
      return absl::InternalError(absl::StrFormat(
          "invariant G2 broken: slab %#x names pool %d, which is gone", base,
          slab.pool));
    }
    const std::optional<RegionId> region = it->second.core->RegionAt(base);
    if (!region.has_value() ||
        base + slab.bytes > it->second.core->region_base(*region) +
                                it->second.core->region_size(*region)) {
      return absl::InternalError(absl::StrFormat(
          "invariant G1 broken: slab [%#x, +%d) of pool %d is not inside one "
          "of its regions",
          base, slab.bytes, slab.pool));
    }
    if (general.AllocatedSize(base) != slab.bytes) {
      return absl::InternalError(absl::StrFormat(
          "invariant G2 broken: slab [%#x, +%d) of pool %d is not an in-use "
          "chunk of that size in the general core (%d)",
          base, slab.bytes, slab.pool, general.AllocatedSize(base)));
    }
    indexed += slab.bytes;
  }
  if (indexed != total || total != slab_bytes_) {
    return absl::InternalError(absl::StrFormat(
        "invariant G2 broken: the slab index holds %d bytes, the pools %d, "
        "the total says %d",
        indexed, total, slab_bytes_));
  }
  return absl::OkStatus();
}

void PrivatePools::AppendSnapshot(std::vector<PoolSnapshot>* pools) const {
  std::vector<PoolId> ids;
  for (const auto& [id, pool] : pools_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (PoolId id : ids) {
    const Pool& pool = pools_.at(id);
    PoolSnapshot p;
    p.id = id;
    p.references = pool.references;
    for (const auto& [stream, route] : routes_) {
      if (route.pool == id) p.streams.push_back(stream);
    }
    std::sort(p.streams.begin(), p.streams.end());
    p.bytes_reserved = pool.slab_bytes;
    p.bytes_in_use = pool.core->counters().bytes_in_use;
    pool.core->AppendSnapshot(&p.regions);
    pools->push_back(std::move(p));
  }
}

}  // namespace core
}  // namespace gpualloc
