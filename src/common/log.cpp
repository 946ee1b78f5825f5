#include "common/log.h"

namespace specrun {

std::string Logger::prefix() const {
  if (size_ <= 1) return "";
  return "[" + std::to_string(rank_) + "/" + std::to_string(size_) + "] ";
}

void Logger::info(const std::string& line) const {
  if (!all_ranks_ && rank_ != 0) return;
  std::cout << prefix() << line << std::endl;
}

void Logger::warn(const std::string& line) const {
  std::cerr << prefix() << "warning: " << line << std::endl;
}

}  // namespace specrun
