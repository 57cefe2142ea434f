// SPDX-License-Identifier: Apache-2.0
// gpualloc/core/torch_snapshot.h: an allocator Snapshot with its history as the
// pickle PyTorch's torch.cuda.memory._dump_snapshot() writes, for
// https://pytorch.org/memory_viz (and any tool reading those files).
//
// The layout is the one of recent PyTorch 2.x releases (checked against the
// dumps in tests/data/traces, whose allocator_settings include
// graph_capture_record_stream_reuse, and against MemoryViz.js):
//   {'segments': [{'device', 'address', 'total_size', 'allocated_size',
//                  'active_size', 'requested_size', 'stream',
//                  'segment_type': 'large', 'segment_pool_id': (0, 0),
//                  'is_expandable', 'frames': [],
//                  'blocks': [{'address', 'size', 'requested_size',
//                              'state': 'active_allocated'|'inactive',
//                              'frames'}]}],
//    'device_traces': [[...], ..., [{'action', 'addr', 'size', 'stream',
//                                    'time_us', 'compile_context': 'N/A',
//                                    'user_metadata': '', 'frames'}]],
//    'allocator_settings': {...PyTorch's keys...},
//    'external_annotations': []}
// docs/DESIGN.md ("PyTorch memory snapshots") says how gpualloc's
// regions, chunks, pools and history map onto it. 'is_expandable' and
// allocator_settings' 'expandable_segments' come from
// Snapshot::region_kind; chunks asleep (a tag's memory given back) are in no
// segment, as PyTorch lists only the mapped parts of an expandable segment.
#ifndef GPUALLOC_TORCH_SNAPSHOT_H_
#define GPUALLOC_TORCH_SNAPSHOT_H_

#include <string>

#include "gpualloc/core/allocator.h"

namespace gpualloc {

// The pickle (protocol 2, only the opcodes MemoryViz.js reads) for
// `snapshot` on device index `device` (>= 0): device_traces has device + 1
// lists, the last one the history's events.
std::string TorchSnapshotPickle(const Snapshot& snapshot, int device);

}  // namespace gpualloc

#endif  // GPUALLOC_TORCH_SNAPSHOT_H_
