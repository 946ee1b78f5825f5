// Output files (common/atomic_output.h): written through an exclusive temporary file and a
// rename; never over an input (by device and inode), an existing file without overwrite, a link
// or a non-regular file; failures name the path and leave the target and no temporary file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/atomic_output.h"
#include "common/error.h"
#include "tests/unit/temp_dir.h"

using namespace specrun;
namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void put(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// The error write_file_atomically throws, "" when none.
Error write_error(const std::string& path, const std::string& content, const OutputPolicy& p) {
  try {
    write_file_atomically(path, content, p);
  } catch (const Error& e) {
    return e;
  }
  return Error("", "", 0);
}

// Names in `dir` other than `keep`: a temporary file left behind shows here.
std::vector<std::string> others(const std::string& dir, const std::vector<std::string>& keep) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (std::find(keep.begin(), keep.end(), name) == keep.end()) out.push_back(name);
  }
  return out;
}

TEST(AtomicOutput, WritesReplacesOnlyWhenToldAndLeavesNoTemporaryFile) {
  test::TempDir d;
  const std::string out = d.file("out.jsonl");
  write_file_atomically(out, "one\n");
  EXPECT_EQ(read_file(out), "one\n");
  const Error e = write_error(out, "two\n", {});
  EXPECT_EQ(e.exit_code(), kExitUsage);
  EXPECT_NE(e.message().find(out + " already exists; pass --overwrite"), std::string::npos)
      << e.message();
  EXPECT_EQ(read_file(out), "one\n");
  write_file_atomically(out, "two\n", OutputPolicy{true});
  EXPECT_EQ(read_file(out), "two\n");
  struct stat st;
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(
      st.st_mode & 0777, 0644 & ~[] {
        const mode_t m = ::umask(022);
        ::umask(m);
        return m;
      }());
  EXPECT_TRUE(others(d.path(), {"out.jsonl"}).empty());

  // Streamed writes larger than the buffer arrive whole and in order.
  std::string big;
  for (int i = 0; i < 300000; ++i) big += std::to_string(i) + "\n";
  {
    AtomicOutput o(d.file("big.txt"));
    o.write(big.substr(0, 10));
    o.write(big.substr(10, 1500000));
    o.write(big.substr(1500010));
    o.commit();
  }
  EXPECT_EQ(read_file(d.file("big.txt")), big);
  // Not committed: nothing at the target, no temporary file.
  {
    AtomicOutput o(d.file("abandoned.txt"));
    o.write("x");
  }
  EXPECT_FALSE(fs::exists(d.file("abandoned.txt")));
  EXPECT_TRUE(others(d.path(), {"out.jsonl", "big.txt"}).empty());
}

TEST(AtomicOutput, NeverReplacesAnInputUnderAnyName) {
  test::TempDir d;
  const std::string input = d.file("result.h5");
  put(input, "the input");
  const std::string alias = d.file("alias.jsonl");
  ASSERT_EQ(::link(input.c_str(), alias.c_str()), 0);
  OutputPolicy p{true, {input}, "--outputs file"};
  Error e = write_error(input, "x", p);
  EXPECT_EQ(e.exit_code(), kExitUsage);
  EXPECT_NE(e.message().find("--outputs file " + input + " is one of this command's inputs"),
            std::string::npos)
      << e.message();
  e = write_error(alias, "x", p);  // another name, the same inode: refused even with overwrite
  EXPECT_NE(e.message().find("is the same file as " + input), std::string::npos) << e.message();
  // A folder input stands for the files in it (a model folder).
  fs::create_directory(d.file("model"));
  put(d.file("model/tokenizer.json"), "{}");
  e = write_error(d.file("model/tokenizer.json"), "x", OutputPolicy{true, {d.file("model")}});
  EXPECT_NE(e.message().find("one of this command's inputs"), std::string::npos) << e.message();
  EXPECT_EQ(read_file(input), "the input");
  EXPECT_EQ(read_file(d.file("model/tokenizer.json")), "{}");
}

TEST(AtomicOutput, NeverWritesThroughLinksOrIntoNonRegularFiles) {
  test::TempDir d;
  const std::string victim = d.file("victim");
  put(victim, "precious");
  const std::string link = d.file("out.jsonl");
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  Error e = write_error(link, "x", OutputPolicy{true});
  EXPECT_NE(e.message().find("is a symbolic link"), std::string::npos) << e.message();
  // A link planted at the name the old writers used for their temporary file is not touched.
  const std::string planted = d.file("other.jsonl.tmp");
  ASSERT_EQ(::symlink(victim.c_str(), planted.c_str()), 0);
  write_file_atomically(d.file("other.jsonl"), "new");
  EXPECT_EQ(read_file(d.file("other.jsonl")), "new");
  EXPECT_TRUE(fs::is_symlink(planted));
  EXPECT_EQ(read_file(victim), "precious");
  fs::create_directory(d.file("dir"));
  e = write_error(d.file("dir"), "x", OutputPolicy{true});
  EXPECT_NE(e.message().find("exists and is not a regular file"), std::string::npos) << e.message();
  ASSERT_EQ(::mkfifo(d.file("fifo").c_str(), 0644), 0);
  e = write_error(d.file("fifo"), "x", OutputPolicy{true});
  EXPECT_NE(e.message().find("exists and is not a regular file"), std::string::npos) << e.message();
}

TEST(AtomicOutput, BadPathsAreClearErrorsNamingThem) {
  test::TempDir d;
  const std::string longname = d.file(std::string(300, 'n') + ".jsonl");
  Error e = write_error(longname, "x", {});
  EXPECT_EQ(e.exit_code(), kExitUsage);
  EXPECT_NE(e.message().find(longname + " has a name of 306 bytes, and the file system allows 255"),
            std::string::npos)
      << e.message();
  const std::string missing = d.file("no/such/out.jsonl");
  e = write_error(missing, "x", {});
  EXPECT_EQ(e.exit_code(), kExitUsage);
  EXPECT_NE(e.message().find("cannot write output file " + missing + ": the folder " +
                             d.file("no/such") + " does not exist"),
            std::string::npos)
      << e.message();
  // A writer that creates its folder: a missing folder under a writable one is fine.
  OutputPolicy creates;
  creates.creates_folder = true;
  EXPECT_NO_THROW(check_output_path(missing, creates));
  put(d.file("file"), "");
  e = write_error(d.file("file/out.jsonl"), "x", {});
  EXPECT_NE(e.message().find("is not a folder"), std::string::npos) << e.message();
  create_output_folder(d.file("a/b/c"));
  EXPECT_TRUE(fs::is_directory(d.file("a/b/c")));
  try {
    create_output_folder(d.file("file/sub"));
    FAIL() << "a folder under a file was created";
  } catch (const Error& x) {
    EXPECT_NE(x.message().find("cannot create the output folder " + d.file("file/sub")),
              std::string::npos)
        << x.message();
  }
}

// A write that fails half-way (here the file-size limit, as a full disk would) is an error naming
// the path; the target keeps its old content and no temporary file is left.
TEST(AtomicOutput, AFailedWriteLeavesTheTargetAndNoTemporaryFile) {
  test::TempDir d;
  const std::string out = d.file("out.bin");
  put(out, "old");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const struct rlimit limit = {4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 10;
    try {
      write_file_atomically(out, std::string(1 << 20, 'x'), OutputPolicy{true});
    } catch (const Error& e) {
      const bool named = e.message().find("cannot write output file " + out +
                                          ": the file exceeds "
                                          "the largest size") != std::string::npos;
      code = named && e.exit_code() == kExitFailure ? 0 : 11;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no error, 11: an error without the path or code";
  EXPECT_EQ(read_file(out), "old");
  EXPECT_TRUE(others(d.path(), {"out.bin"}).empty());
}

TEST(AtomicOutput, ReadOnlyFolderIsAClearError) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "root writes into a mode-555 folder; tests/e2e/output_files.sh checks a "
                    "read-only mount";
  test::TempDir d;
  fs::create_directory(d.file("ro"));
  ::chmod(d.file("ro").c_str(), 0555);
  const Error e = write_error(d.file("ro/out.jsonl"), "x", {});
  ::chmod(d.file("ro").c_str(), 0755);
  EXPECT_EQ(e.exit_code(), kExitUsage);
  EXPECT_NE(e.message().find("permission denied: the folder " + d.file("ro") + " is not writable"),
            std::string::npos)
      << e.message();
}

TEST(AtomicOutput, AppendingRefusesLinksAndNonRegularFiles) {
  test::TempDir d;
  const std::string log = d.file("point.log");
  for (const char* line : {"first\n", "second\n"}) {
    const int fd = open_append_output(log);
    ASSERT_EQ(::write(fd, line, std::strlen(line)), static_cast<ssize_t>(std::strlen(line)));
    ::close(fd);
  }
  EXPECT_EQ(read_file(log), "first\nsecond\n");
  put(d.file("victim"), "precious");
  ASSERT_EQ(::symlink(d.file("victim").c_str(), d.file("link.log").c_str()), 0);
  try {
    open_append_output(d.file("link.log"));
    FAIL() << "appended through a link";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("it is a symbolic link"), std::string::npos) << e.message();
  }
  EXPECT_EQ(read_file(d.file("victim")), "precious");
  ASSERT_EQ(::mkfifo(d.file("fifo.log").c_str(), 0644), 0);
  try {
    open_append_output(d.file("fifo.log"));  // no reader: must not block
    FAIL() << "opened a fifo";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("is not a regular file"), std::string::npos) << e.message();
  }
}

}  // namespace
