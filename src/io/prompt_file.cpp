#include "io/prompt_file.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "common/build_info.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/hash.h"
#include "io/h5.h"

namespace specrun {

// Sharding ---------------------------------------------------------------------------------------

int64_t batch_count(int64_t n_prompts, int64_t batch_size) {
  SPEC_CHECK(batch_size >= 1, "batch size must be >= 1, got " << batch_size);
  SPEC_CHECK(n_prompts >= 0, "number of prompts must be >= 0, got " << n_prompts);
  return (n_prompts + batch_size - 1) / batch_size;
}

BatchRange batch_range(int64_t n_prompts, int64_t batch_size, int64_t batch) {
  int64_t n_batches = batch_count(n_prompts, batch_size);
  SPEC_CHECK(batch >= 0 && batch < n_batches,
             "batch " << batch << " does not exist (" << n_batches << " batches)");
  BatchRange r;
  r.batch = batch;
  r.first = batch * batch_size;
  r.count = std::min(batch_size, n_prompts - r.first);
  return r;
}

int batch_owner(int64_t batch, int dp) {
  SPEC_CHECK(dp >= 1 && batch >= 0, "batch_owner(" << batch << ", dp " << dp << ")");
  return static_cast<int>(batch % dp);
}

std::optional<BatchRange> shard_batch(int64_t n_prompts, int64_t batch_size, int dp_index, int dp,
                                      int64_t k) {
  SPEC_CHECK(dp >= 1 && dp_index >= 0 && dp_index < dp && k >= 0,
             "shard_batch: dp_index " << dp_index << " of dp " << dp << ", k " << k);
  int64_t b = dp_index + k * dp;
  if (b >= batch_count(n_prompts, batch_size)) return std::nullopt;
  return batch_range(n_prompts, batch_size, b);
}

// Reading ----------------------------------------------------------------------------------------

namespace {

// Offsets are validated in windows of this many values (512 KiB).
constexpr int64_t kOffsetWindow = 64 * 1024;

h5::Dataset open_column(const h5::Group& prompts, const std::string& name, bool want_strings) {
  h5::Dataset d = prompts.dataset(name);
  int rank = d.rank();
  if (want_strings) {
    SPEC_INPUT_CHECK(d.is_string() && rank == 1, d.where()
                                                     << " must be a 1-D string dataset; it is "
                                                     << rank << "-D " << d.type_text());
  } else {
    SPEC_INPUT_CHECK(
        d.type_class() == H5T_INTEGER && rank == 1,
        d.where() << " must be a 1-D integer dataset (int32 tokens, int64 offsets); it is " << rank
                  << "-D " << d.type_text());
  }
  return d;
}

void fnv1a(uint64_t& h, const void* data, size_t bytes) {
  h = fnv1a64(data, bytes, h);
}

}  // namespace

struct PromptReader::Impl {
  std::string path;
  h5::File file;
  h5::Group prompts;
  h5::Dataset tokens, offsets;
  std::optional<h5::Dataset> ids, categories, text;
  int64_t n = 0;
  int64_t n_tokens = 0;

  // Checks offsets[lo .. hi] (inclusive) given in `values`, with values[0] at index lo.
  void check_offsets(const std::vector<int64_t>& values, int64_t lo) const {
    for (size_t j = 1; j < values.size(); ++j) {
      int64_t prompt = lo + static_cast<int64_t>(j) - 1;
      SPEC_INPUT_CHECK(values[j] >= values[j - 1],
                       offsets.where()
                           << " is not monotone: offsets[" << prompt + 1 << "] = " << values[j]
                           << " < offsets[" << prompt << "] = " << values[j - 1] << " (prompt "
                           << prompt << "); rebuild the file with `specrun prepare`");
      SPEC_INPUT_CHECK(values[j] > values[j - 1],
                       path << ": prompt " << prompt << " is empty (offsets[" << prompt
                            << "] == offsets[" << prompt + 1 << "] == " << values[j] << " in "
                            << offsets.where() << "); every prompt needs at least one token");
    }
  }
};

PromptReader::PromptReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.file = h5::File::open(path, h5::File::Access::kReadOnly);
  const char* advice =
      "; create prompt files with `specrun prepare IN.jsonl OUT.h5`, or set the root attributes "
      "schema='specrun.prompts' and schema_version=1";
  SPEC_INPUT_CHECK(m.file.has_attr("schema"),
                   path << " has no 'schema' attribute: is it a specrun prompt file?" << advice);
  std::string schema = m.file.attr_string("schema");
  SPEC_INPUT_CHECK(schema == kPromptSchema, path << " has schema '" << schema << "', expected '"
                                                 << kPromptSchema << "'" << advice);
  int64_t version = m.file.attr_int("schema_version");
  SPEC_INPUT_CHECK(version >= 1 && version <= kPromptSchemaVersion,
                   path << " has prompt schema version " << version
                        << "; this specrun reads version " << kPromptSchemaVersion
                        << " (a newer specrun wrote it?)");
  SPEC_INPUT_CHECK(m.file.has("prompts"), path << ": group /prompts is missing" << advice);
  m.prompts = m.file.group("prompts");
  m.tokens = open_column(m.prompts, "tokens", false);
  m.offsets = open_column(m.prompts, "offsets", false);
  m.n_tokens = m.tokens.rows();
  int64_t n_offsets = m.offsets.rows();
  SPEC_INPUT_CHECK(n_offsets >= 1, m.offsets.where()
                                       << " is empty; it must hold N+1 values starting with 0");
  m.n = n_offsets - 1;
  for (auto [name, slot] : {std::pair{"id", &m.ids}, std::pair{"category", &m.categories},
                            std::pair{"text", &m.text}}) {
    if (!m.prompts.has(name)) continue;
    *slot = open_column(m.prompts, name, true);
    SPEC_INPUT_CHECK((*slot)->rows() == m.n, (*slot)->where()
                                                 << " has " << (*slot)->rows()
                                                 << " rows but /prompts/offsets describes " << m.n
                                                 << " prompts");
  }
  // Offsets, one window at a time (windows overlap by one value).
  int64_t first = m.offsets.read<int64_t>(0, 1)[0];
  SPEC_INPUT_CHECK(first == 0, m.offsets.where()
                                   << " starts with " << first << ", must start with 0");
  for (int64_t lo = 0; lo < m.n; lo += kOffsetWindow) {
    int64_t hi = std::min(m.n, lo + kOffsetWindow);
    m.check_offsets(m.offsets.read<int64_t>(lo, hi - lo + 1), lo);
  }
  int64_t last = m.offsets.read<int64_t>(m.n, 1)[0];
  SPEC_INPUT_CHECK(last == m.n_tokens, m.offsets.where()
                                           << " ends at " << last << " but " << m.tokens.where()
                                           << " holds " << m.n_tokens
                                           << " tokens; the last offset must equal the number of "
                                              "tokens (truncated or mismatched file?)");
}

PromptReader::~PromptReader() = default;
PromptReader::PromptReader(PromptReader&&) noexcept = default;
PromptReader& PromptReader::operator=(PromptReader&&) noexcept = default;

const std::string& PromptReader::path() const {
  return impl_->path;
}
int64_t PromptReader::size() const {
  return impl_->n;
}
int64_t PromptReader::total_tokens() const {
  return impl_->n_tokens;
}
bool PromptReader::has_ids() const {
  return impl_->ids.has_value();
}
bool PromptReader::has_categories() const {
  return impl_->categories.has_value();
}
bool PromptReader::has_text() const {
  return impl_->text.has_value();
}

std::vector<Prompt> PromptReader::read(int64_t first, int64_t count) const {
  const Impl& m = *impl_;
  SPEC_CHECK(first >= 0 && count >= 0 && first + count <= m.n,
             "prompts [" << first << ", " << first + count << ") are outside " << m.path
                         << ", which holds " << m.n << " prompts");
  std::vector<Prompt> out(static_cast<size_t>(count));
  if (count == 0) return out;
  std::vector<int64_t> off = m.offsets.read<int64_t>(first, count + 1);
  m.check_offsets(off, first);  // the file may have changed since it was opened
  SPEC_INPUT_CHECK(off.back() <= m.n_tokens,
                   m.offsets.where() << "[" << first + count << "] points past the tokens");
  std::vector<int32_t> tok = m.tokens.read<int32_t>(off[0], off.back() - off[0]);
  std::vector<std::string> ids, cats;
  if (m.ids) ids = m.ids->read_strings(first, count);
  if (m.categories) cats = m.categories->read_strings(first, count);
  for (int64_t i = 0; i < count; ++i) {
    Prompt& p = out[static_cast<size_t>(i)];
    p.index = first + i;
    p.id = m.ids ? ids[static_cast<size_t>(i)] : std::to_string(p.index);
    if (m.categories) p.category = cats[static_cast<size_t>(i)];
    p.tokens.assign(tok.begin() + (off[i] - off[0]), tok.begin() + (off[i + 1] - off[0]));
  }
  return out;
}

std::pair<int64_t, int64_t> PromptReader::longest(int64_t n) const {
  const Impl& m = *impl_;
  SPEC_CHECK(n >= 0 && n <= m.n,
             "longest(" << n << ") of " << m.path << " (" << m.n << " prompts)");
  int64_t best = 0, at = 0;
  for (int64_t lo = 0; lo < n; lo += kOffsetWindow) {
    const int64_t count = std::min(kOffsetWindow, n - lo);
    std::vector<int64_t> off = m.offsets.read<int64_t>(lo, count + 1);
    m.check_offsets(off, lo);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t len = off[static_cast<size_t>(i + 1)] - off[static_cast<size_t>(i)];
      if (len > best) {
        best = len;
        at = lo + i;
      }
    }
  }
  return {best, at};
}

std::string PromptReader::read_text(int64_t index) const {
  const Impl& m = *impl_;
  SPEC_CHECK(index >= 0 && index < m.n, "prompt " << index << " is outside " << m.path);
  if (!m.text) return "";
  return m.text->read_strings(index, 1)[0];
}

std::string PromptReader::root_attribute(const std::string& name) const {
  const Impl& m = *impl_;
  return m.file.has_attr(name) ? m.file.attr_string(name) : std::string();
}

std::string PromptReader::content_hash() const {
  const Impl& m = *impl_;
  // This seed is not FNV's offset basis (a digit short) but it is what every prompt file's
  // recorded hash was made with: keep it, or --resume would refuse files made before.
  uint64_t h = 1469598103934665603ULL;
  fnv1a(h, &m.n, sizeof(m.n));
  for (int64_t lo = 0; lo <= m.n; lo += kOffsetWindow) {
    std::vector<int64_t> v = m.offsets.read<int64_t>(lo, std::min(kOffsetWindow, m.n + 1 - lo));
    fnv1a(h, v.data(), v.size() * sizeof(int64_t));
  }
  constexpr int64_t kTokenWindow = 1 << 20;
  for (int64_t lo = 0; lo < m.n_tokens; lo += kTokenWindow) {
    std::vector<int32_t> v = m.tokens.read<int32_t>(lo, std::min(kTokenWindow, m.n_tokens - lo));
    fnv1a(h, v.data(), v.size() * sizeof(int32_t));
  }
  for (const auto* column : {&m.ids, &m.categories}) {
    uint8_t present = column->has_value() ? 1 : 0;
    fnv1a(h, &present, 1);
    if (!present) continue;
    for (int64_t lo = 0; lo < m.n; lo += kOffsetWindow) {
      for (const std::string& s : (*column)->read_strings(lo, std::min(kOffsetWindow, m.n - lo)))
        fnv1a(h, s.c_str(), s.size() + 1);  // with the terminator: "a","bc" != "ab","c"
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void validate_tokens(const Prompt& prompt, int64_t vocab_size, int64_t max_len,
                     const std::string& file) {
  std::string prefix = (file.empty() ? "" : file + ": ") + "prompt " +
                       std::to_string(prompt.index) + " (id '" + prompt.id + "')";
  SPEC_INPUT_CHECK(!prompt.tokens.empty(),
                   prefix << " is empty; every prompt needs at least one token");
  for (size_t pos = 0; pos < prompt.tokens.size(); ++pos) {
    int32_t t = prompt.tokens[pos];
    SPEC_INPUT_CHECK(t >= 0 && t < vocab_size,
                     prefix << ": token " << t << " at position " << pos
                            << " is outside the target vocabulary (" << vocab_size
                            << " tokens); was the prompt file tokenized for another model?");
  }
  SPEC_INPUT_CHECK(max_len <= 0 || static_cast<int64_t>(prompt.tokens.size()) <= max_len,
                   prefix << " has " << prompt.tokens.size()
                          << " tokens, more than the maximum prompt length " << max_len
                          << " (the context length minus the tokens to generate); shorten or drop "
                             "the prompt, lower max_new_tokens, or use a longer-context model");
}

// Writing ----------------------------------------------------------------------------------------

namespace {
constexpr size_t kTokenFlushCount = 64 * 1024;  // 256 KiB of int32, one chunk
constexpr size_t kRowFlushCount = 4096;
}  // namespace

struct PromptFileWriter::Impl {
  h5::File file;
  h5::Group group;
  h5::Dataset tokens, offsets;
  std::optional<h5::Dataset> ids, categories, text;
  std::vector<int32_t> buf_tokens;
  std::vector<int64_t> buf_offsets;
  std::vector<std::string> buf_ids, buf_categories, buf_text;
  int64_t n = 0;
  int64_t n_tokens = 0;

  void flush_rows() {
    tokens.append(buf_tokens);
    offsets.append(buf_offsets);
    if (ids) ids->append_strings(buf_ids);
    if (categories) categories->append_strings(buf_categories);
    if (text) text->append_strings(buf_text);
    buf_tokens.clear();
    buf_offsets.clear();
    buf_ids.clear();
    buf_categories.clear();
    buf_text.clear();
  }
};

PromptFileWriter::PromptFileWriter(const std::string& path, const PromptColumns& columns,
                                   bool truncate, const std::string& source)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.file = h5::File::create(path, truncate);
  m.file.set_attr_string("schema", kPromptSchema);
  m.file.set_attr_int32("schema_version", kPromptSchemaVersion);
  m.file.set_attr_string("specrun_version", build_info().version);
  m.file.set_attr_string("created", utc_timestamp());
  m.file.set_attr_string("source", source);
  m.group = m.file.create_group("prompts");
  m.tokens = h5::create_rows<int32_t>(m.group, "tokens", h5::chunk_rows(kTokenFlushCount));
  m.offsets = h5::create_rows<int64_t>(m.group, "offsets");
  m.offsets.append(std::vector<int64_t>{0});
  if (columns.ids) m.ids = h5::create_string_rows(m.group, "id");
  if (columns.categories) m.categories = h5::create_string_rows(m.group, "category");
  if (columns.text) m.text = h5::create_string_rows(m.group, "text", h5::chunk_rows(256));
}

PromptFileWriter::~PromptFileWriter() = default;

void PromptFileWriter::set_attribute(const std::string& name, const std::string& value) {
  SPEC_CHECK(impl_->file.valid(), "PromptFileWriter::set_attribute after close");
  impl_->file.set_attr_string(name, value);
}

void PromptFileWriter::append(const std::vector<int32_t>& tokens, const std::string& id,
                              const std::string& category, const std::string& text) {
  Impl& m = *impl_;
  SPEC_CHECK(m.file.valid(), "PromptFileWriter::append after close");
  SPEC_CHECK(!tokens.empty(), "prompt " << m.n << " is empty");
  m.buf_tokens.insert(m.buf_tokens.end(), tokens.begin(), tokens.end());
  m.n_tokens += static_cast<int64_t>(tokens.size());
  m.buf_offsets.push_back(m.n_tokens);
  if (m.ids) m.buf_ids.push_back(id);
  if (m.categories) m.buf_categories.push_back(category);
  if (m.text) m.buf_text.push_back(text);
  ++m.n;
  if (m.buf_tokens.size() >= kTokenFlushCount || m.buf_offsets.size() >= kRowFlushCount)
    m.flush_rows();
}

int64_t PromptFileWriter::size() const {
  return impl_->n;
}

void PromptFileWriter::close() {
  Impl& m = *impl_;
  if (!m.file.valid()) return;
  m.flush_rows();
  m.tokens = {};
  m.offsets = {};
  m.ids.reset();
  m.categories.reset();
  m.text.reset();
  m.group = {};
  m.file.close();
}

}  // namespace specrun
