// gpualloc/backend.h: the boundary between the vendor-neutral core and a
// device.
//
// A Backend translates a handful of device operations (physical allocate and
// free, later virtual memory, streams and events, stream-ordered pools) into
// vendor calls. It sits on the cold path: the allocator calls it only to grow,
// shrink or synchronize, so a virtual call per operation costs nothing that
// matters.
//
// Every optional operation is announced by a capability flag in DeviceInfo, so
// a backend states what it supports instead of failing in surprising ways.
//
// Thread safety: every method may be called from any thread; implementations
// synchronize internally.
#ifndef GPUALLOC_BACKEND_H_
#define GPUALLOC_BACKEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpualloc {

// A device address. Opaque to the host: never dereferenced by the core.
using DeviceAddress = std::uint64_t;

// A stream names an ordered queue of device work. Any opaque handle value names
// a stream (the way a runtime passes its cudaStream_t); 0 is the default
// stream. A strong type so that it cannot be confused with a size or an
// alignment.
struct Stream {
  std::uintptr_t handle = 0;

  constexpr Stream() = default;
  constexpr explicit Stream(std::uintptr_t h) : handle(h) {}
  static Stream FromHandle(const void* h) {
    return Stream(reinterpret_cast<std::uintptr_t>(h));
  }
  friend constexpr bool operator==(Stream a, Stream b) {
    return a.handle == b.handle;
  }
};

enum class Vendor : std::uint8_t { kUnknown, kNvidia, kAmd };

absl::string_view VendorName(Vendor vendor);

// What a backend can do beyond physical allocate/free.
struct Capabilities {
  bool virtual_memory = false;  // reserve/map/unmap address ranges
  bool streams = false;         // events on streams (stream-ordered frees)
  bool stream_ordered_pools = false;  // the vendor's async pools
  bool host_accessible = false;  // addresses can be read/written by the host
};

// Facts about one device, as the backend reports them.
struct DeviceInfo {
  std::string backend;  // "sim", "cuda", "hip"
  Vendor vendor = Vendor::kUnknown;
  std::string name;     // marketing name, e.g. "NVIDIA H200"
  std::string arch_id;  // e.g. "sm_90", "gfx942"
  int ordinal = 0;
  std::uint64_t total_bytes = 0;
  // Virtual-memory granularity: minimum and recommended (cuMemGetAllocation-
  // Granularity); growth happens in multiples of the recommended one.
  std::uint64_t min_granularity = 0;
  std::uint64_t recommended_granularity = 0;
  // Alignment guaranteed for plain allocations (256 B on NVIDIA, 4 KiB on AMD).
  std::uint64_t allocation_alignment = 0;
  std::vector<std::uint64_t>
      page_sizes;  // TLB page / fragment sizes, ascending
  Capabilities capabilities;
  std::string driver_version;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Facts that do not change while the backend lives.
  virtual const DeviceInfo& info() const = 0;

  // Bytes the device could still hand out now (cuMemGetInfo's free).
  virtual absl::StatusOr<std::uint64_t> FreeBytes() = 0;

  // Physical allocation (cuMemAlloc / hipMalloc): at least `bytes`, aligned to
  // info().allocation_alignment. Out of device memory is ResourceExhausted.
  virtual absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) = 0;
  // Frees what Allocate returned; anything else is InvalidArgument.
  virtual absl::Status Free(DeviceAddress address) = 0;

  // Optional operations (virtual memory, streams and events, stream-ordered
  // pools; SPEC section 3) land with their issues, each behind its capability
  // flag, with a default that returns Unimplemented naming the backend.
};

}  // namespace gpualloc

#endif  // GPUALLOC_BACKEND_H_
