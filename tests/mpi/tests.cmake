# Multi-rank tests and the rank counts they run with. One line per tests/mpi/<name>.cpp.
specrun_mpi_test(test_comm NP 2 8)
specrun_mpi_test(test_provenance_mpi NP 2 8)
specrun_mpi_test(test_config_bcast NP 2 8)
specrun_mpi_test(test_tp NP 2 4 8)
specrun_mpi_test(test_decoder NP 1 2 4)
specrun_mpi_test(test_decoder_drafters NP 1 2 4)
specrun_mpi_test(test_moe_tp NP 2 4)
