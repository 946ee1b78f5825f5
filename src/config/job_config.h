// JobConfig: the whole description of a `specrun run` job, as one struct. Every option is
// declared once, in src/config/option_table.h (section, key, member, help, validation); TOML
// reading, `--set section.key=value` overrides, the help text, the canonical TOML/JSON dumps
// and the configuration hash are all derived from that one table. Defaults are the member
// initializers below (the draft shape's: config/draft_shape.h).
//
// Precedence: defaults < job file < --set overrides (in command-line order). The merged result
// is validated once. Every user error throws specrun::Error with exit code 2 (kExitUsage) and a
// message naming the file:line:col or the --set argument, the key, and what is allowed.
//
// Paths (target.path, draft.path, data.prompts, job.output): relative paths written in the job
// file are resolved against the job file's directory, relative paths given with --set against
// the current directory. ConfigPath keeps the text as written next to the resolved path.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/draft_shape.h"

namespace specrun {

struct ConfigPath {
  std::string text;      // as written in the job file or --set ("" = not set)
  std::string resolved;  // absolute, lexically normalised ("" when text is "")
  bool empty() const { return text.empty(); }
  bool operator==(const ConfigPath&) const = default;
};

struct JobSection {
  std::string name = "specrun-job";
  ConfigPath output = {"result.h5", ""};  // the HDF5 result file
  std::int64_t seed = 1234;               // keys the counter-based RNG
  bool overwrite = false;                 // replace an existing result file (else: error)
};

struct TargetSection {
  ConfigPath path;             // Hugging Face model directory (config.json + *.safetensors)
  std::string dtype = "auto";  // auto | f32 | bf16 | f16: compute/storage type of the weights
};

struct DraftSection {
  std::string kind = "model";                 // a registered drafter (spec/drafter_registry.h)
  ConfigPath path;                            // Hugging Face model directory when kind = model
  std::string placement = "replicated";       // sharded | replicated
  std::string mtp_chain_hidden = "pre_norm";  // kind = mtp: pre_norm | shared_head_norm
  int ngram_max = 4;                          // kind = ngram: longest suffix looked up
  int ngram_min = 1;                          // kind = ngram: shortest suffix looked up
};

struct ParallelSection {
  int tp = 1;                   // tensor-parallel degree; world size must be divisible by it
  int ep = 0;                   // expert parallelism of mixture-of-experts models: 0 = tp, 1, or tp
  std::string backend = "cpu";  // cpu | cuda
  int threads = 0;              // CPU threads per rank; 0 = automatic
  double comm_timeout_s = 600;  // a collective that takes longer is an error
  bool cuda_graphs = true;      // CUDA: decode/verify/draft passes as captured step graphs
  bool cuda_pdl = true;  // CUDA (sm_90 on): step-graph kernels as programmatic dependent launches
  bool cuda_tensor_cores = false;  // CUDA: decode/verify projections (BF16) on the tensor cores
  bool cuda_fused_ops = true;  // CUDA: RoPE, RMSNorm and residual adds inside the kernels beside
                               // them (bitwise their compositions)
};

struct DataSection {
  ConfigPath prompts;            // HDF5 prompt file (see `specrun prepare`)
  int batch_size = 8;            // sequences decoded together on one tp group
  std::int64_t max_prompts = 0;  // use only the first N prompts; 0 = all
};

struct DecodeSection {
  std::vector<std::string> modes = {"baseline", "speculative"};  // run in this order
  int max_new_tokens = 64;
  DraftShape shape;          // draft_len, tree_top_k, tree_depth, tree_nodes (config/draft_shape.h)
  double temperature = 0.0;  // 0 = greedy
  int top_k = 0;             // 0 = off
  double top_p = 1.0;        // 1.0 = off
  bool stop_at_eos = true;
  // More tokens that finish a sequence, besides the target's EOS ids (config.json and
  // generation_config.json): ids ("128009") or token strings ("<|im_end|>", looked up in the
  // target's tokenizer).
  std::vector<std::string> stop_tokens;
  // "real", or a synthetic acceptance that overrides the verifier's (spec/synthetic_acceptance.h):
  // "fixed:L" or "rates:r1,r2,...", to measure the system's costs apart from the draft's quality.
  std::string acceptance = "real";
  // The run-time acceptance alarm (engine/acceptance_alarm.h): after this many verify steps
  // (summed over the sequences; 0 = off), an acceptance of 0 or a tau of 1.00 is a warning, and
  // a tau below min_tau (0 = off) stops the job.
  int alarm_steps = 32;
  double min_tau = 0.0;
};

// What a generation job (decode.modes = ["dataset"]) keeps; io/dataset_file.h, docs/datasets.md.
struct DatasetSection {
  std::string hidden_layers = "eagle3";  // eagle3 | none | comma list of layer ids and "final"
  std::string positions = "all";         // all | prompt | generated
  std::string dtype = "bf16";            // bf16 | f16 | f32: hidden states on disk
  int topk = 0;                          // keep the target's top-k next tokens; 0 = none
  std::string topk_dtype = "f16";        // f16 | f32 | bf16: their probabilities on disk
  std::string compression = "gzip";      // gzip | lz4 | none
  int level = 1;                         // gzip level
  int chunk_rows = 256;                  // positions per chunk of the hidden-state datasets
  bool continuous = true;                // continuous batching (false: static batches)
  double commit_s = 120.0;               // seal the open part file this often (seconds)
};

// Test-only knobs: they make a run slower on purpose so that tests of timing analysis
// (`specrun compare`) have a known regression to find. Never set them in real jobs.
struct DebugSection {
  double inject_delay_ms = 0.0;       // sleep this long in inject_phase on every step
  std::string inject_phase = "none";  // none | draft | verify | sample
  bool fingerprints = true;           // false: model files not hashed (scripts/fingerprint-cost.sh)
};

struct JobConfig {
  JobSection job;
  TargetSection target;
  DraftSection draft;
  ParallelSection parallel;
  DataSection data;
  DecodeSection decode;
  DatasetSection dataset;
  DebugSection debug;

  // Not options (not in the dumps or the hash): where the job came from, for the result file.
  std::string job_text;  // the job file's text exactly as read ("" when built in code)
  std::string job_path;  // the job file's path as given ("" when parsed from a string)
  std::vector<std::string> overrides;  // the --set arguments applied, in order
  // Where each option got its value: "set at job.toml:5:13", "set by --set decode.top_k=5";
  // absent: the default.
  std::map<std::string, std::string> origins;

  bool uses_mode(const std::string& mode) const;
  // origins[key], or "default".
  std::string origin(const std::string& key) const;
};

// Checks that the config layer leaves to the layers that own the meaning of an option (e.g.
// the drafter registry's per-kind keys), run right after the built-in validation while the job
// is parsed, so that errors name where values were set. May be empty.
using ConfigValidator = std::function<void(const JobConfig&)>;

// Reads and parses the job file at `path`, applies `overrides` ("section.key=value"),
// validates, and fills job_text/job_path/overrides. Throws Error (exit code 2).
JobConfig load_job_config(const std::string& path, const std::vector<std::string>& overrides = {},
                          const ConfigValidator& extra = {});

// The job file's text; throws Error (exit code 2) naming the path when it cannot be read.
std::string read_job_file(const std::string& path);
// The absolute directory of the job file: the base of the relative paths written in it.
std::string job_file_dir(const std::string& path);

// The same from text. `source_name` names the text in error messages ("job.toml:3:5");
// relative paths in the text are resolved against `base_dir` (the current directory when
// empty). Sets job_text = toml_text, job_path = source_name.
JobConfig parse_job_config(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides = {},
                           const std::string& base_dir = "", const ConfigValidator& extra = {});

// Checks every option's range/choices and the rules between options, then `extra`.
// parse_job_config calls it; call it after changing a JobConfig in code.
void validate_job_config(const JobConfig& config, const ConfigValidator& extra = {});

// Canonical TOML: every section and key in table order, resolved paths, no comments. Parsing it
// back gives a config with the same hash.
std::string to_toml(const JobConfig& config);
// {"section": {"key": value}} with resolved paths; the canonical form is to_json(c).dump().
nlohmann::json to_json(const JobConfig& config);
// FNV-1a 64 over the canonical JSON: equal for equal option values on any machine.
std::uint64_t config_hash(const JobConfig& config);
// "0x" + 16 lower-case hex digits.
std::string config_hash_hex(const JobConfig& config);

// Every key with its type, allowed values, default and help, grouped by section.
std::string config_help();

}  // namespace specrun
