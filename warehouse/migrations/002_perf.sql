-- 002_perf: perf sweeps to the standard of vllm bench serve (issue #3): load patterns, repeats,
-- goodput, bootstrap confidence intervals, energy per device, power time series, roofline (MBU).
-- Columns are appended in the order of warehouse/contract.py. Units as in 001.

alter table perf_requests add column "repeat" integer;              -- 0-based repeat of the scenario
alter table perf_requests add column prompt_tokens_source varchar;  -- usage | tokenizer | approx_words
alter table perf_requests add column finish_reason varchar;         -- the server's: length | stop | ...
alter table perf_requests add column max_tokens integer;            -- output tokens asked for

alter table perf_summary add column load_kind varchar;              -- concurrency | rate | synchronous | throughput
alter table perf_summary add column request_rate double;            -- requests/s target of a rate step
alter table perf_summary add column burstiness double;              -- gamma shape of arrivals (1 = Poisson)
alter table perf_summary add column repeats integer;
alter table perf_summary add column num_warmup integer;             -- requests excluded as warm-up
alter table perf_summary add column request_goodput double;         -- requests/s meeting every SLO limit
alter table perf_summary add column num_good integer;
alter table perf_summary add column goodput_slo varchar;            -- preset name or the limits
alter table perf_summary add column slo_ttft_ms double;             -- ms
alter table perf_summary add column slo_tpot_ms double;             -- ms
alter table perf_summary add column slo_e2el_ms double;             -- ms
alter table perf_summary add column ci_level double;                -- e.g. 0.95
alter table perf_summary add column ci_method varchar;
alter table perf_summary add column ttft_ms_mean_ci_lo double;      -- ms
alter table perf_summary add column ttft_ms_mean_ci_hi double;      -- ms
alter table perf_summary add column ttft_ms_p99_ci_lo double;       -- ms
alter table perf_summary add column ttft_ms_p99_ci_hi double;       -- ms
alter table perf_summary add column output_throughput_ci_lo double; -- output tokens/s; NULL with one repeat
alter table perf_summary add column output_throughput_ci_hi double; -- output tokens/s
alter table perf_summary add column ttft_cv_pct_ci_lo double;       -- %
alter table perf_summary add column ttft_cv_pct_ci_hi double;       -- %
alter table perf_summary add column itl_cv_pct_ci_lo double;        -- %
alter table perf_summary add column itl_cv_pct_ci_hi double;        -- %
alter table perf_summary add column tokens_per_j double;            -- output tokens per joule
alter table perf_summary add column energy_by_device_j varchar;     -- JSON {device: joules}
alter table perf_summary add column output_len_note varchar;        -- why outputs may be shorter than asked
alter table perf_summary add column model_bytes bigint;             -- bytes read per decoded token at batch 1
alter table perf_summary add column mem_bandwidth_gb_s double;      -- 1e9 bytes/s, concurrency-1 rows
alter table perf_summary add column mem_bandwidth_method varchar;   -- measured how, or a specification
alter table perf_summary add column mbu_pct double;                 -- %, model bandwidth utilisation

-- Power at a fixed interval while a scenario's measured requests run.
create table perf_power (
    run_id varchar,
    variant varchar,
    scenario varchar,
    "repeat" integer,
    device varchar,                  -- gpu0, package-0, ...
    source varchar,                  -- nvml | rapl
    sample_index integer,
    t_s double,                      -- seconds from the start of the measured window
    power_w double,                  -- watts: NVML's reading, or RAPL's counter difference over the interval
    energy_j double,                 -- joules: the device's counter since the window's start
    primary key (run_id, variant, scenario, "repeat", device, sample_index)
);
