// SPDX-License-Identifier: Apache-2.0
// tools/cuda/ipc_host_check.cc: gpualloc-ipc-host-check,
// tools/device-check.sh's leg for sharing memory between processes and
// page-locked host memory on a real GPU, through the Backend API of the CUDA
// backend the registry makes (backend=cuda, device 0).
//
//  1. Two processes (forked before either touches the driver, which does not
//     survive fork): the parent maps physical memory (ReserveAddress,
//     CreatePhysical, Map, SetAccess), writes a pattern, releases its handle,
//     exports the mapping (ExportMapping) and passes the descriptor over a
//     UNIX socket (SCM_RIGHTS); the child imports it (ImportPhysical), maps
//     it and reads the pattern back (CopyToHost). The same with an IPC handle
//     of a plain allocation (GetIpcHandle / OpenIpcHandle / CloseIpcHandle).
//  2. HostAllocate / HostFree of 1 MiB .. 64 MiB against malloc / free in the
//     same loop: median host microseconds per call.
// Markdown on stdout. Exit status 0 when every step that ran passed (a
// capability the device lacks, or no device at all, is reported as skipped),
// 1 otherwise.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpualloc/core/backend.h"
#include "gpualloc/core/config.h"
#include "gpualloc/runtime/registry.h"

namespace {

using gpualloc::Backend;
using gpualloc::DeviceAddress;

// What the parent sends the child: which test, the sizes, the IPC handle.
struct Request {
  int kind = 0;  // 0: quit, 1: import a descriptor (sent alongside), 2: IPC
  std::uint64_t bytes = 0;
  gpualloc::IpcHandle ipc;
};
// The child's answer: ok, or why not.
struct Reply {
  int ok = 0;
  char message[512] = {};
};

constexpr unsigned char kPattern = 0x5b;

bool SendRequest(int sock, const Request& r, int fd) {
  iovec io{const_cast<Request*>(&r), sizeof(r)};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  return sendmsg(sock, &msg, 0) == static_cast<ssize_t>(sizeof(r));
}

bool ReceiveRequest(int sock, Request* r, int* fd) {
  iovec io{r, sizeof(*r)};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(sock, &msg, MSG_WAITALL) != static_cast<ssize_t>(sizeof(*r))) {
    return false;
  }
  *fd = -1;
  if (cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c != nullptr && c->cmsg_type == SCM_RIGHTS) {
    std::memcpy(fd, CMSG_DATA(c), sizeof(int));
  }
  return true;
}

Reply Fail(const std::string& what, const absl::Status& s) {
  Reply r;
  std::snprintf(r.message, sizeof(r.message), "%s: %s", what.c_str(),
                std::string(s.message()).c_str());
  return r;
}

// Reads `bytes` at `address` and checks the pattern.
Reply CheckPattern(Backend& b, DeviceAddress address, std::uint64_t bytes) {
  std::vector<unsigned char> back(bytes);
  if (absl::Status s = b.CopyToHost(back.data(), address, bytes); !s.ok()) {
    return Fail("CopyToHost", s);
  }
  Reply r;
  r.ok = std::all_of(back.begin(), back.end(),
                     [](unsigned char c) { return c == kPattern; });
  if (!r.ok) std::snprintf(r.message, sizeof(r.message), "pattern differs");
  return r;
}

// The child's side of one request.
Reply Serve(Backend& b, const Request& req, int fd) {
  if (req.kind == 2) {
    absl::StatusOr<DeviceAddress> opened = b.OpenIpcHandle(req.ipc);
    if (!opened.ok()) return Fail("OpenIpcHandle", opened.status());
    Reply r = CheckPattern(b, *opened, req.bytes);
    if (absl::Status s = b.CloseIpcHandle(*opened); !s.ok() && r.ok) {
      r = Fail("CloseIpcHandle", s);
    }
    return r;
  }
  absl::StatusOr<gpualloc::PhysicalHandle> h = b.ImportPhysical(fd, req.bytes);
  close(fd);
  if (!h.ok()) return Fail("ImportPhysical", h.status());
  absl::StatusOr<DeviceAddress> va = b.ReserveAddress(req.bytes, 0);
  if (!va.ok()) return Fail("ReserveAddress", va.status());
  absl::Status s = b.Map(*va, req.bytes, *h);
  if (s.ok()) s = b.SetAccess(*va, req.bytes);
  Reply r = s.ok() ? CheckPattern(b, *va, req.bytes) : Fail("Map/SetAccess", s);
  (void)b.Unmap(*va, req.bytes);
  (void)b.ReleasePhysical(*h);
  (void)b.FreeAddress(*va, req.bytes);
  return r;
}

[[noreturn]] void Child(int sock, const gpualloc::Config& config) {
  std::shared_ptr<Backend> backend;
  Request req;
  int fd = -1;
  while (ReceiveRequest(sock, &req, &fd) && req.kind != 0) {
    Reply r;
    if (backend == nullptr) {
      absl::StatusOr<std::shared_ptr<Backend>> b =
          gpualloc::CreateBackend(config, 0);
      if (b.ok()) backend = *b;
      if (!b.ok()) r = Fail("CreateBackend in the child", b.status());
    }
    if (backend != nullptr) r = Serve(*backend, req, fd);
    if (write(sock, &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) break;
  }
  backend.reset();
  _exit(0);
}

// Sends `req` (and `fd`) and waits for the child's answer.
Reply Ask(int sock, const Request& req, int fd) {
  Reply r;
  if (!SendRequest(sock, req, fd)) {
    std::snprintf(r.message, sizeof(r.message), "could not reach the child");
    return r;
  }
  if (recv(sock, &r, sizeof(r), MSG_WAITALL) !=
      static_cast<ssize_t>(sizeof(r))) {
    std::snprintf(r.message, sizeof(r.message), "the child did not answer");
  }
  return r;
}

// Exports a mapping of `bytes` and has the child read it back.
bool ExportLeg(Backend& b, int sock, std::uint64_t bytes) {
  if (!b.info().capabilities.shareable_handles) {
    std::printf(
        "- export/import of a mapping: skipped (shareable_handles "
        "off)\n");
    return true;
  }
  absl::StatusOr<DeviceAddress> va = b.ReserveAddress(bytes, 0);
  absl::StatusOr<gpualloc::PhysicalHandle> h = b.CreatePhysical(bytes);
  absl::Status s = !va.ok() ? va.status() : h.status();
  if (s.ok()) s = b.Map(*va, bytes, *h);
  if (s.ok()) s = b.SetAccess(*va, bytes);
  const std::vector<unsigned char> pattern(bytes, kPattern);
  if (s.ok()) s = b.CopyFromHost(*va, pattern.data(), bytes);
  if (s.ok()) s = b.ReleasePhysical(*h);  // the mapping keeps the memory
  absl::StatusOr<int> fd = s.ok() ? b.ExportMapping(*va) : s;
  Reply r;
  if (fd.ok()) {
    Request req;
    req.kind = 1;
    req.bytes = bytes;
    r = Ask(sock, req, *fd);
    close(*fd);
  } else {
    r = Fail("export side", fd.status());
  }
  if (va.ok()) {
    (void)b.Unmap(*va, bytes);
    (void)b.FreeAddress(*va, bytes);
  }
  std::printf("- export/import of a %llu-byte mapping across processes: %s%s\n",
              static_cast<unsigned long long>(bytes),
              r.ok ? "ok" : "FAILED: ", r.ok ? "" : r.message);
  return r.ok != 0;
}

bool IpcLeg(Backend& b, int sock, std::uint64_t bytes) {
  if (!b.info().capabilities.ipc_handles) {
    std::printf("- IPC handle of an allocation: skipped (ipc_handles off)\n");
    return true;
  }
  absl::StatusOr<DeviceAddress> base = b.Allocate(bytes);
  const std::vector<unsigned char> pattern(bytes, kPattern);
  absl::Status s = base.status();
  if (s.ok()) s = b.CopyFromHost(*base, pattern.data(), bytes);
  absl::StatusOr<gpualloc::IpcHandle> handle =
      s.ok() ? b.GetIpcHandle(*base) : s;
  Reply r;
  if (handle.ok()) {
    Request req;
    req.kind = 2;
    req.bytes = bytes;
    req.ipc = *handle;
    r = Ask(sock, req, -1);
  } else {
    r = Fail("export side", handle.status());
  }
  if (base.ok()) (void)b.Free(*base);
  std::printf("- IPC handle of a %llu-byte allocation across processes: %s%s\n",
              static_cast<unsigned long long>(bytes),
              r.ok ? "ok" : "FAILED: ", r.ok ? "" : r.message);
  return r.ok != 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// HostAllocate / HostFree against malloc / free, median us per call.
bool HostLeg(Backend& b) {
  if (!b.info().capabilities.host_memory) {
    std::printf("\n- host memory: skipped (host_memory off)\n");
    return true;
  }
  using Clock = std::chrono::steady_clock;
  const auto us = [](Clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
  };
  std::printf(
      "\n| size | HostAllocate us | HostFree us | malloc us | free us "
      "|\n|---:|---:|---:|---:|---:|\n");
  constexpr int kRounds = 15;
  for (std::uint64_t size = std::uint64_t{1} << 20;
       size <= (std::uint64_t{64} << 20); size *= 2) {
    std::vector<double> alloc, release, m_alloc, m_release;
    for (int i = 0; i < kRounds; ++i) {
      Clock::time_point t0 = Clock::now();
      absl::StatusOr<void*> p = b.HostAllocate(size);
      Clock::time_point t1 = Clock::now();
      if (!p.ok()) {
        std::printf("- HostAllocate(%llu): FAILED: %s\n",
                    static_cast<unsigned long long>(size),
                    std::string(p.status().message()).c_str());
        return false;
      }
      absl::Status s = b.HostFree(*p);
      Clock::time_point t2 = Clock::now();
      if (!s.ok()) return false;
      void* m = std::malloc(size);
      Clock::time_point t3 = Clock::now();
      std::free(m);
      Clock::time_point t4 = Clock::now();
      alloc.push_back(us(t1 - t0));
      release.push_back(us(t2 - t1));
      m_alloc.push_back(us(t3 - t2));
      m_release.push_back(us(t4 - t3));
    }
    std::printf("| %llu MiB | %.1f | %.1f | %.2f | %.2f |\n",
                static_cast<unsigned long long>(size >> 20), Median(alloc),
                Median(release), Median(m_alloc), Median(m_release));
  }
  return true;
}

}  // namespace

int main() {
  gpualloc::Config config;
  config.backend = gpualloc::BackendKind::kCuda;
  int socks[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, socks) != 0) {
    std::perror("socketpair");
    return 1;
  }
  // Fork before the driver is touched: CUDA does not survive fork.
  const pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) {
    close(socks[0]);
    Child(socks[1], config);
  }
  close(socks[1]);
  const int sock = socks[0];
  std::printf("## Sharing between processes and host memory\n\n");
  bool ok = true;
  {
    absl::StatusOr<std::shared_ptr<Backend>> backend =
        gpualloc::CreateBackend(config, 0);
    if (!backend.ok()) {
      std::printf("- skipped: no CUDA device (%s)\n",
                  std::string(backend.status().message()).c_str());
    } else {
      Backend& b = **backend;
      const std::uint64_t bytes =
          std::max<std::uint64_t>(b.info().recommended_granularity, 2 << 20);
      ok &= ExportLeg(b, sock, bytes);
      ok &= IpcLeg(b, sock, bytes);
      ok &= HostLeg(b);
    }
  }
  (void)SendRequest(sock, Request{}, -1);  // kind 0: quit
  int status = 0;
  waitpid(child, &status, 0);
  close(sock);
  return ok ? 0 : 1;
}
