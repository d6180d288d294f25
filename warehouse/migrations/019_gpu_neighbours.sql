-- 019_gpu_neighbours: on a GPU host, what other processes did on the engine's GPUs during a step's kept windows
-- (tasks/perf/host_noise.py: GpuWatch, from NVML). NULL: no GPU watched (a CPU engine, no NVML, an endpoint
-- elsewhere) or the processes could not be told apart (host_noise_note says why).
-- Columns are appended in the order of warehouse/contract.py.

alter table perf_summary add column gpu_other_procs bigint;    -- other processes on the engine's GPUs, max
alter table perf_summary add column gpu_other_sm_pct double;   -- %, their SM utilisation of a GPU, max
