-- 008_engine_energy: every engine measured alike (issue #17). Energy of the engine's own GPUs (by UUID,
-- its tensor-parallel ranks) or RAPL for a CPU engine, never a hosted one; an idle baseline measured
-- before the sweep; J/token above idle beside the whole-device figure; how MBU's bytes were counted.
-- `if not exists`: a development warehouse of the engines branch applied these as 009_engine_energy.
-- Columns are appended in the order of warehouse/contract.py. Units as in 001.

alter table perf_summary add column if not exists energy_devices varchar;                  -- what was metered (NULL: nothing)
alter table perf_summary add column if not exists idle_power_w double;                     -- W, server up and idle, before the sweep
alter table perf_summary add column if not exists idle_window_s double;                    -- s, length of the idle window
alter table perf_summary add column if not exists energy_above_idle_j double;              -- J, energy_j - idle_power_w x windows
alter table perf_summary add column if not exists energy_j_per_token_above_idle double;    -- J per output token above idle
alter table perf_summary add column if not exists idle_note varchar;                       -- why the idle-subtracted columns are NULL
alter table perf_summary add column if not exists model_bytes_method varchar;              -- how model_bytes was counted
