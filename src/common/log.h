// Rank-prefixed logging. By default only rank 0 prints info lines; warnings and errors print on
// every rank. The rank is passed in (no global rank): callers hold a Logger built from their
// World.
#pragma once

#include <iostream>
#include <mutex>
#include <sstream>
#include <string>

namespace specrun {

class Logger {
 public:
  Logger(int rank, int size, bool all_ranks = false)
      : rank_(rank), size_(size), all_ranks_(all_ranks) {}

  bool is_root() const { return rank_ == 0; }
  // Info: rank 0 only (or every rank when all_ranks), to stdout, prefixed "[r/size]" when size>1.
  void info(const std::string& line) const;
  // Warning: every rank, to stderr.
  void warn(const std::string& line) const;

 private:
  std::string prefix() const;
  int rank_;
  int size_;
  bool all_ranks_;
};

}  // namespace specrun
