// SPDX-License-Identifier: Apache-2.0
// core/ipc/descriptors.h: taking a file descriptor from another process, as
// PyTorch's expandable segments do to share memory: pidfd_open on the
// exporter's pid, then pidfd_getfd (Linux 5.6), which needs ptrace
// permission over the exporter (the same user, and Yama's ptrace_scope 0 or
// a PR_SET_PTRACER from the exporter).
#ifndef GPUALLOC_CORE_IPC_DESCRIPTORS_H_
#define GPUALLOC_CORE_IPC_DESCRIPTORS_H_

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/layer.h"

namespace gpualloc::core {

// Descriptor `fd` of process `pid`, as a new close-on-exec descriptor of
// this process owned by the caller: a duplicate when `pid` is this process,
// else pidfd_open + pidfd_getfd. FailedPrecondition naming `call`, the pid,
// the descriptor and what the kernel said (no such process: the exporter
// exited; no permission: ptrace rules; no such descriptor: the description
// is stale), in this process too; InvalidArgument for other errors of a
// descriptor of this process.
absl::StatusOr<int> FetchDescriptor(absl::string_view call, pid_t pid, int fd);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_IPC_DESCRIPTORS_H_
