// SPDX-License-Identifier: Apache-2.0
// gpualloc/core/config.h: configuration the way runtimes pass it.
//
// Three sources, in order of precedence:
//   1. options given by the program: a ConfigOverrides whose fields are set,
//      or a configuration string "key=value[,key=value...]" parsed into one;
//   2. the environment: GPUALLOC_* variables, then their JAX/XLA/TF aliases
//      and PyTorch's allocator configuration (one level, below GPUALLOC_*);
//   3. the defaults: JAX's (BFC, preallocate 75% of total memory), or with
//      Conventions::kPytorch (gpualloc_create_pytorch, the PyTorch hook)
//      PyTorch's (grow on demand, up to the whole device).
// Parsing is strict everywhere: a bad value, an unknown key, a repeated key or
// two sources that conflict at the same level (XLA_CLIENT_MEM_FRACTION and
// XLA_PYTHON_CLIENT_MEM_FRACTION both set) is InvalidArgument naming the
// variable or key the user set, the value as written ("4KiB", not 4096) and
// how to fix it. Nothing is ever silently ignored: what only warns (PyTorch
// keys gpualloc cannot honour, XLA_PYTHON_CLIENT_* names JAX does not have)
// is a line in Config::warnings and on stderr.
//
// Keys of the configuration string and their variables:
//   allocator     GPUALLOC_ALLOCATOR     bfc|platform|async
//                 alias XLA_PYTHON_CLIENT_ALLOCATOR (default|bfc|platform|
//                 cuda_async|address; address is platform)
//   preallocate   GPUALLOC_PREALLOCATE   true|false|1|0
//                 alias XLA_PYTHON_CLIENT_PREALLOCATE
//   mem_fraction  GPUALLOC_MEM_FRACTION  (0, 1] of TOTAL memory
//                 aliases XLA_CLIENT_MEM_FRACTION,
//                 XLA_PYTHON_CLIENT_MEM_FRACTION
//   mem_limit     GPUALLOC_MEM_LIMIT     bytes with a unit: 40GiB, 512MB, 4096
//   expandable    GPUALLOC_EXPANDABLE    true|false|auto
//   arch          GPUALLOC_ARCH          auto or a profile name
//   gc            GPUALLOC_GC            true|false|1|0
//                 alias TF_ENABLE_GPU_GARBAGE_COLLECTION
//   gc_threshold  GPUALLOC_GC_THRESHOLD  0 (off) or a fraction T in (0, 1):
//                                        growing on demand, free memory goes
//                                        back before the reserve would pass
//                                        T x the limit instead of the limit,
//                                        PyTorch's
//                                        garbage_collection_threshold (bfc
//                                        only)
//   backend       GPUALLOC_BACKEND       auto|sim|cuda|hip
//   device_memory GPUALLOC_DEVICE_MEMORY sim only: the device's size, e.g. 80GB
//   cross_stream  GPUALLOC_CROSS_STREAM  when_complete|stream_wait|
//                                        before_growth|best_fit
//   growth        GPUALLOC_GROWTH        exact|doubling
//                                        (Options::growth_policy)
//   granularity   GPUALLOC_GRANULARITY   a size: region sizes are multiples
//                                        (default: the profile's)
//   min_block     GPUALLOC_MIN_BLOCK     a power of two >= 16 bytes: chunk
//                                        rounding (default: the profile's)
//   split_bound   GPUALLOC_SPLIT_BOUND   a size, 0 allowed: surplus kept
//                                        unsplit (max_internal_fragmentation)
//   size_divisions
//                 GPUALLOC_SIZE_DIVISIONS 0 (off) or a power of two N from 2
//                                        to 64: chunk sizes rounded up to N
//                                        steps per power of two, PyTorch's
//                                        roundup_power2_divisions (bfc only)
//   history       GPUALLOC_HISTORY       0 (off) or the number of events
//                                        the allocation history keeps, at
//                                        most 2^24 (bfc only)
//   front_cache   GPUALLOC_FRONT_CACHE   a size, 0 = off: the bytes of freed
//                                        blocks each stream's front cache
//                                        keeps for reuse at the same size
//                                        (all streams: 4x; bfc only)
//   name          GPUALLOC_NAME          a label
//   memory_kind   GPUALLOC_MEMORY_KIND   coarse|fine: AMD's coarse-grained
//                                        device memory (the default) or
//                                        fine-grained (hipExtMallocWithFlags
//                                        with hipDeviceMallocFinegrained);
//                                        only the HIP backend takes fine
//   host_memory_limit GPUALLOC_HOST_MEMORY_LIMIT a size: the limit of the
//                                        pinned host memory pool
//                                        (gpualloc/core/host_allocator.h;
//                                        default: the machine's physical
//                                        memory)
// PyTorch's allocator configuration: PYTORCH_ALLOC_CONF, or the older
// PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF (PyTorch reads the first set
// in that order; two set to different text are an error), "key:value[,...]",
// with PyTorch's spellings exactly (keys and True/False are case-sensitive):
//   expandable_segments:True|False      -> expandable=true|false
//   garbage_collection_threshold:T      -> gc_threshold=T, 0 < T < 1
//   per_process_memory_fraction:F       -> mem_fraction=F, 0 < F <= 1
//                                          (PyTorch's 0, no memory at all,
//                                          is refused)
//   backend:native|cudaMallocAsync|hipMallocAsync
//                                       -> allocator=bfc|async|async
//   roundup_power2_divisions:N          -> size_divisions=N, N a power of
//                                          two (1: size_divisions=0, no
//                                          rounding; above 64 is refused)
// Keys PyTorch has but gpualloc has no equivalent for (max_split_size_mb,
// max_non_split_rounding_mb, large_segment_size_mb, release_lock_on_*malloc,
// graph_capture_record_stream_reuse, throw_on_cudamalloc_oom,
// expandable_segments_reserve*) and roundup_power2_divisions' list form
// ("[256:1,>:8]") are ignored with a warning line each, saying why and the
// nearest gpualloc setting; the pinned_* keys (PyTorch's host allocator,
// which gpualloc does not replace) with a line saying they still take effect
// in PyTorch; a key PyTorch does not have with a line naming the closest one
// ("did you mean expandable_segments?"). Each line goes to stderr once per
// process and into Config::warnings. The mapped keys are aliases
// (ValueOrigin::kAlias, source "PYTORCH_CUDA_ALLOC_CONF expandable_segments:
// True"):
// an option or GPUALLOC_* variable beats them, and is then reported
// (" (overrides ...)" in the setting's source, and in a warning line) when
// the values differ; a JAX/XLA/TF alias that gives the same key another value
// is an error.
// Sizes take B, KB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (powers
// of 1024), or no unit (bytes).
//
// Parsing rules, the same for variables and the configuration string:
//  - values are trimmed of surrounding whitespace; an empty value is an error
//    naming the variable or key (unset the variable to take the default);
//  - keywords (true/false, bfc, sim, auto, profile names, units) are
//    case-insensitive; configuration-string keys are not;
//  - numbers are plain decimals ("0.75", ".9"): no sign, exponent, inf or nan;
//  - a size may have a fraction only when the result is a whole number of
//    bytes ("1.5GiB" yes, "1.5B" no); sizes beyond 64 bits are errors, and
//    mem_limit, device_memory and granularity must be more than 0;
//  - every variable that is set is parsed, even when a higher level decides
//    the value (a bad XLA_* alias is an error even with GPUALLOC_* set);
//  - a GPUALLOC_* variable that names no setting (GPUALLOC_PREALOCATE) is an
//    error naming it and the closest variable that does, like an unknown key
//    in the configuration string. The project's build and test scripts' own
//    variables (GPUALLOC_SKIP_DEPS, GPUALLOC_TEST_LABEL, GPUALLOC_TEST_SEED,
//    GPUALLOC_SOURCE_ROOT, GPUALLOC_ROOT, GPUALLOC_BUILD_DIR,
//    GPUALLOC_DEVICE_CHECK_ASSUME_GPU, GPUALLOC_DEVICE_CHECK_PREBUILT) are
//    allowed. An XLA_PYTHON_CLIENT_* variable JAX does not have
//    (XLA_PYTHON_CLIENT_PREALOCATE) is a warning line with the closest one,
//    not an error: that namespace is JAX's. The checks cover the
//    environments ProcessEnvironment and MapEnvironment return; another
//    EnvLookup can only be asked for names, so it is not checked;
//  - each key resolves on its own, but for mem_limit and mem_fraction, which
//    both set the limit: between them the higher level wins (a mem_fraction
//    the program gives beats a GPUALLOC_MEM_LIMIT in the environment, which
//    is then reported as overridden), and at one level mem_limit beats
//    mem_fraction (Options::memory_limit);
//  - an error found later, against the device (a granularity that is not a
//    multiple of the device's, a mem_limit above its memory: at
//    DeviceRegistry::Create on the simulator, at the device's first use on a
//    GPU), names the key or variable that set each side too, not the
//    Options field.
#ifndef GPUALLOC_CONFIG_H_
#define GPUALLOC_CONFIG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/allocator.h"

namespace gpualloc {

enum class BackendKind { kAuto, kSim, kCuda, kHip };
absl::string_view BackendKindName(BackendKind kind);

// The kind of device memory plain allocations get. AMD devices offer
// coarse-grained memory (coherent only at kernel boundaries; the fast default)
// and fine-grained memory (coherent with the host and peers during a kernel,
// slower). NVIDIA device memory has no such choice.
enum class MemoryKind { kCoarse, kFine };
absl::string_view MemoryKindName(MemoryKind kind);  // "coarse", "fine"

// Where an effective value came from.
enum class ValueOrigin {
  kDefault,   // nobody set it
  kOption,    // the program (ConfigOverrides or configuration string)
  kVariable,  // a GPUALLOC_* variable
  kAlias,     // a JAX/XLA/TF compatibility variable or a PyTorch key
};
absl::string_view ValueOriginName(ValueOrigin origin);

// Settings the program gives explicitly; unset fields fall through to the
// environment, then to the defaults.
struct ConfigOverrides {
  std::optional<AllocatorMode> mode;
  std::optional<bool> preallocate;
  std::optional<double> memory_fraction;
  std::optional<std::uint64_t> memory_limit;
  std::optional<Tristate> expandable;
  std::optional<std::string> arch;
  std::optional<bool> garbage_collection;
  std::optional<double> gc_threshold;
  std::optional<BackendKind> backend;
  std::optional<std::uint64_t> device_memory;
  std::optional<CrossStreamReuse> cross_stream_reuse;
  std::optional<GrowthPolicy> growth_policy;
  std::optional<std::uint64_t> growth_granularity;
  std::optional<std::uint64_t> min_block_size;
  std::optional<std::uint64_t> max_internal_fragmentation;
  std::optional<std::uint32_t> size_divisions;
  std::optional<std::uint64_t> history;
  std::optional<std::uint64_t> front_cache;
  std::optional<std::string> name;
  std::optional<MemoryKind> memory_kind;
  std::optional<std::uint64_t> host_memory_limit;
};

// One effective setting, for reports (gpualloc-info) and logs.
struct ConfigSetting {
  std::string key;     // the configuration-string key, e.g. "mem_fraction"
  std::string value;   // as it will be used, e.g. "0.75"
  ValueOrigin origin;  // which level decided it
  std::string source;  // the variable's name (and the entry for PyTorch's),
                       // "config string", "option", "default", or
                       // "default (PyTorch's)" where PyTorch's conventions
                       // changed the default; with " (overrides ...)" when it
                       // beat a PyTorch key of another value,
                       // " (overridden by ...)" on a mem_limit a higher
                       // mem_fraction beat
  // What the user set, for messages: the variable
  // ("GPUALLOC_GRANULARITY", "XLA_PYTHON_CLIENT_MEM_FRACTION"), "config
  // string granularity", "option granularity", or the PyTorch variable and
  // key ("PYTORCH_CUDA_ALLOC_CONF garbage_collection_threshold"); empty for
  // a default.
  std::string set_by;
  // The value as the user wrote it there, trimmed ("4KiB", "True"); a
  // program's option in configuration-string form. Empty for a default.
  std::string written;
};

// The resolved configuration: allocator Options plus what selects and sizes
// the device.
struct Config {
  Options options;
  BackendKind backend = BackendKind::kAuto;
  // Simulated device size in bytes; 0 takes the profile's.
  std::uint64_t device_memory = 0;
  // Coarse- or fine-grained device memory (HIP only; other backends refuse
  // fine at creation).
  MemoryKind memory_kind = MemoryKind::kCoarse;
  // The pinned host memory pool's limit in bytes (CreateHostAllocator's
  // Options::memory_limit); 0: DefaultHostMemoryLimit().
  std::uint64_t host_memory_limit = 0;
  // Every key above, in the order of the table, with its origin.
  std::vector<ConfigSetting> settings;
  // Warning lines about the environment, one per entry (a PyTorch key not
  // supported, with why; one for PyTorch's host allocator; one PyTorch does
  // not have, or an unknown XLA_PYTHON_CLIENT_* variable, with the closest
  // name; a PyTorch key overridden), also written to stderr, each once per
  // process.
  std::vector<std::string> warnings;
};

// The environment to read. The default reads the process environment
// (getenv); tests pass a map.
using EnvLookup = std::function<std::optional<std::string>(absl::string_view)>;
EnvLookup ProcessEnvironment();
EnvLookup MapEnvironment(std::map<std::string, std::string> variables);

// Parses "key=value[,key=value...]" (spaces around keys and values ignored;
// an empty string sets nothing). Unknown keys, repeated keys and bad values
// are InvalidArgument naming the key and the value.
absl::StatusOr<ConfigOverrides> ParseConfigString(absl::string_view text);

// Whose defaults the level below every option and variable follows.
enum class Conventions {
  // JAX's: preallocate 75% of total memory on first use.
  kJax,
  // PyTorch's, for gpualloc loaded as PyTorch's allocator: grow on demand
  // (preallocate=false) up to the whole device (mem_fraction=1), as PyTorch
  // has no cap unless per_process_memory_fraction or
  // torch.cuda.set_per_process_memory_fraction sets one. Everything a user
  // sets still wins; those settings show the source "default (PyTorch's)".
  kPytorch,
};

// Applies overrides > environment > defaults.
absl::StatusOr<Config> ResolveConfig(
    const ConfigOverrides& overrides, const EnvLookup& env,
    Conventions conventions = Conventions::kJax);
// ResolveConfig(ParseConfigString(text), env), the settings of the string
// named as written there.
absl::StatusOr<Config> ResolveConfig(
    absl::string_view config_string, const EnvLookup& env,
    Conventions conventions = Conventions::kJax);

// One configuration key, for help texts: the key, its GPUALLOC_* variable,
// a short description of its values and its aliases.
struct ConfigKeyInfo {
  absl::string_view key;       // "mem_fraction"
  absl::string_view variable;  // "GPUALLOC_MEM_FRACTION"
  absl::string_view values;    // "(0, 1] of total memory"
  // The JAX/XLA/TF variables that stand for it, if any.
  std::vector<absl::string_view> aliases;
};
// Every key, in the order of the table above (and of Config::settings).
std::vector<ConfigKeyInfo> ConfigKeys();

// "40GiB" -> 42949672960. InvalidArgument naming `what` on a bad value.
absl::StatusOr<std::uint64_t> ParseSize(absl::string_view text,
                                        absl::string_view what);

}  // namespace gpualloc

#endif  // GPUALLOC_CONFIG_H_
