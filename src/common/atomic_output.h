// Writing the plain files specrun produces (JSONL and JSON exports, logit dumps, model files,
// logs) so that:
//   - nothing is written through a link: the data goes to a new temporary file in the target's
//     folder, <dir>/.<name>.<random>.tmp, created with O_CREAT | O_EXCL | O_NOFOLLOW (mode 0644
//     less the umask), then fsynced and renamed over the target, and the folder fsynced;
//   - the target is either absent, the old file or the whole new file, never a partial one
//     (a failed write or a crash leaves at most the temporary file, removed on error);
//   - a command never replaces one of its own inputs (compared by device and inode, so another
//     name for the same file is caught) nor an existing file unless told to (--overwrite), nor
//     a target that is a symbolic link or not a regular file;
//   - every failure is a specrun::Error naming the path: a read-only folder or an overlong name
//     exits 2 (the user's choice of path), a full disk 1.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specrun {

struct OutputPolicy {
  // Replace an existing regular file at the path (the command's --overwrite).
  bool overwrite = false;
  // The files the command reads: the output may be none of them, even with `overwrite`. A folder
  // stands for every file directly in it (a model folder); paths that do not exist are ignored.
  std::vector<std::string> inputs;
  // How messages name the output ("--outputs file", "--json file").
  std::string what = "output file";
  // The writer creates the folder (create_output_folder): check_output_path accepts a missing
  // one when its nearest existing ancestor is a writable folder.
  bool creates_folder = false;

  OutputPolicy() = default;
  OutputPolicy(bool overwrite_, std::vector<std::string> inputs_ = {},
               std::string what_ = "output file", bool creates_folder_ = false)
      : overwrite(overwrite_),
        inputs(std::move(inputs_)),
        what(std::move(what_)),
        creates_folder(creates_folder_) {}
};

// Refuses (specrun::Error, exit code 2, naming `path`) what AtomicOutput would refuse, so a
// command can fail before its work rather than after: a path that is a symbolic link or not a
// regular file, an existing file without policy.overwrite, one of policy.inputs, a folder that
// does not exist or is not a folder, and a name longer than the file system allows.
void check_output_path(const std::string& path, const OutputPolicy& policy);

// True when both paths exist and are the same file (device and inode, links followed).
bool same_file(const std::string& a, const std::string& b);

// One output file, written through its temporary file. Not thread-safe; one writer per object.
class AtomicOutput {
 public:
  // Checks the path (check_output_path) and creates the temporary file.
  AtomicOutput(std::string path, OutputPolicy policy = {});
  // Removes the temporary file unless commit() succeeded.
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  // Appends bytes (buffered). Throws naming the path when the disk is full or the write fails.
  void write(std::string_view bytes);
  void write(const void* data, std::size_t bytes);
  // Flushes, fsyncs, checks the target again (still no link, no input, and without `overwrite`
  // still absent: the rename does not replace a file created meanwhile), renames the temporary
  // file over it and fsyncs the folder. Call once; afterwards write() is an error.
  void commit();

  const std::string& path() const { return path_; }

 private:
  void flush();
  void write_all(std::string_view bytes);
  std::string path_;
  OutputPolicy policy_;
  std::string tmp_;
  int fd_ = -1;
  std::string buffer_;
  bool committed_ = false;
};

// The whole file at once: AtomicOutput, write, commit.
void write_file_atomically(const std::string& path, std::string_view content,
                           const OutputPolicy& policy = {});

// Opens `path` for appending (a log kept across runs), creating it (0644 less the umask) when
// absent: O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, so a link planted at the path
// is refused, and a path that is not a regular file (a fifo, a device) is refused too. Returns
// the descriptor; the caller closes it. Throws naming the path.
int open_append_output(const std::string& path);

// Creates `dir` and its missing parents (like mkdir -p); throws naming the folder when it cannot
// (read-only, a file in the way, a name too long) instead of a raw std::filesystem error.
void create_output_folder(const std::string& dir);

}  // namespace specrun
