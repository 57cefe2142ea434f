// SPDX-License-Identifier: Apache-2.0
// Memory shared with other processes stays theirs only while it is exported
// (Allocator::Export / Import / CloseImport on the simulator): stale and
// edited descriptions are refused, held blocks are never lost, and the
// importer's calls can be retried. Every case runs with the importer in this
// process (a second SimBackend) and in a forked child that takes the
// exporter's descriptors with pidfd_getfd.
#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::testing {
namespace {

// The bfc mode's region kinds, and the platform mode.
enum class Kind { kSeparate, kExpandable, kPreallocated, kPlatform };
// Where the importer runs.
enum class Where { kHere, kForked };

struct Process {
  std::shared_ptr<SimBackend> sim;
  std::unique_ptr<Allocator> a;
};

Process MakeProcess(Kind kind) {
  SimOptions so;
  so.profile = "h100";
  so.total_bytes = 256 * kMiB;
  so.memory = SimMemory::kHostBacked;
  Options o;
  if (kind == Kind::kPlatform) o.mode = AllocatorMode::kPlatform;
  o.memory_limit = 64 * kMiB;
  o.preallocate = kind == Kind::kPreallocated;
  o.expandable = kind == Kind::kExpandable ? Tristate::kOn : Tristate::kOff;
  Process p;
  p.sim = MakeSim(so);
  p.a = MakeAllocator(o, p.sim);
  return p;
}

unsigned char Pattern(std::uint64_t seed, std::uint64_t offset) {
  return static_cast<unsigned char>((offset * 131 + seed * 29 + 7) & 0xff);
}
void Fill(void* p, std::uint64_t bytes, std::uint64_t seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::uint64_t off = 0; off < bytes; ++off) b[off] = Pattern(seed, off);
}
std::uint64_t Wrong(const void* p, std::uint64_t bytes, std::uint64_t seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t wrong = 0;
  for (std::uint64_t off = 0; off < bytes; ++off) {
    wrong += b[off] != Pattern(seed, off);
  }
  return wrong;
}

int OpenDescriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    ++n;
  }
  return n;
}

// --- Editing a description (docs/REFERENCE.md, "Export descriptions") ----

std::uint64_t Fnv1a(absl::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325u;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3u;
  }
  return h;
}
// `description` with `width` bytes at `offset` set to `value`
// (little-endian) and its checksum recomputed: what an attacker can do.
std::string Edited(std::string description, std::size_t offset,
                   std::uint64_t value, int width = 8) {
  for (int i = 0; i < width; ++i) {
    description[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
  }
  const std::size_t body = description.size() - 8;
  const std::uint64_t sum =
      Fnv1a(absl::string_view(description).substr(0, body));
  for (int i = 0; i < 8; ++i) {
    description[body + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  }
  return description;
}
constexpr std::size_t kBytesField = 24;
constexpr std::size_t kOffsetField = 32;
constexpr std::size_t kTokenField = 64;
constexpr std::size_t kFirstMappingBytes = 80 + 8;  // kind 2

// --- The importer ----------------------------------------------------------

class Importer {
 public:
  virtual ~Importer() = default;
  virtual absl::StatusOr<ImportedBlock> Import(const std::string& d) = 0;
  virtual absl::Status Close(void* ptr) = 0;
  // The k-th call of `op` from now on in the importer's device fails.
  virtual void Fail(SimOp op, std::uint64_t k) = 0;
  // Writes the pattern of `seed` over [ptr, ptr + bytes).
  virtual void Fill(void* ptr, std::uint64_t bytes, std::uint64_t seed) = 0;
  // The importer's open descriptors, bytes_imported, and address space
  // its device has reserved.
  virtual int Descriptors() = 0;
  virtual std::uint64_t BytesImported() = 0;
  virtual std::uint64_t ReservedAddress() = 0;
};

class ImporterHere final : public Importer {
 public:
  explicit ImporterHere(Kind kind) : p_(MakeProcess(kind)) {}
  absl::StatusOr<ImportedBlock> Import(const std::string& d) override {
    return p_.a->Import(d);
  }
  absl::Status Close(void* ptr) override { return p_.a->CloseImport(ptr); }
  void Fail(SimOp op, std::uint64_t k) override {
    p_.sim->FailNthCall(op, k, absl::InternalError("injected fault"));
  }
  void Fill(void* ptr, std::uint64_t bytes, std::uint64_t seed) override {
    testing::Fill(ptr, bytes, seed);
  }
  int Descriptors() override { return OpenDescriptors(); }
  std::uint64_t BytesImported() override {
    return p_.a->GetStats().bytes_imported;
  }
  std::uint64_t ReservedAddress() override {
    return p_.sim->reserved_address_bytes();
  }

 private:
  Process p_;
};

// The same calls in a forked child, over two pipes: a request (op, two
// numbers, a string) and a reply (status code, two numbers, a message).
class ImporterForked final : public Importer {
 public:
  explicit ImporterForked(Kind kind) {
    int to_child[2], to_parent[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(to_parent, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2 failed";
      return;
    }
    child_ = fork();
    if (child_ == 0) {
      close(to_child[1]);
      close(to_parent[0]);
      _exit(Serve(kind, to_child[0], to_parent[1]));
    }
    close(to_child[0]);
    close(to_parent[1]);
    out_ = to_child[1];
    in_ = to_parent[0];
  }
  ~ImporterForked() override {
    if (child_ <= 0) return;
    Call(kExit, 0, 0, "");
    close(out_);
    close(in_);
    int status = 0;
    EXPECT_EQ(waitpid(child_, &status, 0), child_);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the importer's child ended with status " << status;
  }

  absl::StatusOr<ImportedBlock> Import(const std::string& d) override {
    const Reply r = Call(kImport, 0, 0, d);
    if (!r.status.ok()) return r.status;
    return ImportedBlock{reinterpret_cast<void*>(r.a), r.b};
  }
  absl::Status Close(void* ptr) override {
    return Call(kClose, reinterpret_cast<std::uintptr_t>(ptr), 0, "").status;
  }
  void Fail(SimOp op, std::uint64_t k) override {
    Call(kFail, static_cast<std::uint64_t>(op), k, "");
  }
  void Fill(void* ptr, std::uint64_t bytes, std::uint64_t seed) override {
    Call(kFill, reinterpret_cast<std::uintptr_t>(ptr), bytes,
         std::to_string(seed));
  }
  int Descriptors() override {
    return static_cast<int>(Call(kDescriptors, 0, 0, "").a);
  }
  std::uint64_t BytesImported() override {
    return Call(kBytesImported, 0, 0, "").a;
  }
  std::uint64_t ReservedAddress() override {
    return Call(kReservedAddress, 0, 0, "").a;
  }

 private:
  enum Op : std::uint64_t {
    kImport = 1,
    kClose,
    kFail,
    kFill,
    kDescriptors,
    kBytesImported,
    kReservedAddress,
    kExit
  };
  struct Reply {
    absl::Status status;
    std::uint64_t a = 0, b = 0;
  };

  static bool WriteAll(int fd, const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = write(fd, p, n);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  }
  static bool ReadAll(int fd, void* data, std::size_t n) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      const ssize_t r = read(fd, p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  }
  // Four numbers, then `text`.
  static bool Send(int fd, std::uint64_t w, std::uint64_t x, std::uint64_t y,
                   absl::string_view text) {
    const std::uint64_t head[4] = {w, x, y, text.size()};
    return WriteAll(fd, head, sizeof(head)) &&
           WriteAll(fd, text.data(), text.size());
  }
  static bool Receive(int fd, std::uint64_t head[3], std::string* text) {
    std::uint64_t h[4];
    if (!ReadAll(fd, h, sizeof(h))) return false;
    head[0] = h[0];
    head[1] = h[1];
    head[2] = h[2];
    text->resize(h[3]);
    return ReadAll(fd, text->data(), text->size());
  }

  Reply Call(Op op, std::uint64_t x, std::uint64_t y, absl::string_view text) {
    Reply reply;
    std::uint64_t head[3];
    std::string message;
    if (!Send(out_, op, x, y, text) || !Receive(in_, head, &message)) {
      ADD_FAILURE() << "the importer's child does not answer";
      reply.status = absl::InternalError("no answer");
      return reply;
    }
    reply.status =
        head[0] == 0
            ? absl::OkStatus()
            : absl::Status(static_cast<absl::StatusCode>(head[0]), message);
    reply.a = head[1];
    reply.b = head[2];
    return reply;
  }

  // The child: runs requests until kExit (0) or a broken pipe (1).
  static int Serve(Kind kind, int in, int out) {
    Process p = MakeProcess(kind);
    for (;;) {
      std::uint64_t head[3];
      std::string text;
      if (!Receive(in, head, &text)) return 1;
      absl::Status status;
      std::uint64_t a = 0, b = 0;
      switch (static_cast<Op>(head[0])) {
        case kImport: {
          absl::StatusOr<ImportedBlock> block = p.a->Import(text);
          status = block.status();
          if (block.ok()) {
            a = reinterpret_cast<std::uintptr_t>(block->ptr);
            b = block->bytes;
          }
          break;
        }
        case kClose:
          status = p.a->CloseImport(reinterpret_cast<void*>(head[1]));
          break;
        case kFail:
          p.sim->FailNthCall(static_cast<SimOp>(head[1]), head[2],
                             absl::InternalError("injected fault"));
          break;
        case kFill:
          testing::Fill(reinterpret_cast<void*>(head[1]), head[2],
                        std::stoull(text));
          break;
        case kDescriptors:
          a = static_cast<std::uint64_t>(OpenDescriptors());
          break;
        case kBytesImported:
          a = p.a->GetStats().bytes_imported;
          break;
        case kReservedAddress:
          a = p.sim->reserved_address_bytes();
          break;
        case kExit:
          Send(out, 0, 0, 0, "");
          return 0;
      }
      if (!Send(out, static_cast<std::uint64_t>(status.code()), a, b,
                status.message())) {
        return 1;
      }
    }
  }

  pid_t child_ = -1;
  int out_ = -1;
  int in_ = -1;
};

std::unique_ptr<Importer> MakeImporter(Kind kind, Where where) {
  if (where == Where::kHere) return std::make_unique<ImporterHere>(kind);
  return std::make_unique<ImporterForked>(kind);
}

using Param = std::tuple<Kind, Where>;

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const char* kinds[] = {"separate", "expandable", "preallocated", "platform"};
  return absl::StrCat(
      kinds[static_cast<int>(std::get<0>(info.param))], "_",
      std::get<1>(info.param) == Where::kHere ? "here" : "forked");
}

class IpcLifetimeTest : public ::testing::TestWithParam<Param> {
 protected:
  Kind kind() const { return std::get<0>(GetParam()); }
  Where where() const { return std::get<1>(GetParam()); }
  // Kind 1 descriptions (an IPC handle) and kind 2 (mappings).
  bool ipc_handle() const { return kind() != Kind::kExpandable; }
};

bool Says(const absl::Status& s, absl::string_view what) {
  return s.message().find(what) != absl::string_view::npos;
}

// A description names descriptors by number, and numbers are reused: once
// the export is over, its description reaches nothing, whatever took its
// numbers since.
TEST_P(IpcLifetimeTest, StaleDescriptionsAreRefused) {
  Process exporter = MakeProcess(kind());
  std::unique_ptr<Importer> importer = MakeImporter(kind(), where());
  // Exported, freed with no importer: the export is over.
  auto a = exporter.a->Allocate(2 * kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  auto stale = exporter.a->Export(*a);
  ASSERT_TRUE(stale.ok()) << stale.status();
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*a));
  // Its memory goes to a private block, and another block is exported (its
  // descriptors take the numbers the first export's had).
  auto c = exporter.a->Allocate(2 * kMiB);
  ASSERT_TRUE(c.ok()) << c.status();
  Fill(*c, 2 * kMiB, 3);
  auto b = exporter.a->Allocate(kMiB);
  ASSERT_TRUE(b.ok()) << b.status();
  auto other = exporter.a->Export(*b);
  ASSERT_TRUE(other.ok()) << other.status();
  auto r = importer->Import(*stale);
  EXPECT_FALSE(r.ok()) << "a stale description imported memory";
  if (r.ok()) {
    importer->Fill(r->ptr, r->bytes, 9);
    (void)importer->Close(r->ptr);
  }
  EXPECT_TRUE(Says(r.status(), "stale")) << r.status();
  EXPECT_EQ(Wrong(*c, 2 * kMiB, 3), 0u) << "the private block was written";
  EXPECT_EQ(importer->BytesImported(), 0u);

  // A token that is not the export's.
  auto forged = importer->Import(Edited(*other, kTokenField, 0x1234567, 4));
  EXPECT_TRUE(absl::IsFailedPrecondition(forged.status())) << forged.status();
  EXPECT_TRUE(Says(forged.status(), "stale")) << forged.status();

  // Imported and closed, then freed: over as well.
  auto closed = importer->Import(*other);
  ASSERT_TRUE(closed.ok()) << closed.status();
  GPUALLOC_ASSERT_OK(importer->Close(closed->ptr));
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*b));
  auto late = importer->Import(*other);
  EXPECT_FALSE(late.ok());
  EXPECT_TRUE(Says(late.status(), "stale")) << late.status();

  // Freed while imported (held), closed, released: over too.
  auto d = exporter.a->Allocate(kMiB);
  ASSERT_TRUE(d.ok());
  auto held = exporter.a->Export(*d);
  ASSERT_TRUE(held.ok());
  auto open = importer->Import(*held);
  ASSERT_TRUE(open.ok()) << open.status();
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*d));
  EXPECT_GT(exporter.a->GetStats().bytes_held_for_importers, 0u);
  // Still exported while held: a second importer may open it.
  auto again = importer->Import(*held);
  ASSERT_TRUE(again.ok()) << again.status();
  GPUALLOC_ASSERT_OK(importer->Close(again->ptr));
  GPUALLOC_ASSERT_OK(importer->Close(open->ptr));
  GPUALLOC_ASSERT_OK(exporter.a->Trim());
  EXPECT_EQ(exporter.a->GetStats().bytes_held_for_importers, 0u);
  auto gone = importer->Import(*held);
  EXPECT_FALSE(gone.ok());
  EXPECT_TRUE(Says(gone.status(), "stale")) << gone.status();

  EXPECT_EQ(importer->BytesImported(), 0u);
  GPUALLOC_EXPECT_OK(exporter.a->Deallocate(*c));
  GPUALLOC_EXPECT_OK(exporter.a->Validate());
}

// The checksum is no key: a description edited to name more than its
// allocation is refused by the bounds of what its handle opened.
TEST_P(IpcLifetimeTest, EditedDescriptionsCannotReachPastTheAllocation) {
  Process exporter = MakeProcess(kind());
  std::unique_ptr<Importer> importer = MakeImporter(kind(), where());
  auto block = exporter.a->Allocate(2 * kMiB);
  ASSERT_TRUE(block.ok());
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok()) << description.status();
  const int descriptors = importer->Descriptors();
  std::vector<std::string> edits = {
      Edited(*description, kBytesField, kGiB),
      Edited(*description, kBytesField, UINT64_MAX),
      Edited(*description, kOffsetField, 100 * kMiB),
  };
  if (!ipc_handle()) {
    // Kind 2: the mapping's size, and the block with it.
    std::string bigger = Edited(*description, kFirstMappingBytes, kGiB);
    edits.push_back(Edited(bigger, kBytesField, kGiB - kMiB));
  }
  for (const std::string& edit : edits) {
    auto r = importer->Import(edit);
    EXPECT_FALSE(r.ok()) << "an edited description imported " << r->bytes
                         << " bytes";
    if (r.ok()) (void)importer->Close(r->ptr);
  }
  EXPECT_EQ(importer->BytesImported(), 0u);
  EXPECT_EQ(importer->Descriptors(), descriptors);
  // The description as exported still imports.
  auto r = importer->Import(*description);
  ASSERT_TRUE(r.ok()) << r.status();
  GPUALLOC_EXPECT_OK(importer->Close(r->ptr));
  GPUALLOC_EXPECT_OK(exporter.a->Deallocate(*block));
}

// A held block keeps the stream it was freed on until it is released;
// ReleaseStream renames that too, so nothing is recorded on the destroyed
// stream and the allocator keeps working.
TEST_P(IpcLifetimeTest, ReleaseStreamCoversHeldBlocks) {
  Process exporter = MakeProcess(kind());
  std::unique_ptr<Importer> importer = MakeImporter(kind(), where());
  const Stream s(7), t(8);
  // Two streams in use.
  auto warm = exporter.a->Allocate(kMiB, t);
  ASSERT_TRUE(warm.ok());
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*warm, t));
  auto block = exporter.a->Allocate(2 * kMiB, s);
  ASSERT_TRUE(block.ok());
  exporter.sim->Use(s, reinterpret_cast<std::uintptr_t>(*block), 2 * kMiB);
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok()) << description.status();
  auto imported = importer->Import(*description);
  ASSERT_TRUE(imported.ok()) << imported.status();
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*block, s));  // held
  GPUALLOC_ASSERT_OK(exporter.a->ReleaseStream(s));
  exporter.sim->DestroyStream(s);
  GPUALLOC_ASSERT_OK(importer->Close(imported->ptr));
  GPUALLOC_EXPECT_OK(exporter.a->Trim());
  EXPECT_EQ(exporter.a->GetStats().bytes_held_for_importers, 0u);
  for (int i = 0; i < 4; ++i) {
    auto p = exporter.a->Allocate(2 * kMiB, t);
    ASSERT_TRUE(p.ok()) << p.status();
    GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*p, t));
  }
  GPUALLOC_EXPECT_OK(exporter.a->Trim());
  EXPECT_EQ(exporter.sim->calls_on_destroyed_streams(), 0u);
  GPUALLOC_EXPECT_OK(exporter.a->Validate());
}

// Blocks held for importers that all closed them go back before the limit
// refuses: at an allocation (platform mode) and at SetLimit (every mode).
TEST_P(IpcLifetimeTest, ClosedHeldBlocksGoBackAtTheLimitAndAtSetLimit) {
  Process exporter = MakeProcess(kind());
  std::unique_ptr<Importer> importer = MakeImporter(kind(), where());
  const auto hold_and_close = [&]() -> void* {
    auto block = exporter.a->Allocate(40 * kMiB);
    EXPECT_TRUE(block.ok()) << block.status();
    if (!block.ok()) return nullptr;
    auto description = exporter.a->Export(*block);
    EXPECT_TRUE(description.ok()) << description.status();
    auto imported = importer->Import(*description);
    EXPECT_TRUE(imported.ok()) << imported.status();
    EXPECT_TRUE(exporter.a->Deallocate(*block).ok());
    if (imported.ok()) {
      EXPECT_TRUE(importer->Close(imported->ptr).ok());
    }
    return *block;
  };
  ASSERT_NE(hold_and_close(), nullptr);
  auto again = exporter.a->Allocate(40 * kMiB);
  ASSERT_TRUE(again.ok()) << again.status();
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*again));
  ASSERT_NE(hold_and_close(), nullptr);
  GPUALLOC_EXPECT_OK(exporter.a->SetLimit(32 * kMiB));
  const Stats s = exporter.a->GetStats();
  EXPECT_EQ(s.bytes_held_for_importers, 0u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  GPUALLOC_EXPECT_OK(exporter.a->Validate());
}

// A failed import gives back everything it took: a handle whose release
// failed is released on the way out.
TEST_P(IpcLifetimeTest, AFailedImportLeaksNothing) {
  Process exporter = MakeProcess(kind());
  std::unique_ptr<Importer> importer = MakeImporter(kind(), where());
  auto block = exporter.a->Allocate(4 * kMiB);
  ASSERT_TRUE(block.ok());
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok()) << description.status();
  const int descriptors = importer->Descriptors();
  const SimOp faults[] = {SimOp::kReleasePhysical, SimOp::kMap,
                          SimOp::kSetAccess, SimOp::kImportPhysical,
                          SimOp::kOpenIpcHandle};
  for (SimOp op : faults) {
    importer->Fail(op, 1);
    auto r = importer->Import(*description);
    if (r.ok()) {
      // (A call this kind of import does not make.)
      GPUALLOC_EXPECT_OK(importer->Close(r->ptr));
      importer->Fail(op, 0);
      continue;
    }
    EXPECT_TRUE(Says(r.status(), "injected fault")) << r.status();
    EXPECT_EQ(importer->Descriptors(), descriptors) << SimOpName(op);
    EXPECT_EQ(importer->ReservedAddress(), 0u) << SimOpName(op);
    EXPECT_EQ(importer->BytesImported(), 0u);
  }
  // Nobody has it open: freed at once.
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*block));
  EXPECT_EQ(exporter.a->GetStats().bytes_held_for_importers, 0u);
  EXPECT_EQ(exporter.a->GetStats().bytes_in_use, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, IpcLifetimeTest,
    ::testing::Combine(::testing::Values(Kind::kSeparate, Kind::kExpandable,
                                         Kind::kPreallocated, Kind::kPlatform),
                       ::testing::Values(Where::kHere, Where::kForked)),
    ParamName);

class IpcLifetimeWhereTest : public ::testing::TestWithParam<Where> {};

std::string WhereName(const ::testing::TestParamInfo<Where>& info) {
  return info.param == Where::kHere ? "here" : "forked";
}

// A held block whose release the device refuses stays held and counted, and
// goes at a later call; a freed exported block the device refused to free
// stays exported.
TEST_P(IpcLifetimeWhereTest, PlatformHeldBlockSurvivesARefusedFree) {
  Process exporter = MakeProcess(Kind::kPlatform);
  std::unique_ptr<Importer> importer =
      MakeImporter(Kind::kPlatform, GetParam());
  auto block = exporter.a->Allocate(4 * kMiB);
  ASSERT_TRUE(block.ok());
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok());
  auto imported = importer->Import(*description);
  ASSERT_TRUE(imported.ok()) << imported.status();
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*block));
  GPUALLOC_ASSERT_OK(importer->Close(imported->ptr));
  const std::uint64_t held = exporter.a->GetStats().bytes_held_for_importers;
  EXPECT_GE(held, 4 * kMiB);
  exporter.sim->FailNthCall(SimOp::kFree, 1, absl::InternalError("refused"));
  const absl::Status trimmed = exporter.a->Trim();
  EXPECT_FALSE(trimmed.ok()) << "a refused release went unreported";
  Stats s = exporter.a->GetStats();
  EXPECT_EQ(s.bytes_held_for_importers, held) << "the held block was lost";
  EXPECT_EQ(s.bytes_in_use, held);
  GPUALLOC_EXPECT_OK(exporter.a->Validate());
  GPUALLOC_ASSERT_OK(exporter.a->Trim());
  s = exporter.a->GetStats();
  EXPECT_EQ(s.bytes_held_for_importers, 0u);
  EXPECT_EQ(s.bytes_in_use, 0u);

  // Exported, nobody importing, and the free refused: still live and still
  // exported (the same description imports).
  auto live = exporter.a->Allocate(4 * kMiB);
  ASSERT_TRUE(live.ok());
  auto first = exporter.a->Export(*live);
  ASSERT_TRUE(first.ok());
  exporter.sim->FailNthCall(SimOp::kFree, 1, absl::InternalError("refused"));
  EXPECT_FALSE(exporter.a->Deallocate(*live).ok());
  auto second = exporter.a->Export(*live);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, *first);
  auto reopened = importer->Import(*first);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  GPUALLOC_ASSERT_OK(importer->Close(reopened->ptr));
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*live));
  EXPECT_EQ(exporter.a->GetStats().bytes_in_use, 0u);
  GPUALLOC_EXPECT_OK(exporter.a->Validate());
}

// Sleep gives a tag's memory back: not while a block of it is shared.
TEST_P(IpcLifetimeWhereTest, SleepRefusesATagWithAnExportedBlock) {
  Process exporter = MakeProcess(Kind::kExpandable);
  std::unique_ptr<Importer> importer =
      MakeImporter(Kind::kExpandable, GetParam());
  constexpr Tag kTag = 5;
  auto block = exporter.a->Allocate(2 * kMiB, Stream(), 0, kTag);
  ASSERT_TRUE(block.ok()) << block.status();
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok()) << description.status();
  auto imported = importer->Import(*description);
  ASSERT_TRUE(imported.ok()) << imported.status();
  auto slept = exporter.a->Sleep(kTag);
  EXPECT_TRUE(absl::IsFailedPrecondition(slept.status())) << slept.status();
  EXPECT_TRUE(Says(slept.status(), "exported")) << slept.status();
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*block));  // held
  slept = exporter.a->Sleep(kTag);
  EXPECT_TRUE(absl::IsFailedPrecondition(slept.status())) << slept.status();
  EXPECT_TRUE(Says(slept.status(), "held for importers")) << slept.status();
  // Still shared.
  importer->Fill(imported->ptr, 4096, 4);
  EXPECT_EQ(Wrong(*block, 4096, 4), 0u);
  GPUALLOC_ASSERT_OK(importer->Close(imported->ptr));
  // Closed by every importer: released first, then the tag sleeps.
  auto now = exporter.a->Sleep(kTag);
  GPUALLOC_EXPECT_OK(now.status());
  GPUALLOC_EXPECT_OK(exporter.a->Wake(kTag));
  const Stats s = exporter.a->GetStats();
  EXPECT_EQ(s.bytes_held_for_importers, 0u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  GPUALLOC_EXPECT_OK(exporter.a->Validate());
}

// An expandable import whose FreeAddress failed closes on the next try
// (the Unmap is not made twice), and its exporter's block is free at once.
TEST_P(IpcLifetimeWhereTest, CloseImportIsRetriedAfterAFailedAddressFree) {
  Process exporter = MakeProcess(Kind::kExpandable);
  std::unique_ptr<Importer> importer =
      MakeImporter(Kind::kExpandable, GetParam());
  auto block = exporter.a->Allocate(2 * kMiB);
  ASSERT_TRUE(block.ok());
  auto description = exporter.a->Export(*block);
  ASSERT_TRUE(description.ok());
  auto imported = importer->Import(*description);
  ASSERT_TRUE(imported.ok()) << imported.status();
  importer->Fail(SimOp::kFreeAddress, 1);
  const absl::Status failed = importer->Close(imported->ptr);
  EXPECT_FALSE(failed.ok());
  GPUALLOC_EXPECT_OK(importer->Close(imported->ptr));
  EXPECT_EQ(importer->BytesImported(), 0u);
  EXPECT_EQ(importer->ReservedAddress(), 0u);
  GPUALLOC_ASSERT_OK(exporter.a->Deallocate(*block));
  EXPECT_EQ(exporter.a->GetStats().bytes_held_for_importers, 0u);
  EXPECT_EQ(exporter.a->GetStats().bytes_in_use, 0u);
}

INSTANTIATE_TEST_SUITE_P(Where, IpcLifetimeWhereTest,
                         ::testing::Values(Where::kHere, Where::kForked),
                         WhereName);

}  // namespace
}  // namespace gpualloc::testing
