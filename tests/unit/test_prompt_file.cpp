// Prompt files: sharding arithmetic, `prepare` (JSONL -> HDF5) and its error reporting, and
// PromptReader's validation of malformed files built directly with the HDF5 C API.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/error.h"
#include "io/prompt_file.h"
#include "temp_dir.h"

using namespace specrun;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Runs fn, expects a specrun::Error, returns its full text.
template <typename Fn>
std::string error_of(Fn fn, int expected_code = kExitUsage) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), expected_code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error was thrown";
  return "";
}

// Builds prompt files with the raw C API, so that the reader's checks are tested against files
// specrun's own writer would never produce.
struct RawPromptFile {
  hid_t file;
  hid_t group;
  explicit RawPromptFile(const std::string& path, bool with_schema = true, int version = 1) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (with_schema) {
      string_attr("schema", "specrun.prompts");
      hid_t space = H5Screate(H5S_SCALAR);
      hid_t attr =
          H5Acreate2(file, "schema_version", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(attr, H5T_NATIVE_INT, &version);
      H5Aclose(attr);
      H5Sclose(space);
    }
    group = H5Gcreate2(file, "prompts", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  }
  ~RawPromptFile() {
    H5Gclose(group);
    H5Fclose(file);
  }
  void string_attr(const char* name, const char* value) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, type, &value);
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
  }
  template <typename T>
  void dataset(const char* name, hid_t file_type, hid_t mem_type, const std::vector<T>& values,
               std::vector<hsize_t> dims = {}) {
    if (dims.empty()) dims = {values.size()};
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t d = H5Dcreate2(group, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (!values.empty()) H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(d);
    H5Sclose(space);
  }
  void tokens(const std::vector<int32_t>& v) {
    dataset("tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, v);
  }
  void offsets(const std::vector<int64_t>& v) {
    dataset("offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, v);
  }
  // Fixed-length strings, as h5py writes numpy 'S' arrays.
  void fixed_strings(const char* name, const std::vector<std::string>& values, size_t width) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, width);
    std::vector<char> buf(values.size() * width, '\0');
    for (size_t i = 0; i < values.size(); ++i)
      std::copy(values[i].begin(), values[i].end(), buf.begin() + i * width);
    hsize_t n = values.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(group, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    H5Dclose(d);
    H5Sclose(space);
    H5Tclose(type);
  }
};

}  // namespace

// Sharding -------------------------------------------------------------------------------------

TEST(Sharding, BatchesCoverEveryPromptOnceAndGroupsAreDisjoint) {
  for (int64_t n : {0, 1, 7, 8, 9, 100, 1001}) {
    for (int64_t bs : {1, 3, 8, 64}) {
      for (int dp : {1, 2, 3, 8}) {
        std::vector<int> owner(static_cast<size_t>(n), -1);
        int64_t batches_seen = 0;
        for (int g = 0; g < dp; ++g) {
          int64_t previous = -1;
          for (int64_t k = 0;; ++k) {
            std::optional<BatchRange> r = shard_batch(n, bs, g, dp, k);
            if (!r) break;
            ++batches_seen;
            EXPECT_EQ(batch_owner(r->batch, dp), g);
            EXPECT_GT(r->batch, previous);  // increasing order within a group
            previous = r->batch;
            EXPECT_EQ(r->first, r->batch * bs);
            EXPECT_GE(r->count, 1);
            EXPECT_LE(r->count, bs);
            for (int64_t i = r->first; i < r->first + r->count; ++i) {
              ASSERT_LT(i, n);
              EXPECT_EQ(owner[static_cast<size_t>(i)], -1) << "prompt " << i << " twice";
              owner[static_cast<size_t>(i)] = g;
            }
          }
        }
        EXPECT_EQ(batches_seen, batch_count(n, bs));
        for (int64_t i = 0; i < n; ++i)
          EXPECT_NE(owner[static_cast<size_t>(i)], -1) << "prompt " << i << " never read";
      }
    }
  }
}

TEST(Sharding, RoundRobinByBatch) {
  // 10 prompts, batches of 3: [0,3) [3,6) [6,9) [9,10); dp 2: group 0 gets batches 0 and 2.
  EXPECT_EQ(batch_count(10, 3), 4);
  EXPECT_EQ(batch_range(10, 3, 3).count, 1);
  auto b = shard_batch(10, 3, 0, 2, 1);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->batch, 2);
  EXPECT_EQ(b->first, 6);
  EXPECT_FALSE(shard_batch(10, 3, 0, 2, 2));
  auto last = shard_batch(10, 3, 1, 2, 1);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->batch, 3);
  EXPECT_EQ(last->first, 9);
  EXPECT_EQ(last->count, 1);
  EXPECT_THROW(batch_count(10, 0), Error);
}

// prepare -------------------------------------------------------------------------------------

TEST(Prepare, RoundTripThroughReader) {
  TempDir dir;
  std::string in = dir.file("in.jsonl"), out = dir.file("p.h5");
  write_text(in,
             "{\"tokens\": [1, 2, 3], \"id\": 7, \"category\": \"code\", \"text\": \"abc\"}\n"
             "\n"
             "   \n"
             "{\"tokens\": [2147483647], \"id\": \"x-1\", \"extra\": {\"ignored\": true}}\r\n"
             "{\"tokens\": [0, 5], \"id\": \"\\u00e9t\\u00e9\", \"category\": null, \"text\": "
             "\"caf\\u00e9\"}\n");
  PrepareSummary s = prepare_prompt_file(in, out, false);
  EXPECT_EQ(s.prompts, 3);
  EXPECT_EQ(s.tokens, 6);
  EXPECT_EQ(s.min_len, 1);
  EXPECT_EQ(s.max_len, 3);
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  PromptReader r(out);
  EXPECT_EQ(r.size(), 3);
  EXPECT_EQ(r.total_tokens(), 6);
  EXPECT_TRUE(r.has_ids());
  EXPECT_TRUE(r.has_categories());
  EXPECT_TRUE(r.has_text());
  std::vector<Prompt> all = r.read(0, 3);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(all[0].id, "7");
  EXPECT_EQ(all[0].category, "code");
  EXPECT_EQ(all[1].tokens, (std::vector<int32_t>{2147483647}));
  EXPECT_EQ(all[1].id, "x-1");
  EXPECT_EQ(all[1].category, "");
  EXPECT_EQ(all[2].id, "\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(all[2].index, 2);
  EXPECT_EQ(r.read_text(0), "abc");
  EXPECT_EQ(r.read_text(1), "");
  EXPECT_EQ(r.read_text(2), "caf\xc3\xa9");
  // A window in the middle reads the same prompts.
  std::vector<Prompt> mid = r.read(1, 2);
  ASSERT_EQ(mid.size(), 2u);
  EXPECT_EQ(mid[0].index, 1);
  EXPECT_EQ(mid[1].tokens, all[2].tokens);
  EXPECT_TRUE(r.read(3, 0).empty());
  EXPECT_THROW(r.read(2, 2), Error);
  EXPECT_THROW(r.read(-1, 1), Error);
}

TEST(Prepare, WithoutOptionalColumnsIdsAreIndices) {
  TempDir dir;
  std::string in = dir.file("in.jsonl"), out = dir.file("p.h5");
  write_text(in, "{\"tokens\": [4]}\n{\"tokens\": [5, 6]}\n");
  PrepareSummary s = prepare_prompt_file(in, out, false);
  EXPECT_FALSE(s.columns.ids || s.columns.categories || s.columns.text);
  PromptReader r(out);
  EXPECT_FALSE(r.has_ids() || r.has_categories() || r.has_text());
  std::vector<Prompt> p = r.read(0, 2);
  EXPECT_EQ(p[1].id, "1");
  EXPECT_EQ(p[1].tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(r.read_text(1), "");
}

TEST(Prepare, ManyPromptsAcrossBufferFlushes) {
  // More rows than one writer buffer (4096) and tokens than one chunk (65536).
  TempDir dir;
  std::string in = dir.file("in.jsonl"), out = dir.file("p.h5");
  {
    std::ofstream f(in);
    for (int i = 0; i < 9000; ++i) {
      f << "{\"tokens\": [";
      for (int j = 0; j <= i % 17; ++j) f << (j ? "," : "") << (i * 31 + j) % 50000;
      f << "], \"id\": \"p" << i << "\"}\n";
    }
  }
  prepare_prompt_file(in, out, false);
  PromptReader r(out);
  ASSERT_EQ(r.size(), 9000);
  for (int64_t first : {0, 4090, 8990}) {
    std::vector<Prompt> batch = r.read(first, 10);
    for (const Prompt& p : batch) {
      int i = static_cast<int>(p.index);
      ASSERT_EQ(p.tokens.size(), static_cast<size_t>(i % 17 + 1));
      EXPECT_EQ(p.tokens.back(), (i * 31 + i % 17) % 50000);
      EXPECT_EQ(p.id, "p" + std::to_string(i));
    }
  }
}

TEST(Prepare, BadLinesAreReportedByNumberAndNothingIsWritten) {
  TempDir dir;
  std::string in = dir.file("in.jsonl"), out = dir.file("p.h5");
  write_text(in,
             "{\"tokens\": [1], \"id\": \"a\"}\n"                   // 1 ok
             "{\"tokens\": [1, 2\n"                                 // 2 not JSON
             "{\"id\": \"c\"}\n"                                    // 3 tokens missing
             "{\"tokens\": \"1 2\", \"id\": \"d\"}\n"               // 4 not a list
             "{\"tokens\": [3, -1], \"id\": \"e\"}\n"               // 5 negative
             "{\"tokens\": [1.5], \"id\": \"f\"}\n"                 // 6 not an integer
             "{\"tokens\": [], \"id\": \"g\"}\n"                    // 7 empty
             "[1, 2]\n"                                             // 8 not an object
             "{\"tokens\": [1], \"id\": true}\n"                    // 9 bad id type
             "{\"tokens\": [1], \"id\": \"a\"}\n"                   // 10 duplicate id
             "{\"tokens\": [4294967296], \"id\": \"k\"}\n"          // 11 too large
             "{\"tokens\": [1], \"id\": \"l\", \"category\": 3}\n"  // 12 bad category
             "{\"tokens\": [1e999]}\n");  // 13 a number JSON cannot hold (fuzz finding: it ended
                                          // the program with an uncaught exception)
  std::string msg = error_of([&] { prepare_prompt_file(in, out, false); });
  EXPECT_NE(msg.find("12 bad lines"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nothing was written"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 13: not valid JSON (number overflow"), std::string::npos) << msg;
  for (int line : {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
    EXPECT_NE(msg.find("line " + std::to_string(line) + ":"), std::string::npos)
        << "line " << line << " not reported in:\n"
        << msg;
  EXPECT_EQ(msg.find("line 1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"tokens\"[1] is -1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("repeats the id of line 1"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

TEST(Prepare, LongErrorListIsCapped) {
  TempDir dir;
  std::string in = dir.file("in.jsonl"), out = dir.file("p.h5");
  std::string text;
  for (int i = 1; i <= 25; ++i) text += "{\"tokens\": [-" + std::to_string(i) + "]}\n";
  write_text(in, text);
  std::string msg = error_of([&] { prepare_prompt_file(in, out, false); });
  EXPECT_NE(msg.find("25 bad lines"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 20:"), std::string::npos);
  EXPECT_EQ(msg.find("line 21:"), std::string::npos);
  EXPECT_NE(msg.find("and 5 more bad lines"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(out));
}

// A line with none of "tokens", "text" or "messages" names its unknown keys, with the nearest
// known key (issue 48: {"txt": ...} said only what was missing).
TEST(Prepare, UnknownKeysAreNamedWithTheNearestKnownOne) {
  TempDir dir;
  std::string in = dir.file("in.jsonl"), out = dir.file("p.h5");
  write_text(in, "{\"txt\": \"hello\", \"id\": \"a\"}\n{\"token\": [1], \"source\": \"x\"}\n");
  std::string msg = error_of([&] { prepare_prompt_file(in, out, false); });
  EXPECT_NE(msg.find("line 1: missing \"tokens\" (a list of token ids), \"text\" or \"messages\"; "
                     "unknown key \"txt\" (did you mean \"text\"?)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("line 2: missing \"tokens\" (a list of token ids), \"text\" or \"messages\"; "
                     "unknown keys \"source\", \"token\" (did you mean \"tokens\"?)"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(out));
}

// Lines failing with the same message (text prompts without --model, issue 48: "the same error
// 20 times") are reported once with their line numbers; other messages still get their own line.
TEST(Prepare, RepeatedErrorsAreReportedOnceWithTheirLines) {
  TempDir dir;
  std::string in = dir.file("in.jsonl"), out = dir.file("p.h5");
  std::string text;
  for (int i = 1; i <= 30; ++i)
    text += i == 7 ? "{\"tokens\": [-1]}\n" : "{\"text\": \"prompt " + std::to_string(i) + "\"}\n";
  write_text(in, text);
  std::string msg = error_of([&] { prepare_prompt_file(in, out, false); });
  EXPECT_NE(msg.find("30 bad lines"), std::string::npos) << msg;
  EXPECT_NE(
      msg.find("lines 1-6, 8-30 (29 lines): has \"text\" but no \"tokens\": pass --model DIR"),
      std::string::npos)
      << msg;
  EXPECT_NE(msg.find("line 7: \"tokens\"[0] is -1"), std::string::npos) << msg;
  std::size_t count = 0;
  for (std::size_t at = msg.find("pass --model DIR"); at != std::string::npos;
       at = msg.find("pass --model DIR", at + 1))
    ++count;
  EXPECT_EQ(count, 1u) << msg;
  EXPECT_FALSE(fs::exists(out));
}

TEST(Prepare, MixedIdsEmptyInputAndMissingInput) {
  TempDir dir;
  std::string in = dir.file("in.jsonl"), out = dir.file("p.h5");
  write_text(in, "{\"tokens\": [1], \"id\": 1}\n{\"tokens\": [1]}\n{\"tokens\": [2]}\n");
  std::string msg = error_of([&] { prepare_prompt_file(in, out, false); });
  EXPECT_NE(msg.find("line 2: no \"id\", but line 1 has one (2 lines lack one)"), std::string::npos)
      << msg;
  write_text(in, "\n\n");
  EXPECT_NE(error_of([&] { prepare_prompt_file(in, out, false); }).find("holds no prompts"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              prepare_prompt_file(dir.file("absent.jsonl"), out, false);
            }).find("absent.jsonl"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(out));
}

TEST(Prepare, RefusesToOverwriteUnlessAsked) {
  TempDir dir;
  std::string in = dir.file("in.jsonl"), out = dir.file("p.h5");
  write_text(in, "{\"tokens\": [1, 2]}\n");
  write_text(out, "precious");
  std::string msg = error_of([&] { prepare_prompt_file(in, out, false); });
  EXPECT_NE(msg.find("already exists"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--overwrite"), std::string::npos) << msg;
  std::ifstream kept(out);
  std::string content((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "precious");
  prepare_prompt_file(in, out, true);
  EXPECT_EQ(PromptReader(out).size(), 1);
}

// A prompt file's strings end at their first NUL (HDF5 variable-length strings): a NUL in a text,
// an id or a category would be stored cut short without a word, so prepare refuses it by line.
TEST(Prepare, NulInAStringIsRefusedNamingTheLine) {
  TempDir dir;
  std::string in = dir.file("in.jsonl"), out = dir.file("p.h5");
  write_text(in,
             "{\"tokens\": [1, 2], \"text\": \"fine\", \"id\": \"a\"}\n"
             "{\"tokens\": [1, 3], \"text\": \"ab\\u0000cd\", \"id\": \"b\"}\n"
             "{\"tokens\": [1, 4], \"id\": \"c\\u0000\"}\n"
             "{\"tokens\": [1, 5], \"id\": \"d\", \"category\": \"\\u0000x\"}\n");
  const std::string msg = error_of([&] { prepare_prompt_file(in, out, false); });
  EXPECT_NE(msg.find("3 bad lines"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 2: the prompt's text holds a NUL character (\\u0000) at byte 2"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("line 3: \"id\" holds a NUL character (\\u0000) at byte 1"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("line 4: \"category\" holds a NUL character (\\u0000) at byte 0"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(out));
}

// Never over its own input, whatever the name and even with --overwrite.
TEST(Prepare, NeverWritesOverItsInput) {
  TempDir dir;
  std::string in = dir.file("in.jsonl");
  write_text(in, "{\"tokens\": [1, 2]}\n");
  ASSERT_EQ(::link(in.c_str(), dir.file("alias.h5").c_str()), 0);
  for (const std::string& out : {in, dir.file("alias.h5")}) {
    const std::string msg = error_of([&] { prepare_prompt_file(in, out, true); });
    EXPECT_NE(msg.find("one of this command's inputs"), std::string::npos) << msg;
  }
  std::ifstream kept(in);
  std::string content((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "{\"tokens\": [1, 2]}\n");
}

TEST(Prepare, ContentHashFollowsContent) {
  TempDir dir;
  std::string in = dir.file("in.jsonl");
  write_text(in, "{\"tokens\": [1, 2], \"id\": \"a\"}\n{\"tokens\": [3], \"id\": \"b\"}\n");
  prepare_prompt_file(in, dir.file("a.h5"), false);
  prepare_prompt_file(in, dir.file("b.h5"), false);
  write_text(in, "{\"tokens\": [1, 2], \"id\": \"a\"}\n{\"tokens\": [4], \"id\": \"b\"}\n");
  prepare_prompt_file(in, dir.file("c.h5"), false);
  write_text(in, "{\"tokens\": [1], \"id\": \"a\"}\n{\"tokens\": [2, 3], \"id\": \"b\"}\n");
  prepare_prompt_file(in, dir.file("d.h5"), false);
  std::string a = PromptReader(dir.file("a.h5")).content_hash();
  EXPECT_EQ(a.rfind("fnv1a64:", 0), 0u);
  EXPECT_EQ(a, PromptReader(dir.file("b.h5")).content_hash());  // same content, other file
  EXPECT_NE(a, PromptReader(dir.file("c.h5")).content_hash());  // one token differs
  EXPECT_NE(a, PromptReader(dir.file("d.h5")).content_hash());  // same tokens, other split
}

// Reader validation ---------------------------------------------------------------------------

TEST(PromptReader, RejectsNonMonotoneOffsets) {
  TempDir dir;
  std::string path = dir.file("bad.h5");
  {
    RawPromptFile f(path);
    f.tokens({1, 2, 3, 4, 5});
    f.offsets({0, 2, 4, 3, 5});
  }
  std::string msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("/prompts/offsets is not monotone"), std::string::npos) << msg;
  EXPECT_NE(msg.find("prompt 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad.h5"), std::string::npos) << msg;
}

TEST(PromptReader, RejectsEmptyPrompt) {
  TempDir dir;
  std::string path = dir.file("bad.h5");
  {
    RawPromptFile f(path);
    f.tokens({1, 2, 3});
    f.offsets({0, 1, 1, 3});
  }
  std::string msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("prompt 1 is empty"), std::string::npos) << msg;
}

TEST(PromptReader, RejectsLastOffsetMismatchAndBadStart) {
  TempDir dir;
  std::string path = dir.file("bad.h5");
  {
    RawPromptFile f(path);
    f.tokens({1, 2, 3, 4});
    f.offsets({0, 1, 3});
  }
  std::string msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("ends at 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds 4 tokens"), std::string::npos) << msg;
  {
    RawPromptFile f(path);
    f.tokens({1, 2, 3, 4});
    f.offsets({1, 2, 4});
  }
  msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("starts with 1, must start with 0"), std::string::npos) << msg;
}

TEST(PromptReader, FindsAnErrorBeyondTheFirstValidationWindow) {
  // 70,000 prompts of one token; prompt 66,000 is empty. The reader validates offsets in
  // windows of 65,536 values, so this checks that the second window is checked too.
  TempDir dir;
  std::string path = dir.file("big.h5");
  const int64_t n = 70000;
  std::vector<int64_t> offsets(n + 1);
  for (int64_t i = 0; i <= n; ++i) offsets[i] = i < 66001 ? i : i - 1;
  {
    RawPromptFile f(path);
    f.tokens(std::vector<int32_t>(static_cast<size_t>(n - 1), 7));
    f.offsets(offsets);
  }
  std::string msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("prompt 66000 is empty"), std::string::npos) << msg;
}

TEST(PromptReader, RejectsMissingAndMistypedDatasets) {
  TempDir dir;
  std::string path = dir.file("bad.h5");
  {
    RawPromptFile f(path);
    f.offsets({0, 1});
  }
  std::string msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("dataset /prompts/tokens is missing"), std::string::npos) << msg;
  {
    RawPromptFile f(path);
    f.dataset<float>("tokens", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {1.0f});
    f.offsets({0, 1});
  }
  msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("/prompts/tokens must be a 1-D integer dataset"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
  {
    RawPromptFile f(path);
    f.dataset<int32_t>("tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, {1, 2}, {1, 2});
    f.offsets({0, 2});
  }
  msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("it is 2-D"), std::string::npos) << msg;
  {
    RawPromptFile f(path);
    f.tokens({1, 2});
    f.offsets({0, 1, 2});
    f.fixed_strings("id", {"only-one"}, 8);
  }
  msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("/prompts/id has 1 rows"), std::string::npos) << msg;
}

TEST(PromptReader, RejectsMissingSchemaAndNewerVersion) {
  TempDir dir;
  std::string path = dir.file("bad.h5");
  {
    RawPromptFile f(path, /*with_schema=*/false);
    f.tokens({1});
    f.offsets({0, 1});
  }
  std::string msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("no 'schema' attribute"), std::string::npos) << msg;
  {
    RawPromptFile f(path, true, 2);
    f.tokens({1});
    f.offsets({0, 1});
  }
  msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("version 2"), std::string::npos) << msg;
  write_text(path, "not hdf5");
  msg = error_of([&] { PromptReader r(path); });
  EXPECT_NE(msg.find("is not an HDF5 file"), std::string::npos) << msg;
  msg = error_of([&] { PromptReader r(dir.file("absent.h5")); });
  EXPECT_NE(msg.find("absent.h5: no such file"), std::string::npos) << msg;
}

TEST(PromptReader, ReadsFixedLengthStringsAsH5pyWritesThem) {
  TempDir dir;
  std::string path = dir.file("ok.h5");
  {
    RawPromptFile f(path);
    f.tokens({1, 2, 3});
    f.offsets({0, 2, 3});
    f.fixed_strings("id", {"abc", "defghijk"}, 8);  // the second fills the width: no NUL
    f.fixed_strings("category", {"x", ""}, 4);
  }
  PromptReader r(path);
  std::vector<Prompt> p = r.read(0, 2);
  EXPECT_EQ(p[0].id, "abc");
  EXPECT_EQ(p[1].id, "defghijk");
  EXPECT_EQ(p[0].category, "x");
  EXPECT_EQ(p[1].category, "");
  EXPECT_EQ(p[0].tokens, (std::vector<int32_t>{1, 2}));
}

TEST(ValidateTokens, NamesPromptIdTokenAndPosition) {
  Prompt p{17, "x", "", {1, 2, 3, 5000}};
  std::string msg = error_of([&] { validate_tokens(p, 2048, 0, "prompts.h5"); });
  EXPECT_NE(msg.find("prompts.h5: prompt 17 (id 'x'): token 5000 at position 3 is outside the "
                     "target vocabulary (2048 tokens)"),
            std::string::npos)
      << msg;
  p.tokens[3] = -1;
  msg = error_of([&] { validate_tokens(p, 2048, 0); });
  EXPECT_NE(msg.find("token -1 at position 3"), std::string::npos) << msg;
  p.tokens[3] = 2047;
  validate_tokens(p, 2048, 4);  // exactly at both limits: fine
  msg = error_of([&] { validate_tokens(p, 2048, 3); });
  EXPECT_NE(msg.find("prompt 17 (id 'x') has 4 tokens, more than the maximum prompt length 3"),
            std::string::npos)
      << msg;
  p.tokens.clear();
  msg = error_of([&] { validate_tokens(p, 2048, 3); });
  EXPECT_NE(msg.find("is empty"), std::string::npos) << msg;
}
