// SPDX-License-Identifier: Apache-2.0
// core/report/torch_snapshot.cc: a Snapshot as PyTorch's memory snapshot pickle
// (gpualloc/core/torch_snapshot.h).
//
// The emitter writes pickle protocol 2 with the opcodes MemoryViz.js's own
// unpickler knows (PROTO, EMPTY_DICT/EMPTY_LIST with MARK .. SETITEMS/APPENDS
// in batches of 1000 as Python's pickler does, BININT1/BININT2/BININT/LONG1,
// BINUNICODE, NEWTRUE/NEWFALSE, BINFLOAT, TUPLE2, STOP) and no memo.
#include "gpualloc/core/torch_snapshot.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace gpualloc {
namespace {

class Pickler {
 public:
  Pickler() { out_ += "\x80\x02"; }  // PROTO 2

  void Int(std::int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      out_ += static_cast<char>(v);
    } else if (v >= 0 && v < 65536) {
      out_ += 'M';
      Bytes(static_cast<std::uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      Bytes(static_cast<std::uint64_t>(v), 4);
    } else {  // LONG1: little-endian two's complement, as short as it goes
      std::size_t n = 8;
      const auto u = static_cast<std::uint64_t>(v);
      while (n > 1) {
        const auto top = static_cast<std::uint8_t>(u >> (8 * (n - 1)));
        const auto next = static_cast<std::uint8_t>(u >> (8 * (n - 2)));
        if ((top == 0 && next < 0x80) || (top == 0xff && next >= 0x80)) {
          --n;
        } else {
          break;
        }
      }
      out_ += '\x8a';
      out_ += static_cast<char>(n);
      Bytes(u, n);
    }
  }
  // An unsigned 64-bit value (an address, a stream handle): LONG1 with a
  // ninth byte when the top bit is set, so that it reads back positive.
  void Uint(std::uint64_t v) {
    if (v <= static_cast<std::uint64_t>(INT64_MAX)) {
      Int(static_cast<std::int64_t>(v));
      return;
    }
    out_ += "\x8a\x09";
    Bytes(v, 8);
    out_ += '\0';
  }
  void Bool(bool v) { out_ += v ? '\x88' : '\x89'; }
  void Float(double v) {
    out_ += 'G';
    const auto bits = std::bit_cast<std::uint64_t>(v);
    for (int i = 7; i >= 0; --i) out_ += static_cast<char>(bits >> (8 * i));
  }
  // BINUNICODE; bytes that are not valid UTF-8 become '?'.
  void Str(absl::string_view s) {
    const std::string text = ValidUtf8(s);
    out_ += 'X';
    Bytes(text.size(), 4);
    out_ += text;
  }
  void Tuple2Ints(std::int64_t a, std::int64_t b) {
    Int(a);
    Int(b);
    out_ += '\x86';
  }

  // Containers: Begin, then items (a dict: key then value each), each
  // followed by Item(); End closes.
  void BeginDict() { Begin('}'); }
  void BeginList() { Begin(']'); }
  void Item() {
    if (++open_.back().items == kBatch) {
      out_ += open_.back().dict ? 'u' : 'e';
      out_ += '(';
      open_.back().items = 0;
    }
  }
  void End() {
    out_ += open_.back().dict ? 'u' : 'e';
    open_.pop_back();
  }
  void Key(absl::string_view key) { Str(key); }
  // One dict entry whose value is an unsigned integer, a string or a bool.
  void EntryInt(absl::string_view key, std::uint64_t v) {
    Key(key);
    Uint(v);
    Item();
  }
  void EntryStr(absl::string_view key, absl::string_view v) {
    Key(key);
    Str(v);
    Item();
  }
  void EntryBool(absl::string_view key, bool v) {
    Key(key);
    Bool(v);
    Item();
  }

  std::string Finish() {
    out_ += '.';
    return std::move(out_);
  }

 private:
  static constexpr int kBatch = 1000;
  struct Open {
    bool dict;
    int items;
  };
  void Begin(char empty) {
    out_ += empty;
    out_ += '(';
    open_.push_back(Open{empty == '}', 0});
  }
  void Bytes(std::uint64_t v, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out_ += static_cast<char>(v >> (8 * i));
  }
  static std::string ValidUtf8(absl::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      std::size_t n = c < 0x80   ? 1
                      : c < 0xc2 ? 0
                      : c < 0xe0 ? 2
                      : c < 0xf0 ? 3
                      : c < 0xf5 ? 4
                                 : 0;
      for (std::size_t k = 1; n != 0 && k < n; ++k) {
        if (i + k >= s.size() ||
            (static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80)
          n = 0;
      }
      if (n == 0) {
        out += '?';
        ++i;
      } else {
        out.append(s.data() + i, n);
        i += n;
      }
    }
    return out;
  }

  std::string out_;
  std::vector<Open> open_;
};

// A context as PyTorch's frames: one frame naming it, or none.
void Frames(Pickler& p, absl::string_view context) {
  p.BeginList();
  if (!context.empty()) {
    p.BeginDict();
    p.EntryStr("filename", "");
    p.EntryInt("line", 0);
    p.EntryStr("name", context);
    p.End();
    p.Item();
  }
  p.End();
}

struct Block {
  std::uint64_t address;
  std::uint64_t size;
  std::uint64_t requested;
  bool in_use;
  bool asleep;  // its memory given back (a tag asleep): not a segment's
};

// The blocks of one region: its chunks, the slabs of a private pool or of a
// tag replaced by that pool's own chunks inside them (when those tile the
// slabs exactly). A tag's slab asleep stays one block, asleep.
std::vector<Block> RegionBlocks(const RegionSnapshot& r,
                                const std::vector<ChunkSnapshot>& pooled) {
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < r.chunks.size();) {
    const ChunkSnapshot& c = r.chunks[i];
    if (!c.in_use || (c.pool == 0 && c.tag == 0) || c.asleep) {
      blocks.push_back(
          Block{c.address, c.size, c.requested, c.in_use, c.asleep});
      ++i;
      continue;
    }
    // A run of neighbouring slabs of one pool (or tag), awake.
    std::size_t j = i + 1;
    std::uint64_t end = c.address + c.size;
    while (j < r.chunks.size() && r.chunks[j].in_use &&
           r.chunks[j].pool == c.pool && r.chunks[j].tag == c.tag &&
           !r.chunks[j].asleep && r.chunks[j].address == end) {
      end += r.chunks[j].size;
      ++j;
    }
    auto it = std::lower_bound(
        pooled.begin(), pooled.end(), c.address,
        [](const ChunkSnapshot& p, std::uint64_t a) { return p.address < a; });
    std::vector<Block> inner;
    std::uint64_t at = c.address;
    for (; it != pooled.end() && it->address < end && it->address == at; ++it) {
      inner.push_back(
          Block{it->address, it->size, it->requested, it->in_use, false});
      at += it->size;
    }
    if (at == end) {
      blocks.insert(blocks.end(), inner.begin(), inner.end());
    } else {  // not a tiling: the slabs as they are
      for (std::size_t k = i; k < j; ++k) {
        const ChunkSnapshot& s = r.chunks[k];
        blocks.push_back(Block{s.address, s.size, s.requested, true, false});
      }
    }
    i = j;
  }
  return blocks;
}

// One segment: blocks [first, last) of a region, all awake and adjacent.
void Segment(
    Pickler& p, const std::vector<Block>& blocks, std::size_t first,
    std::size_t last, int device, bool expandable,
    const absl::flat_hash_map<std::uint64_t, const std::string*>& context) {
  std::uint64_t total = 0;
  std::uint64_t allocated = 0;
  std::uint64_t requested = 0;
  for (std::size_t k = first; k < last; ++k) {
    const Block& b = blocks[k];
    total += b.size;
    if (b.in_use) {
      allocated += b.size;
      requested += b.requested;
    }
  }
  p.BeginDict();
  p.EntryInt("device", static_cast<std::uint64_t>(device));
  p.EntryInt("address", blocks[first].address);
  p.EntryInt("total_size", total);
  p.EntryInt("allocated_size", allocated);
  p.EntryInt("active_size", allocated);
  p.EntryInt("requested_size", requested);
  p.EntryInt("stream", 0);
  p.EntryStr("segment_type", "large");
  p.Key("segment_pool_id");
  p.Tuple2Ints(0, 0);
  p.Item();
  p.EntryBool("is_expandable", expandable);
  p.Key("frames");
  Frames(p, "");
  p.Item();
  p.Key("blocks");
  p.BeginList();
  for (std::size_t k = first; k < last; ++k) {
    const Block& b = blocks[k];
    p.BeginDict();
    p.EntryInt("address", b.address);
    p.EntryInt("size", b.size);
    p.EntryInt("requested_size", b.in_use ? b.requested : 0);
    p.EntryStr("state", b.in_use ? "active_allocated" : "inactive");
    p.Key("frames");
    auto it = b.in_use ? context.find(b.address) : context.end();
    Frames(p, it == context.end() ? absl::string_view() : *it->second);
    p.Item();
    p.End();
    p.Item();
  }
  p.End();
  p.Item();
  p.End();
}

void Segments(Pickler& p, const Snapshot& s, int device, bool expandable) {
  std::vector<ChunkSnapshot> pooled;
  for (const PoolSnapshot& pool : s.pools) {
    for (const RegionSnapshot& r : pool.regions)
      pooled.insert(pooled.end(), r.chunks.begin(), r.chunks.end());
  }
  std::sort(pooled.begin(), pooled.end(),
            [](const ChunkSnapshot& a, const ChunkSnapshot& b) {
              return a.address < b.address;
            });
  // The context of each live block's allocation, from the history.
  absl::flat_hash_map<std::uint64_t, const std::string*> context;
  for (const HistoryEvent& e : s.history) {
    if (e.action == HistoryAction::kAlloc) context[e.address] = &e.context;
    if (e.action == HistoryAction::kFreeRequested) context.erase(e.address);
  }
  p.BeginList();
  for (const RegionSnapshot& r : s.regions) {
    // Memory given back is no segment's: as PyTorch lists only the mapped
    // parts of an expandable segment, a region is one segment per run of
    // blocks awake.
    const std::vector<Block> blocks = RegionBlocks(r, pooled);
    for (std::size_t first = 0; first < blocks.size();) {
      if (blocks[first].asleep) {
        ++first;
        continue;
      }
      std::size_t last = first + 1;
      while (last < blocks.size() && !blocks[last].asleep) ++last;
      Segment(p, blocks, first, last, device, expandable, context);
      p.Item();
      first = last;
    }
  }
  p.End();
}

void Trace(Pickler& p, const Snapshot& s) {
  p.BeginList();
  for (const HistoryEvent& e : s.history) {
    p.BeginDict();
    p.EntryStr("action", HistoryActionName(e.action));
    p.EntryInt("addr", e.address);
    if (e.action == HistoryAction::kOom) {
      p.EntryInt("device_free", e.address);
    }
    p.EntryInt("size", e.size);
    p.EntryInt("stream", e.stream);
    p.EntryInt("time_us", e.time_ns / 1000);
    p.EntryStr("compile_context", "N/A");
    p.EntryStr("user_metadata", "");
    p.Key("frames");
    Frames(p, e.context);
    p.Item();
    p.End();
    p.Item();
  }
  p.End();
}

// PyTorch's allocator_settings keys, with what gpualloc can say.
void Settings(Pickler& p, bool expandable) {
  p.BeginDict();
  p.EntryStr("PYTORCH_CUDA_ALLOC_CONF", "");
  p.Key("max_split_size");
  p.Int(-1);
  p.Item();
  p.Key("garbage_collection_threshold");
  p.Float(0.0);
  p.Item();
  p.EntryBool("expandable_segments", expandable);
  for (const char* key :
       {"release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
        "graph_capture_record_stream_reuse"}) {
    p.EntryBool(key, false);
  }
  p.EntryInt("pinned_num_register_threads", 1);
  p.Key("roundup_power2_divisions");
  p.BeginDict();
  for (std::uint64_t size = 1; size <= 32768; size *= 2) {
    p.EntryInt(std::to_string(size), 0);
  }
  p.End();
  p.Item();
  p.End();
}

}  // namespace

std::string TorchSnapshotPickle(const Snapshot& snapshot, int device) {
  device = std::max(device, 0);
  const bool expandable = snapshot.region_kind == RegionKind::kExpandable;
  Pickler p;
  p.BeginDict();
  p.Key("segments");
  Segments(p, snapshot, device, expandable);
  p.Item();
  p.Key("device_traces");
  p.BeginList();
  for (int d = 0; d < device; ++d) {
    p.BeginList();
    p.End();
    p.Item();
  }
  Trace(p, snapshot);
  p.Item();
  p.End();
  p.Item();
  p.Key("allocator_settings");
  Settings(p, expandable);
  p.Item();
  p.Key("external_annotations");
  p.BeginList();
  p.End();
  p.Item();
  p.End();
  return p.Finish();
}

}  // namespace gpualloc
