// Model fingerprints by content: which checkpoint a run used, told apart from another one at the
// same path. Every file of a model directory that decides what the model computes or how text
// becomes tokens (config.json, generation_config.json, tokenizer files, chat templates, every
// safetensors file and its index) is hashed whole with XXH3-64 (in 16 MiB pieces); a safetensors
// file's header (the 8-byte length and the JSON that names the tensors, their shapes and dtypes) is
// hashed on its own too, so that compare can say "same tensors, other values" (a retrained draft)
// apart from "other tensors" (another architecture). Hashing reads the files through a mapping that
// the loader has just read (the pages are in the page cache): on the 100M-parameter perf model it
// costs a few per cent of the load (docs/analysis.md, "Model fingerprints").
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace specrun {

struct ModelFileHash {
  std::string name;         // file name inside the model directory, "model.safetensors"
  std::uint64_t bytes = 0;  // size
  // "xxh3:<16 hex>" of the whole file: XXH3-64 of the XXH3-64 hashes (little-endian u64s) of
  // its 16 MiB pieces, hashed by the OpenMP threads in parallel. The same for any thread count.
  std::string content;
  std::string header;  // safetensors only: "xxh3:<16 hex>" of the length and JSON header
};

struct ModelFingerprint {
  // "xxh3:<16 hex>" over every file's name, size and content hash, in name order: equal for
  // two directories with the same relevant files, byte for byte. Without the weights' contents
  // (fingerprint_model(dir, false)): "xxh3-headers:<16 hex>", their headers standing in.
  std::string id;
  bool complete = true;              // every file's content hashed
  std::vector<ModelFileHash> files;  // sorted by name
  double seconds = 0;                // time spent hashing (reading included)
};

// True for the file names a fingerprint covers: *.safetensors, *.json (config, generation
// config, tokenizer, tokenizer config, special tokens, the safetensors index), *.jinja (chat
// templates) and tokenizer.model. Other files (README.md, .gitattributes, optimizer states) do
// not change what the model computes and are left out.
bool fingerprinted_file(const std::string& name);

// Hashes `dir`. `contents` false: safetensors files by size and header only (milliseconds;
// `specrun run` records that at the start and the whole contents when the job finishes, so that
// hashing never weighs on the load or the timed steps). Throws specrun::Error naming the
// directory or file when it cannot be read or has no config.json.
ModelFingerprint fingerprint_model(const std::string& dir, bool contents = true);

// XXH3-64 of `bytes` bytes as "xxh3:<16 hex>".
std::string xxh3_text(const void* data, std::size_t bytes);

// JSON: {"fingerprint", "complete", "files": [{"name", "bytes", "content"?, "header"?}],
// "hash_s"}; the models entry of a result file adds "path".
void to_json(nlohmann::json& j, const ModelFingerprint& f);

// What differs between two fingerprints' file lists, one phrase per file, in name order:
// "model.safetensors: values (same tensors)", "model.safetensors: tensors",
// "config.json: content", "tokenizer.json: added", "tokenizer.json: removed". `base` and `next`
// are the "files" arrays of the JSON form; each file is compared on what both sides have: the
// content hash, else the header hash, else the size (a file without a content hash whose
// header and size match is not a change: it cannot be told).
std::vector<std::string> describe_file_changes(const nlohmann::json& base,
                                               const nlohmann::json& next);

}  // namespace specrun
