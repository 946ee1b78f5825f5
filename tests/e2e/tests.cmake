# End-to-end script tests. One line per script.
specrun_script_test(env_mismatch e2e/env_mismatch.sh)
specrun_script_test(prepare_h5py e2e/prepare_h5py.sh)
specrun_script_test(generate e2e/generate.sh)
specrun_script_test(signal_usr1 e2e/signal_usr1.sh TIMEOUT 600)
specrun_script_test(slurm_job e2e/slurm_job.sh TIMEOUT 600 LABELS slurm)
specrun_script_test(slurm_requeue e2e/slurm_requeue.sh TIMEOUT 600 LABELS slurm)
specrun_script_test(bench_smoke e2e/bench_smoke.sh TIMEOUT 300)
