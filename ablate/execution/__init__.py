"""Step 3, running a plan: the launcher, trial selection, the Ray cluster and fan-out, the task body, gangs, GPU
shares, the heartbeat, the recorder and its journal, progress, the pre-flight; a sweep as a Slurm batch job."""
