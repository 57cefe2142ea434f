// SPDX-License-Identifier: Apache-2.0
// core/ipc/counter_page.h: the page an exported block's importers register
// in (Allocator::Export's lifetime rule): a memfd of one host page, made by
// the exporter and named in the description by (pid, descriptor), mapped
// MAP_SHARED by every importer. Each importer claims a slot with its pid
// (compare-and-swap from 0) and clears it when it closes the import; the
// exporter counts the slots whose process still exists (kill(pid, 0)) and
// clears those of processes that are gone, so that a crashed importer holds
// nothing back.
//
// Not thread-safe on its own: the allocator's lock guards each page; the
// slots themselves are atomics, since other processes write them.
#ifndef GPUALLOC_CORE_IPC_COUNTER_PAGE_H_
#define GPUALLOC_CORE_IPC_COUNTER_PAGE_H_

#include <sys/types.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/layer.h"

namespace gpualloc::core {

class CounterPage {
 public:
  static constexpr std::uint64_t kMagic = 0x544e434370696167;  // "gaipCCNT"
  static constexpr std::uint64_t kBytes = 4096;
  static constexpr std::uint32_t kSlots = (kBytes - 16) / 4;

  // The exporter's page: a new memfd, zeroed, mapped here; owns both.
  static absl::StatusOr<CounterPage> Create();
  // An importer's view of the page behind `fd` (not owned: the caller
  // closes it); InvalidArgument when it is not a counter page.
  static absl::StatusOr<CounterPage> Open(int fd);

  CounterPage() = default;
  CounterPage(CounterPage&& other) noexcept { *this = std::move(other); }
  CounterPage& operator=(CounterPage&& other) noexcept;
  ~CounterPage();

  // The exporter's descriptor (-1 for an importer's view).
  int fd() const { return fd_; }
  bool valid() const { return page_ != nullptr; }
  // Claims a slot for `pid`: ResourceExhausted when every slot is taken.
  absl::StatusOr<std::uint32_t> Register(pid_t pid);
  // Clears `slot` if `pid` still holds it.
  void Unregister(std::uint32_t slot, pid_t pid);
  // Importers that hold a slot and still exist; slots of processes that no
  // longer exist are cleared.
  std::uint32_t Live();

 private:
  std::int32_t* slots() const;
  void Reset();
  void* page_ = nullptr;
  int fd_ = -1;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_IPC_COUNTER_PAGE_H_
