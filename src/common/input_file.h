// Small input files read whole into memory: a model folder's config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json, chat templates and the like.
// They come from the user, so each is read only when it is a regular file (symbolic links
// followed: the Hugging Face cache links snapshots to blobs): a FIFO would block for ever,
// /dev/zero never ends and a directory reads as nothing. And only up to a size limit of its
// kind, far above any real file of that kind, since a parser's memory grows with the text.
#pragma once

#include <cstdint>
#include <string>

namespace specrun {

// A kind of input file: what errors call it, and its size limit.
struct InputFileKind {
  const char* what;  // "tokenizer file", "chat template", ...
  std::uint64_t max_bytes;
};

inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// The limits, each several times the largest real file of the kind (in parentheses).
inline constexpr InputFileKind kModelConfigFile{"model config",
                                                16 * kMiB};  // config.json (~0.1 MB)
inline constexpr InputFileKind kGenerationConfigFile{"generation config", 16 * kMiB};  // (~1 KB)
// tokenizer_config.json: the added-token table and chat templates (~2 MB).
inline constexpr InputFileKind kTokenizerConfigFile{"tokenizer config", 64 * kMiB};
inline constexpr InputFileKind kSpecialTokensMapFile{"special tokens map", 16 * kMiB};  // (~1 KB)
inline constexpr InputFileKind kTokenizerJsonFile{"tokenizer file",
                                                  128 * kMiB};  // tokenizer.json (~33 MB)
// sentencepiece tokenizer.model (~5 MB), llama2.c tokenizer.bin (~0.5 MB).
inline constexpr InputFileKind kTokenizerModelFile{"tokenizer file", 64 * kMiB};
// chat_template.jinja, additional_chat_templates/*.jinja, --template FILE (~40 KB).
inline constexpr InputFileKind kChatTemplateFile{"chat template", 4 * kMiB};
inline constexpr InputFileKind kChatTemplateJsonFile{"chat template", 16 * kMiB};  // .json
// model.safetensors.index.json (~9 MB for 90,000 tensors).
inline constexpr InputFileKind kWeightIndexFile{"weight index", 64 * kMiB};

// The bytes of `path`. Throws specrun::Error (exit code 2) naming the file and its kind when it
// cannot be opened, is not a regular file (naming what it is: a FIFO, a character device, a
// directory, ...), or is larger than kind.max_bytes (naming the limit). Never blocks on a FIFO.
std::string read_input_file(const std::string& path, const InputFileKind& kind);

// Whether anything is at `path` (a file, a FIFO, a device, a directory, or a link to one; a
// dangling link too): where a model folder's file is optional, a FIFO named like it must reach
// read_input_file and be refused there, not be skipped as absent.
bool input_exists(const std::string& path);

}  // namespace specrun
