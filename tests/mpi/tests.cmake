# Multi-rank tests and the rank counts they run with. One line per tests/mpi/<name>.cpp.
