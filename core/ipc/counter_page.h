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
// The page also holds the export's token, 16 random bytes the description
// carries too, and a state: open while the export is live. Descriptors are
// named by number and numbers are reused, so an importer checks that the page
// it reached is the one its description names (the token) and that the
// export is still live (the state) before it trusts anything else the
// description names. The exporter retires the page (TryRetire) before it
// frees the block: it clears the token, and no import can register after
// that. Registration and retirement cannot both succeed: an importer stores
// its slot, then reads the state; the exporter stores the state, then reads
// the slots (each with a sequentially consistent fence in between), so at
// least one of them sees the other.
//
// Not thread-safe on its own: the allocator's lock guards each page; the
// slots, state and token are atomics, since other processes use them.
#ifndef GPUALLOC_CORE_IPC_COUNTER_PAGE_H_
#define GPUALLOC_CORE_IPC_COUNTER_PAGE_H_

#include <sys/types.h>

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "core/layer.h"

namespace gpualloc::core {

// What names one export: 128 random bits (NewExportToken).
using ExportToken = std::array<std::uint8_t, 16>;

// 16 bytes from the kernel's random source (getrandom); Internal if it fails.
absl::StatusOr<ExportToken> NewExportToken();

class CounterPage {
 public:
  // The layout: magic (8), slot count (4), state (4), token (16), slots.
  static constexpr std::uint64_t kMagic = 0x32544e4370696167;  // "gaipCNT2"
  static constexpr std::uint64_t kBytes = 4096;
  static constexpr std::uint64_t kHeaderBytes = 32;
  static constexpr std::uint32_t kSlots = (kBytes - kHeaderBytes) / 4;
  // The state word: the export is live; being retired (TryRetire, for an
  // instant); retired (the block is freed or being freed).
  static constexpr std::uint32_t kOpen = 0;
  static constexpr std::uint32_t kClosing = 1;
  static constexpr std::uint32_t kRetired = 2;

  // The exporter's page: a new memfd, zeroed, mapped here, open with
  // `token`; owns both.
  static absl::StatusOr<CounterPage> Create(const ExportToken& token);
  // An importer's view of the page behind `fd` (not owned: the caller
  // closes it). InvalidArgument when it is not a counter page;
  // FailedPrecondition when it is another export's page or the export it
  // belonged to is over (a stale description).
  static absl::StatusOr<CounterPage> Open(int fd, const ExportToken& token);

  CounterPage() = default;
  CounterPage(CounterPage&& other) noexcept { *this = std::move(other); }
  CounterPage& operator=(CounterPage&& other) noexcept;
  ~CounterPage();

  // The exporter's descriptor (-1 for an importer's view).
  int fd() const { return fd_; }
  bool valid() const { return page_ != nullptr; }
  // Claims a slot for `pid` while the export is open with `token`:
  // ResourceExhausted when every slot is taken, FailedPrecondition (and no
  // slot kept) when the export was retired or its token is not `token`.
  absl::StatusOr<std::uint32_t> Register(pid_t pid, const ExportToken& token);
  // Clears `slot` if `pid` still holds it.
  void Unregister(std::uint32_t slot, pid_t pid);
  // Importers that hold a slot and still exist; slots of processes that no
  // longer exist are cleared.
  std::uint32_t Live();

  // The exporter's side. TryRetire: when no importer holds a slot (Live()
  // is 0), the page is retired (its token cleared: no import registers from
  // now on) and true; else it stays open and false. A retired page answers
  // true again. Reopen: the export is live again with `token` (the free
  // that retired it failed: the block is still allocated).
  bool TryRetire();
  // Retires the page whoever holds a slot (the exporter is going away).
  void Retire();
  void Reopen(const ExportToken& token);
  bool retired() const;

 private:
  std::int32_t* slots() const;
  std::uint32_t* state() const;
  std::uint8_t* token() const;
  bool TokenIs(const ExportToken& token) const;
  void Reset();
  void* page_ = nullptr;
  int fd_ = -1;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_IPC_COUNTER_PAGE_H_
