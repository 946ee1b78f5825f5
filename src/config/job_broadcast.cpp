#include "config/job_broadcast.h"

#include <cstdint>
#include <cstdio>
#include <exception>
#include <sstream>

#include "common/error.h"

namespace specrun {
namespace {

constexpr int kRoot = 0;

void broadcast_string(Communicator& comm, std::string& s) {
  std::uint64_t size = s.size();
  comm.broadcast(&size, sizeof(size), kRoot);
  s.resize(size);
  if (size > 0) comm.broadcast(s.data(), size, kRoot);
}

void broadcast_strings(Communicator& comm, std::vector<std::string>& list) {
  std::uint64_t count = list.size();
  comm.broadcast(&count, sizeof(count), kRoot);
  list.resize(count);
  for (auto& s : list) broadcast_string(comm, s);
}

// One rank's answer after parsing: whether it succeeded and the hash of what it parsed.
struct RankConfigState {
  std::uint64_t ok;
  std::uint64_t hash;
};

std::string join_ranks(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

std::string hex(std::uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Collective: every rank reports whether it parsed the job and the hash it got; every rank
// throws the same kind of error when any rank failed or disagrees with rank 0.
void agree(bool ok, std::uint64_t hash, const std::string& local_error, Communicator& comm) {
  RankConfigState mine{ok ? 1u : 0u, hash};
  std::vector<RankConfigState> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(&mine, all.data(), sizeof(RankConfigState));
  std::vector<int> failed, differ;
  for (int r = 0; r < comm.size(); ++r) {
    if (all[r].ok == 0) {
      failed.push_back(r);
    } else if (all[0].ok != 0 && all[r].hash != all[0].hash) {
      differ.push_back(r);
    }
  }
  if (failed.empty() && differ.empty()) return;
  // Every rank sees the same gathered states and fails alike; the first rank at fault reports
  // (its own parse error or hash).
  const int reporter = failed.empty() ? differ.front() : failed.front();
  try {
    if (!failed.empty())
      SPEC_FAIL("rank(s) " << join_ranks(failed) << " could not parse the job file that rank 0 "
                           << "parsed" << (local_error.empty() ? "" : ": " + local_error)
                           << ". Check that every rank runs the same specrun build and sees the "
                           << "same working directory");
    SPEC_FAIL("the job configuration differs between ranks: rank(s) "
              << join_ranks(differ) << " hash it to something other than rank 0's "
              << hex(all[0].hash) << " (this rank: " << hex(hash)
              << "). Every rank must run the same specrun build with the same job file, --set "
              << "arguments and working directory");
  } catch (const Error& e) {
    throw CollectiveError(e, comm.rank() == reporter);
  }
}

}  // namespace

void check_config_agreement(const JobConfig& config, Communicator& comm) {
  agree(true, config_hash(config), "", comm);
}

JobConfig load_job_on_all_ranks(const std::string& path, const std::vector<std::string>& overrides,
                                Communicator& comm, const ConfigValidator& extra) {
  const bool root = comm.rank() == kRoot;
  JobConfig config;
  std::exception_ptr root_failure;
  std::string error_text;
  std::int32_t status[2] = {0, 0};  // {failed, exit code}
  std::string text, source = path, base_dir;
  std::vector<std::string> args = overrides;
  if (root) {
    try {
      text = read_job_file(path);
      base_dir = job_file_dir(path);
      config = parse_job_config(text, path, overrides, base_dir, extra);
    } catch (const Error& e) {
      root_failure = std::current_exception();
      error_text = e.message();
      status[0] = 1;
      status[1] = e.exit_code();
    } catch (const std::exception& e) {
      root_failure = std::current_exception();
      error_text = e.what();
      status[0] = 1;
      status[1] = kExitFailure;
    }
  }
  // Status first: on a bad job file no rank goes on to wait for text that never comes.
  comm.broadcast(status, sizeof(status), kRoot);
  if (status[0] != 0) {
    broadcast_string(comm, error_text);
    // Every rank fails with rank 0's error; rank 0 reports it.
    if (root) {
      try {
        std::rethrow_exception(root_failure);
      } catch (const Error& e) {
        throw CollectiveError(e, true);
      } catch (const std::exception& e) {
        throw CollectiveError(Error(e.what(), "[" + process_label() + "]", status[1]), true);
      }
    }
    throw CollectiveError(Error(error_text, "", status[1]), false);
  }
  broadcast_string(comm, text);
  broadcast_string(comm, source);
  broadcast_string(comm, base_dir);
  broadcast_strings(comm, args);
  bool ok = true;
  std::string local_error;
  if (!root) {
    try {
      config = parse_job_config(text, source, args, base_dir, extra);
    } catch (const std::exception& e) {
      ok = false;
      local_error = e.what();
    }
  }
  agree(ok, ok ? config_hash(config) : 0, local_error, comm);
  return config;
}

}  // namespace specrun
