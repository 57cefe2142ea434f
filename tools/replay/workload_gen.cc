// SPDX-License-Identifier: Apache-2.0
// tools/replay/workload_gen.cc: the three workload patterns of gpualloc-gen.
//
// Each pattern is a small program over a Writer that emits CSV rows and keeps
// the live set; sizes are transformer-shaped (a hidden size, tokens per
// micro-batch, layers) so that the blocks look like a real run's, not noise.
#include "tools/replay/workload_gen.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tools/cli.h"

namespace gpualloc::replay {
namespace {

// splitmix64: tiny, and the same numbers everywhere (std::*_distribution
// are not specified bit for bit).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi] (the modulo bias is far below anything that matters
  // here, and it is deterministic).
  std::uint64_t Range(std::uint64_t lo, std::uint64_t hi) {
    return lo + Next() % (hi - lo + 1);
  }
  bool Chance(std::uint64_t percent) { return Next() % 100 < percent; }

 private:
  std::uint64_t state_;
};

// Emits the CSV and keeps the live set. Streams other than 0 are renumbered
// 1, 2, ... in order of first use, as the trace parser numbers them, so the
// file says what a replay sees.
class Writer {
 public:
  explicit Writer(std::uint64_t scale_ppm) : scale_ppm_(scale_ppm) {
    out_ = "seq,action,addr_or_id,size,stream\n";
  }

  // `bytes` before scaling; at least 1 byte after it.
  std::uint64_t Alloc(std::uint64_t bytes, std::uint64_t stream) {
    const std::uint64_t size = Scaled(bytes);
    const std::uint64_t id = next_id_++;
    const std::uint64_t s = StreamNumber(stream);
    Row("alloc", id, size, s);
    live_.emplace(id, size);
    live_bytes_ += size;
    peak_ = std::max(peak_, live_bytes_);
    ++allocs_;
    return id;
  }

  // A page-locked host buffer whose work runs on `stream` (host_alloc);
  // `bytes` before scaling. Host ids share the device rows' counter (one id
  // space in the CSV); the live sets are apart.
  std::uint64_t HostAlloc(std::uint64_t bytes, std::uint64_t stream) {
    const std::uint64_t size = Scaled(bytes);
    const std::uint64_t id = next_id_++;
    Row("host_alloc", id, size, StreamNumber(stream));
    host_live_.emplace(id, size);
    host_live_bytes_ += size;
    host_peak_ = std::max(host_peak_, host_live_bytes_);
    ++host_allocs_;
    return id;
  }

  void HostFree(std::uint64_t id, std::uint64_t stream) {
    auto it = host_live_.find(id);
    if (it == host_live_.end()) {
      bad_free_ = true;
      return;
    }
    Row("host_free", id, it->second, StreamNumber(stream));
    host_live_bytes_ -= it->second;
    host_live_.erase(it);
  }

  void Free(std::uint64_t id, std::uint64_t stream) {
    auto it = live_.find(id);
    // Every pattern frees only what it allocated, once; GenerateTrace fails
    // if one does not.
    if (it == live_.end()) {
      bad_free_ = true;
      return;
    }
    Row("free", id, it->second, StreamNumber(stream));
    live_bytes_ -= it->second;
    live_.erase(it);
  }

  bool empty() const { return live_.empty() && host_live_.empty(); }
  bool bad_free() const { return bad_free_; }

  std::string Finish(GenSummary* summary) {
    if (summary != nullptr) {
      summary->ops = seq_;
      summary->allocs = allocs_;
      summary->streams = streams_.size() + (used_default_ ? 1 : 0);
      summary->peak_live_bytes = peak_;
      summary->host_allocs = host_allocs_;
      summary->peak_host_live_bytes = host_peak_;
    }
    return std::move(out_);
  }

 private:
  // `bytes` scaled, at least 1: bytes * ppm / 1e6 without overflow for any
  // size below 2^64 / 1e6 GiB.
  std::uint64_t Scaled(std::uint64_t bytes) const {
    const std::uint64_t scaled =
        bytes / 1000000 * scale_ppm_ + bytes % 1000000 * scale_ppm_ / 1000000;
    return std::max<std::uint64_t>(1, scaled);
  }

  std::uint64_t StreamNumber(std::uint64_t stream) {
    if (stream == 0) {
      used_default_ = true;
      return 0;
    }
    auto [it, inserted] = streams_.try_emplace(stream, streams_.size() + 1);
    return it->second;
  }

  void Row(absl::string_view action, std::uint64_t id, std::uint64_t size,
           std::uint64_t stream) {
    absl::StrAppend(&out_, seq_++, ",", action, ",", id, ",", size, ",", stream,
                    "\n");
  }

  std::uint64_t scale_ppm_;
  std::string out_;
  std::uint64_t seq_ = 0;
  std::uint64_t next_id_ = 0;
  std::uint64_t allocs_ = 0;
  std::uint64_t live_bytes_ = 0;
  std::uint64_t peak_ = 0;
  bool used_default_ = false;
  bool bad_free_ = false;
  std::uint64_t host_allocs_ = 0;
  std::uint64_t host_live_bytes_ = 0;
  std::uint64_t host_peak_ = 0;
  absl::flat_hash_map<std::uint64_t, std::uint64_t> live_;       // id -> size
  absl::flat_hash_map<std::uint64_t, std::uint64_t> host_live_;  // id -> size
  absl::flat_hash_map<std::uint64_t, std::uint64_t> streams_;  // raw -> number
};

constexpr std::uint64_t kCompute = 0;

// A few small buffers (norm statistics, bias gradients, library workspaces)
// allocated and freed around a kernel: sizes 512 B .. 2 MiB.
void SmallTemporaries(Rng& rng, Writer& w, std::uint64_t stream) {
  const std::uint64_t n = rng.Range(0, 3);
  std::vector<std::uint64_t> ids;
  for (std::uint64_t i = 0; i < n; ++i) {
    ids.push_back(w.Alloc(512 << rng.Range(0, 12), stream));
  }
  for (std::uint64_t id : ids) w.Free(id, stream);
}

// Layer-wise weight prefetch and offload (ZeRO-Infinity, FlexGen): the
// weights live on the host; copy stream 1 + l % K brings layer l's in, up to
// K layers ahead of compute, which frees them after use. The layer inputs are
// kept for the backward pass (activation checkpointing), which recomputes the
// layer, and offloads the weight gradient on a copy stream that then frees
// it.
void Prefetch(const GenOptions& o, Rng& rng, Writer& w) {
  const std::uint64_t layers = o.layers;
  const std::uint64_t k = o.copy_streams;
  constexpr std::uint64_t kHidden = 4096;
  constexpr std::uint64_t kWeights = 12 * kHidden * kHidden * 2;  // fp16
  constexpr std::uint64_t kEmbedding = 32000 * kHidden * 2;
  auto copy_stream = [k](std::uint64_t layer) { return 1 + layer % k; };
  // The offloaded state, in page-locked host memory for the whole run: per
  // layer its fp16 weights (what the prefetch copies in) and its optimizer
  // state (fp32 master weights and Adam's two moments, 6x the fp16 size),
  // which the host's optimizer step updates and the copy stream serving the
  // layer reads.
  std::vector<std::uint64_t> host_state;
  for (std::uint64_t l = 0; l < layers; ++l) {
    host_state.push_back(w.HostAlloc(kWeights, copy_stream(l)));
    host_state.push_back(w.HostAlloc(6 * kWeights, copy_stream(l)));
  }
  // Gradient staging: each weight gradient is copied out into a host buffer
  // on its copy stream; the host's optimizer consumes it up to K layers
  // behind, and then frees it (an offload runtime's pinned staging).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> staging;  // id, stream
  for (std::uint64_t step = 0; step < o.steps; ++step) {
    const std::uint64_t tokens = 1024 * rng.Range(2, 8);
    const std::uint64_t act = tokens * kHidden * 2;
    // The step's token ids (int64), staged on the host and copied in.
    const std::uint64_t batch = w.HostAlloc(tokens * 8, copy_stream(0));
    const std::uint64_t embedding = w.Alloc(kEmbedding, copy_stream(0));
    std::vector<std::uint64_t> weight(layers), saved(layers);
    // Forward.
    std::uint64_t fetched = 0;  // layers [0, fetched) were brought in
    std::uint64_t x = w.Alloc(act, kCompute);
    for (std::uint64_t l = 0; l < layers; ++l) {
      while (fetched < layers && fetched <= l + k) {
        weight[fetched] = w.Alloc(kWeights, copy_stream(fetched));
        ++fetched;
      }
      saved[l] = x;  // the layer's input, kept for the backward pass
      const std::uint64_t ln = w.Alloc(act, kCompute);
      const std::uint64_t qkv = w.Alloc(3 * act, kCompute);
      w.Free(ln, kCompute);
      const std::uint64_t attn = w.Alloc(act, kCompute);
      w.Free(qkv, kCompute);
      SmallTemporaries(rng, w, kCompute);
      const std::uint64_t h = w.Alloc(act, kCompute);
      w.Free(attn, kCompute);
      const std::uint64_t up = w.Alloc(4 * act, kCompute);
      const std::uint64_t gelu = w.Alloc(4 * act, kCompute);
      w.Free(up, kCompute);
      x = w.Alloc(act, kCompute);
      w.Free(gelu, kCompute);
      w.Free(h, kCompute);
      w.Free(weight[l], kCompute);
    }
    const std::uint64_t logits = w.Alloc(tokens * 32000 * 2, kCompute);
    w.HostFree(batch, copy_stream(0));
    w.Free(embedding, kCompute);
    w.Free(x, kCompute);
    std::uint64_t grad = w.Alloc(act, kCompute);
    w.Free(logits, kCompute);
    // Backward, last layer first: the prefetch runs the other way.
    fetched = 0;  // layers [layers - fetched, layers) were brought in
    for (std::uint64_t r = 0; r < layers; ++r) {
      const std::uint64_t l = layers - 1 - r;
      while (fetched < layers && fetched <= r + k) {
        const std::uint64_t j = layers - 1 - fetched;
        weight[j] = w.Alloc(kWeights, copy_stream(j));
        ++fetched;
      }
      // Recompute the layer from its saved input, then its gradients.
      const std::uint64_t qkv = w.Alloc(3 * act, kCompute);
      const std::uint64_t up = w.Alloc(4 * act, kCompute);
      SmallTemporaries(rng, w, kCompute);
      const std::uint64_t wgrad = w.Alloc(kWeights, kCompute);
      const std::uint64_t dup = w.Alloc(4 * act, kCompute);
      w.Free(up, kCompute);
      const std::uint64_t next_grad = w.Alloc(act, kCompute);
      w.Free(dup, kCompute);
      w.Free(qkv, kCompute);
      w.Free(grad, kCompute);
      w.Free(saved[l], kCompute);
      grad = next_grad;
      // The weights go back to the stream that brought them (the next
      // prefetch there reuses them); the gradient is copied out to the host
      // on a copy stream, which frees it.
      w.Free(weight[l], copy_stream(l));
      staging.emplace_back(w.HostAlloc(kWeights, copy_stream(l)),
                           copy_stream(l));
      w.Free(wgrad, copy_stream(l));
      if (staging.size() > k) {
        w.HostFree(staging.front().first, staging.front().second);
        staging.erase(staging.begin());
      }
    }
    w.Free(grad, kCompute);
    // The optimizer step ends with the last gradients.
    for (const auto& [id, stream] : staging) w.HostFree(id, stream);
    staging.clear();
  }
  for (std::uint64_t i = 0; i < host_state.size(); ++i) {
    w.HostFree(host_state[i], copy_stream(i / 2));
  }
}

// FSDP (PyTorch FullyShardedDataParallel, 8 ranks): the parameters, their
// fp32 optimizer state and the gradient shards stay sharded; each layer's
// full parameters are all-gathered on stream 1 one layer ahead of compute,
// which frees them after the layer's forward (and again after its backward);
// full gradients are reduce-scattered on stream 2, which frees them, and the
// gradient shards wait for the optimizer step.
void Fsdp(const GenOptions& o, Rng& rng, Writer& w) {
  const std::uint64_t layers = o.layers;
  constexpr std::uint64_t kAllGather = 1, kReduceScatter = 2;
  constexpr std::uint64_t kRanks = 8;
  constexpr std::uint64_t kHidden = 2048;
  constexpr std::uint64_t kParams = 12 * kHidden * kHidden * 2;  // bf16
  constexpr std::uint64_t kShard = kParams / kRanks;
  std::vector<std::uint64_t> shards(layers), state;
  for (std::uint64_t l = 0; l < layers; ++l) {
    shards[l] = w.Alloc(kShard, kCompute);
  }
  for (std::uint64_t step = 0; step < o.steps; ++step) {
    const std::uint64_t tokens = 1024 * rng.Range(2, 6);
    const std::uint64_t act = tokens * kHidden * 2;
    std::vector<std::uint64_t> gathered(layers), grad_shard(layers);
    std::vector<std::vector<std::uint64_t>> saved(layers);
    gathered[0] = w.Alloc(kParams, kAllGather);
    std::uint64_t x = w.Alloc(act, kCompute);
    for (std::uint64_t l = 0; l < layers; ++l) {
      if (l + 1 < layers) gathered[l + 1] = w.Alloc(kParams, kAllGather);
      const std::uint64_t qkv = w.Alloc(3 * act, kCompute);
      const std::uint64_t attn = w.Alloc(act, kCompute);
      SmallTemporaries(rng, w, kCompute);
      const std::uint64_t up = w.Alloc(4 * act, kCompute);
      const std::uint64_t y = w.Alloc(act, kCompute);
      // Kept for the backward: the input, the attention output and the MLP
      // input; the rest is recomputed or small.
      saved[l] = {x, attn, qkv};
      w.Free(up, kCompute);
      x = y;
      w.Free(gathered[l], kCompute);
    }
    std::uint64_t grad = w.Alloc(act, kCompute);
    w.Free(x, kCompute);
    const std::uint64_t last = layers - 1;
    gathered[last] = w.Alloc(kParams, kAllGather);
    for (std::uint64_t r = 0; r < layers; ++r) {
      const std::uint64_t l = last - r;
      if (l > 0) gathered[l - 1] = w.Alloc(kParams, kAllGather);
      const std::uint64_t dup = w.Alloc(4 * act, kCompute);
      const std::uint64_t full_grad = w.Alloc(kParams, kCompute);
      SmallTemporaries(rng, w, kCompute);
      const std::uint64_t next_grad = w.Alloc(act, kCompute);
      w.Free(dup, kCompute);
      for (std::uint64_t id : saved[l]) w.Free(id, kCompute);
      w.Free(grad, kCompute);
      grad = next_grad;
      w.Free(gathered[l], kCompute);
      grad_shard[l] = w.Alloc(kShard, kReduceScatter);
      w.Free(full_grad, kReduceScatter);
    }
    w.Free(grad, kCompute);
    // The optimizer step: Adam's two fp32 moments are created on the first
    // step and kept; an fp32 temporary per shard.
    if (state.empty()) {
      for (std::uint64_t l = 0; l < 2 * layers; ++l) {
        state.push_back(w.Alloc(2 * kShard, kCompute));
      }
    }
    for (std::uint64_t l = 0; l < layers; ++l) {
      const std::uint64_t tmp = w.Alloc(2 * kShard, kCompute);
      w.Free(tmp, kCompute);
      w.Free(grad_shard[l], kCompute);
    }
  }
  for (std::uint64_t id : state) w.Free(id, kCompute);
  for (std::uint64_t id : shards) w.Free(id, kCompute);
}

// An inference server: requests arrive on `streams` independent streams (up
// to two in flight on each, as continuous batching keeps them). A request's
// prefill allocates workspaces sized by its prompt and a first KV-cache block
// holding the prompt; decoding then runs in chunks of 32 tokens, each with
// small workspaces, and adds blocks of 64, 128, 256, then 512 tokens as the
// cache fills. At the end every block is freed on the request's stream.
void Serve(const GenOptions& o, Rng& rng, Writer& w) {
  const std::uint64_t layers = o.layers;
  constexpr std::uint64_t kHidden = 4096;
  constexpr std::uint64_t kKvDim = 1024;  // grouped-query attention
  const std::uint64_t kv_per_token = 2 * layers * kKvDim * 2;
  constexpr std::uint64_t kChunk = 32;
  constexpr std::uint64_t kPerStream = 2;
  struct Request {
    std::uint64_t stream = 0;
    std::uint64_t to_generate = 0;
    std::uint64_t tokens = 0;    // in the cache
    std::uint64_t capacity = 0;  // tokens the blocks hold
    std::uint64_t next_block = 64;
    std::vector<std::uint64_t> blocks;
  };
  std::vector<std::vector<Request>> active(o.streams);
  std::uint64_t started = 0;
  auto start = [&](std::uint64_t s) {
    Request req;
    req.stream = 1 + s;
    const std::uint64_t prompt = 16 * rng.Range(4, 256);  // 64 .. 4096
    req.to_generate = rng.Range(16, 1024);
    const std::uint64_t act = prompt * kHidden * 2;
    const std::uint64_t qkv = w.Alloc(3 * act, req.stream);
    const std::uint64_t up = w.Alloc(4 * act, req.stream);
    req.blocks.push_back(w.Alloc(prompt * kv_per_token, req.stream));
    w.Free(up, req.stream);
    w.Free(qkv, req.stream);
    req.tokens = req.capacity = prompt;
    active[s].push_back(std::move(req));
    ++started;
  };
  // One chunk of decoding; true when the request is done (and freed).
  auto decode = [&](Request& req) {
    const std::uint64_t n = std::min(kChunk, req.to_generate);
    if (req.tokens + n > req.capacity) {
      req.blocks.push_back(w.Alloc(req.next_block * kv_per_token, req.stream));
      req.capacity += req.next_block;
      req.next_block = std::min<std::uint64_t>(512, 2 * req.next_block);
    }
    const std::uint64_t logits = w.Alloc(32000 * 4, req.stream);
    SmallTemporaries(rng, w, req.stream);
    w.Free(logits, req.stream);
    req.tokens += n;
    req.to_generate -= n;
    if (req.to_generate > 0) return false;
    for (auto it = req.blocks.rbegin(); it != req.blocks.rend(); ++it) {
      w.Free(*it, req.stream);
    }
    return true;
  };
  for (;;) {
    // Streams that can act: some request in flight, or room for a new one.
    std::vector<std::uint64_t> ready;
    for (std::uint64_t s = 0; s < o.streams; ++s) {
      if (!active[s].empty() ||
          (started < o.steps && active[s].size() < kPerStream)) {
        ready.push_back(s);
      }
    }
    if (ready.empty()) break;
    const std::uint64_t s = ready[rng.Range(0, ready.size() - 1)];
    std::vector<Request>& reqs = active[s];
    if (started < o.steps && reqs.size() < kPerStream &&
        (reqs.empty() || rng.Chance(15))) {
      start(s);
      continue;
    }
    const std::uint64_t i = rng.Range(0, reqs.size() - 1);
    if (decode(reqs[i]))
      reqs.erase(reqs.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

}  // namespace

absl::StatusOr<GenPattern> ParseGenPattern(absl::string_view name) {
  if (name == "prefetch") return GenPattern::kPrefetch;
  if (name == "fsdp") return GenPattern::kFsdp;
  if (name == "serve") return GenPattern::kServe;
  return absl::InvalidArgumentError(absl::StrCat(
      "expected pattern prefetch, fsdp or serve, got \"", name, "\""));
}

absl::string_view GenPatternName(GenPattern pattern) {
  switch (pattern) {
    case GenPattern::kPrefetch:
      return "prefetch";
    case GenPattern::kFsdp:
      return "fsdp";
    case GenPattern::kServe:
      return "serve";
  }
  return "?";
}

namespace {

// A --seed, --steps, ... value: a whole number, of at least 1 but --seed's.
cli::Parser::ValueHandler WholeNumber(const std::string& flag,
                                      std::uint64_t* into) {
  return [flag, into](const std::string& v) {
    std::uint64_t n = 0;
    if (!absl::SimpleAtoi(v, &n) || (n == 0 && flag != "--seed")) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": expected a whole number",
                       flag == "--seed" ? "" : " of at least 1", ", got ",
                       gpualloc::cli::Quote(v)));
    }
    *into = n;
    return absl::OkStatus();
  };
}

}  // namespace

absl::StatusOr<GenCommand> ParseGenCommand(
    const std::vector<std::string>& args) {
  GenCommand c;
  bool have_pattern = false;
  cli::Parser parser;
  parser.Flag("--summary", &c.summary)
      .Value("--pattern",
             [&](const std::string& v) {
               absl::StatusOr<GenPattern> p = ParseGenPattern(v);
               if (!p.ok()) return p.status();
               c.options.pattern = *p;
               have_pattern = true;
               return absl::OkStatus();
             })
      .Value("-o",
             [&](const std::string& v) {
               c.output = v;
               return absl::OkStatus();
             })
      .Value("--scale", [&](const std::string& v) {
        if (!absl::SimpleAtod(v, &c.options.scale)) {
          return absl::InvalidArgumentError(
              absl::StrCat("--scale: expected a number, got \"", v, "\""));
        }
        return absl::OkStatus();
      });
  parser.Value("--seed", WholeNumber("--seed", &c.options.seed))
      .Value("--steps", WholeNumber("--steps", &c.options.steps))
      .Value("--requests", WholeNumber("--requests", &c.options.steps))
      .Value("--layers", WholeNumber("--layers", &c.options.layers))
      .Value("--copy-streams",
             WholeNumber("--copy-streams", &c.options.copy_streams))
      .Value("--streams", WholeNumber("--streams", &c.options.streams));
  absl::StatusOr<cli::Parsed> parsed = parser.Parse(args);
  if (!parsed.ok()) return parsed.status();
  if (*parsed == cli::Parsed::kHelp) {
    c.help = true;
    return c;
  }
  if (!have_pattern) {
    return absl::InvalidArgumentError(
        "expected --pattern prefetch, fsdp or serve");
  }
  return c;
}

absl::StatusOr<std::string> GenerateTrace(const GenOptions& options,
                                          GenSummary* summary) {
  GenOptions o = options;
  if (o.steps == 0) o.steps = o.pattern == GenPattern::kServe ? 48 : 4;
  if (o.layers == 0) o.layers = 32;
  if (o.layers > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected --layers in 1..1024, got ", o.layers));
  }
  if (o.steps > 100000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected --steps/--requests in 1..100000, got ", o.steps));
  }
  if (o.copy_streams < 1 || o.copy_streams > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected --copy-streams in 1..8, got ", o.copy_streams));
  }
  if (o.streams < 1 || o.streams > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected --streams in 1..64, got ", o.streams));
  }
  if (!(o.scale > 0) || o.scale > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected --scale in (0, 1000], got ", o.scale));
  }
  // Read once into parts per million: the sizes are integer arithmetic.
  const auto scale_ppm =
      static_cast<std::uint64_t>(std::llround(o.scale * 1e6));
  if (scale_ppm == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected --scale of at least 0.000001, got ", o.scale));
  }
  Rng rng(o.seed);
  Writer w(scale_ppm);
  switch (o.pattern) {
    case GenPattern::kPrefetch:
      Prefetch(o, rng, w);
      break;
    case GenPattern::kFsdp:
      Fsdp(o, rng, w);
      break;
    case GenPattern::kServe:
      Serve(o, rng, w);
      break;
  }
  if (!w.empty() || w.bad_free()) {
    return absl::InternalError(absl::StrCat("the ", GenPatternName(o.pattern),
                                            " pattern left allocations live"));
  }
  return w.Finish(summary);
}

}  // namespace gpualloc::replay
