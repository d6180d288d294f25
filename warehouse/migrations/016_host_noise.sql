-- 016_host_noise: what else used the host during each step's perf windows, and which windows the figures rest on
-- (issue 36; tasks/perf/host_noise.py). Per step, over the windows kept: the most CPU other processes used (% of one
-- core; the engine and the load generator excluded), the most the hypervisor stole, the highest 1-minute load; the
-- threshold above which a window counts as disturbed; how many windows were kept, measured again, still disturbed.
-- NULL for rows recorded before, and (with host_noise_note) where the host's use could not be read.

alter table perf_summary add column if not exists host_other_cpu_pct double;  -- % of one core, max over kept windows
alter table perf_summary add column if not exists host_steal_pct double;      -- % of one core, max over kept windows
alter table perf_summary add column if not exists host_load1 double;          -- 1-min load average, max at window ends
alter table perf_summary add column if not exists host_noise_max_pct double;  -- % of one core: the threshold used
alter table perf_summary add column if not exists windows_kept bigint;        -- windows the figures rest on (repeats)
alter table perf_summary add column if not exists windows_remeasured bigint;  -- disturbed windows dropped, measured again
alter table perf_summary add column if not exists windows_disturbed bigint;   -- kept windows still over the threshold
alter table perf_summary add column if not exists host_noise_note varchar;    -- what happened, or why NULL

-- Prompts of the length asked (issue 36, item 6): each request's prompt length as the workload built it (the
-- tokenizer's count, or words without one) beside the server's own count (prompt_tokens), and per step a note
-- when the two differ by more than one token (a chat template's tokens, a server without a tokenizer here).
alter table perf_requests add column if not exists prompt_tokens_asked integer; -- tokens (or words), as built
alter table perf_summary add column if not exists prompt_len_note varchar;      -- when the server's count differs
