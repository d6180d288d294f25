-- 013_cpu_threads: what the load generator shared the host with (issue 23): the engine's CPU threads
-- on this host, {decode, prompt, host_cores} as JSON (llama.cpp's n_threads and n_threads_batch).
-- NULL for engines that do not say (GPU engines, hosted APIs) and for runs recorded before.

alter table variants add column if not exists cpu_threads varchar;  -- JSON {decode, prompt, host_cores}
