-- 001_init: the six result tables of warehouse/contract.py (the contract), one row each as the comments say.
-- Times are UTC (timestamptz); units are in the column names: _ms milliseconds, _s seconds,
-- _j joules, _w watts, _pct percent; throughputs are per second; JSON is stored as varchar.

-- One row per run.
create table runs (
    run_id varchar primary key,
    config_name varchar,
    started_at timestamptz,          -- UTC
    finished_at timestamptz,         -- UTC
    status varchar,                  -- ok | partial | failed
    host varchar,
    cpu varchar,
    cpu_count integer,
    gpu varchar,                     -- NULL when no GPU is visible
    hardware_id varchar,             -- host/cpu/gpu fingerprint: "same hardware" across runs
    library_versions varchar,        -- JSON {package: version}
    git_sha varchar,
    config_json varchar,             -- JSON
    reference_variant varchar,
    primary_quality_metric varchar,  -- 'suite.metric'
    error varchar
);

-- One row per variant of a run, failed ones included with their error.
create table variants (
    run_id varchar,
    variant varchar,
    model varchar,
    engine varchar,
    quantization varchar,
    speculative varchar,             -- method, NULL when none
    is_reference boolean,
    status varchar,                  -- ok | failed
    error varchar,
    artifact_path varchar,
    artifact_sha256 varchar,
    artifact_bytes bigint,           -- bytes
    build_cached boolean,
    build_s double,                  -- seconds
    server_startup_s double,         -- seconds
    engine_args varchar,             -- JSON
    primary key (run_id, variant)
);

-- One row per request, warm-up included (flagged).
create table perf_requests (
    run_id varchar,
    variant varchar,
    scenario varchar,                -- e.g. c1, c4
    concurrency integer,             -- requests in flight
    request_index integer,
    is_warmup boolean,
    status varchar,                  -- ok | error | incomplete
    error varchar,
    start_s double,                  -- seconds, send time from the scenario's start
    ttft_ms double,                  -- ms, send -> first text chunk
    tpot_ms double,                  -- ms per output token after the first
    e2el_ms double,                  -- ms, send -> last byte
    prompt_tokens integer,           -- tokens
    output_tokens integer,           -- tokens
    output_tokens_source varchar,    -- usage | tokenizer | chunks
    chunk_offsets_ms float[],        -- ms, each text chunk's arrival from send
    primary key (run_id, variant, scenario, request_index)
);

-- One row per (variant, scenario); statistics over the measured requests with status ok.
create table perf_summary (
    run_id varchar,
    variant varchar,
    scenario varchar,
    concurrency integer,             -- requests in flight
    num_requests integer,
    num_ok integer,
    num_errors integer,
    num_incomplete integer,
    duration_s double,               -- seconds
    total_input_tokens bigint,       -- tokens
    total_output_tokens bigint,      -- tokens
    request_throughput double,       -- requests/s
    output_throughput double,        -- output tokens/s over the scenario
    total_token_throughput double,   -- (input + output) tokens/s
    peak_output_throughput double,   -- output tokens/s in the best window
    peak_window_s double,            -- seconds
    -- ms; std is the sample std, percentiles over the scenario's requests (ITL: pooled chunk gaps)
    ttft_ms_mean double, ttft_ms_std double, ttft_ms_min double, ttft_ms_max double,
    ttft_ms_p50 double, ttft_ms_p90 double, ttft_ms_p95 double, ttft_ms_p99 double,
    tpot_ms_mean double, tpot_ms_std double, tpot_ms_min double, tpot_ms_max double,
    tpot_ms_p50 double, tpot_ms_p90 double, tpot_ms_p95 double, tpot_ms_p99 double,
    itl_ms_mean double, itl_ms_std double, itl_ms_min double, itl_ms_max double,
    itl_ms_p50 double, itl_ms_p90 double, itl_ms_p95 double, itl_ms_p99 double,
    e2el_ms_mean double, e2el_ms_std double, e2el_ms_min double, e2el_ms_max double,
    e2el_ms_p50 double, e2el_ms_p90 double, e2el_ms_p95 double, e2el_ms_p99 double,
    ttft_cv_pct double,              -- %, TTFT jitter: sample std / mean
    itl_cv_pct double,               -- %, ITL jitter
    ttft_p99_p50_ratio double,       -- ratio
    itl_p99_p50_ratio double,        -- ratio
    output_len_forced_by varchar,    -- min_tokens | ignore_eos | NULL (engine cannot)
    energy_j double,                 -- joules over the scenario
    energy_j_per_token double,       -- joules per output token
    mean_power_w double,             -- watts
    energy_source varchar,           -- nvml | rapl | NULL
    energy_note varchar,             -- why energy is NULL
    primary key (run_id, variant, scenario)
);

-- One row per (variant, suite, sample).
create table quality_samples (
    run_id varchar,
    variant varchar,
    suite varchar,
    sample_id varchar,
    prompt varchar,
    target varchar,
    response varchar,
    score double,                    -- in the suite's unit
    valid boolean,                   -- false: empty/unparseable answer or request error (scored wrong)
    details varchar,                 -- JSON
    primary key (run_id, variant, suite, sample_id)
);

-- One row per (variant, suite, metric).
create table quality_scores (
    run_id varchar,
    variant varchar,
    suite varchar,
    suite_version varchar,
    metric varchar,
    value double,                    -- in `unit`
    stderr double,                   -- standard error, in `unit`
    n integer,                       -- samples
    unit varchar,                    -- fraction | nats | ratio | count
    higher_is_better boolean,
    is_primary boolean,
    primary key (run_id, variant, suite, metric)
);
