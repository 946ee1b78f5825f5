# End-to-end script tests. One line per script.
specrun_script_test(env_mismatch e2e/env_mismatch.sh)
specrun_script_test(prepare_h5py e2e/prepare_h5py.sh)
specrun_script_test(generate e2e/generate.sh)
