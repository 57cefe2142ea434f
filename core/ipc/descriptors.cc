// SPDX-License-Identifier: Apache-2.0
// core/ipc/descriptors.cc: pidfd_open + pidfd_getfd.
#include "core/ipc/descriptors.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace gpualloc::core {

absl::StatusOr<int> FetchDescriptor(absl::string_view call, pid_t pid, int fd) {
  if (pid == getpid()) {
    const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) {
      const int error = errno;
      const std::string message =
          absl::StrFormat("%s: descriptor %d of this process: %s", call, fd,
                          std::strerror(error));
      if (error == EBADF) {
        return absl::FailedPreconditionError(absl::StrCat(
            message,
            " (the exporter has no such descriptor: the description is "
            "stale)"));
      }
      return absl::InvalidArgumentError(message);
    }
    return copy;
  }
  const long pidfd = syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) {
    const int error = errno;
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: pidfd_open of the exporting process %d: %s%s", call, pid,
        std::strerror(error),
        error == ESRCH ? " (it has exited: what it exported is gone)" : ""));
  }
  const long copy = syscall(SYS_pidfd_getfd, static_cast<int>(pidfd), fd, 0);
  const int error = errno;
  close(static_cast<int>(pidfd));
  if (copy < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: pidfd_getfd of descriptor %d of process %d: %s%s", call, fd, pid,
        std::strerror(error),
        error == EPERM
            ? " (the importer needs ptrace permission over the exporter: "
              "the same user, and Yama's ptrace_scope 0 or a PR_SET_PTRACER "
              "from the exporter)"
        : error == EBADF ? " (the exporter has no such descriptor: the "
                           "description is stale)"
                         : ""));
  }
  return static_cast<int>(copy);
}

}  // namespace gpualloc::core
