// SPDX-License-Identifier: Apache-2.0
// core/ipc/counter_page.cc: the importers' page of an exported block.
#include "core/ipc/counter_page.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpualloc::core {
namespace {

absl::Status SystemError(absl::string_view what, int error) {
  const std::string message = absl::StrCat(
      "the importers' counter page: ", what, ": ", std::strerror(error));
  if (error == ENOMEM || error == EMFILE || error == ENFILE) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

void* MapPage(int fd) {
  void* page = mmap(nullptr, CounterPage::kBytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED, fd, 0);
  return page == MAP_FAILED ? nullptr : page;
}

absl::Status Stale(absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat(
      "Import: the description is stale: ", why,
      "; ask the exporter for a description of a block it has now"));
}

}  // namespace

absl::StatusOr<ExportToken> NewExportToken() {
  ExportToken token;
  std::size_t have = 0;
  while (have < token.size()) {
    const ssize_t got = getrandom(token.data() + have, token.size() - have, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(
          "Export: getrandom for the export's token: ", std::strerror(errno)));
    }
    have += static_cast<std::size_t>(got);
  }
  return token;
}

absl::StatusOr<CounterPage> CounterPage::Create(const ExportToken& token) {
  CounterPage page;
  page.fd_ = memfd_create("gpualloc-importers", MFD_CLOEXEC);
  if (page.fd_ < 0) return SystemError("memfd_create", errno);
  if (ftruncate(page.fd_, kBytes) != 0) {
    return SystemError("ftruncate", errno);
  }
  page.page_ = MapPage(page.fd_);
  if (page.page_ == nullptr) return SystemError("mmap", errno);
  std::memcpy(page.page_, &kMagic, sizeof(kMagic));
  const std::uint32_t slots = kSlots;
  std::memcpy(static_cast<char*>(page.page_) + 8, &slots, sizeof(slots));
  page.Reopen(token);
  return page;
}

absl::StatusOr<CounterPage> CounterPage::Open(int fd,
                                              const ExportToken& token) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::uint64_t>(st.st_size) != kBytes) {
    return absl::InvalidArgumentError(
        "Import: the description's counter descriptor is not an importers' "
        "counter page (the exporter closed it, or the description is stale)");
  }
  CounterPage page;
  page.page_ = MapPage(fd);
  if (page.page_ == nullptr) return SystemError("mmap", errno);
  std::uint64_t magic = 0;
  std::memcpy(&magic, page.page_, sizeof(magic));
  if (magic != kMagic) {
    return absl::InvalidArgumentError(
        "Import: the description's counter descriptor is not an importers' "
        "counter page (wrong magic number: the description is stale)");
  }
  if (!page.TokenIs(token)) {
    return Stale(
        "the exporter no longer exports the block it names (its counter page "
        "holds another export's token, or none)");
  }
  return page;
}

CounterPage& CounterPage::operator=(CounterPage&& other) noexcept {
  if (this != &other) {
    Reset();
    page_ = std::exchange(other.page_, nullptr);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

CounterPage::~CounterPage() { Reset(); }

void CounterPage::Reset() {
  if (page_ != nullptr) (void)munmap(page_, kBytes);
  if (fd_ >= 0) (void)close(fd_);
  page_ = nullptr;
  fd_ = -1;
}

std::int32_t* CounterPage::slots() const {
  return reinterpret_cast<std::int32_t*>(static_cast<char*>(page_) +
                                         kHeaderBytes);
}
std::uint32_t* CounterPage::state() const {
  return reinterpret_cast<std::uint32_t*>(static_cast<char*>(page_) + 12);
}
std::uint8_t* CounterPage::token() const {
  return reinterpret_cast<std::uint8_t*>(static_cast<char*>(page_) + 16);
}

bool CounterPage::TokenIs(const ExportToken& want) const {
  std::uint8_t* t = token();
  std::uint8_t differ = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    differ |= __atomic_load_n(&t[i], __ATOMIC_ACQUIRE) ^ want[i];
  }
  return differ == 0;
}

bool CounterPage::retired() const {
  return __atomic_load_n(state(), __ATOMIC_ACQUIRE) == kRetired;
}

absl::StatusOr<std::uint32_t> CounterPage::Register(pid_t pid,
                                                    const ExportToken& token) {
  std::int32_t* s = slots();
  for (std::uint32_t i = 0; i < kSlots; ++i) {
    std::int32_t expected = 0;
    if (__atomic_compare_exchange_n(&s[i], &expected, pid, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) {
      // The slot is visible before the state is read (TryRetire stores the
      // state before it reads the slots): both sides use sequentially
      // consistent operations, whose single total order rules out each
      // missing the other's store (no fence needed; ThreadSanitizer
      // refuses atomic_thread_fence).
      if (__atomic_load_n(state(), __ATOMIC_SEQ_CST) != kOpen ||
          !TokenIs(token)) {
        Unregister(i, pid);
        return Stale(
            "the exporter has freed the block it names, and no importer has "
            "it open");
      }
      return i;
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("Import: the block already has ", kSlots,
                   " importers registered, the most one block can have"));
}

void CounterPage::Unregister(std::uint32_t slot, pid_t pid) {
  if (slot >= kSlots) return;
  std::int32_t expected = pid;
  __atomic_compare_exchange_n(&slots()[slot], &expected, 0, false,
                              __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

std::uint32_t CounterPage::Live() {
  std::int32_t* s = slots();
  std::uint32_t live = 0;
  for (std::uint32_t i = 0; i < kSlots; ++i) {
    std::int32_t pid = __atomic_load_n(&s[i], __ATOMIC_SEQ_CST);
    if (pid == 0) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      __atomic_compare_exchange_n(&s[i], &pid, 0, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE);
      continue;
    }
    ++live;
  }
  return live;
}

bool CounterPage::TryRetire() {
  if (retired()) return true;
  // (Sequentially consistent, as Register's: see there.)
  __atomic_store_n(state(), kClosing, __ATOMIC_SEQ_CST);
  if (Live() != 0) {
    __atomic_store_n(state(), kOpen, __ATOMIC_SEQ_CST);
    return false;
  }
  Retire();
  return true;
}

void CounterPage::Retire() {
  std::uint8_t* t = token();
  for (std::size_t i = 0; i < sizeof(ExportToken); ++i) {
    __atomic_store_n(&t[i], std::uint8_t{0}, __ATOMIC_RELEASE);
  }
  __atomic_store_n(state(), kRetired, __ATOMIC_SEQ_CST);
}

void CounterPage::Reopen(const ExportToken& token) {
  std::uint8_t* t = this->token();
  for (std::size_t i = 0; i < token.size(); ++i) {
    __atomic_store_n(&t[i], token[i], __ATOMIC_RELEASE);
  }
  __atomic_store_n(state(), kOpen, __ATOMIC_SEQ_CST);
}

}  // namespace gpualloc::core
