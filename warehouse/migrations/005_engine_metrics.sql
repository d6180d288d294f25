-- 005_engine_metrics: engines behind one interface (issue #5). What a server reports about itself
-- while it is measured (vLLM's Prometheus /metrics: KV-cache usage, queue length, speculative
-- acceptance, prefix-cache hits), and the engine's version per variant. Units as in warehouse/contract.py.

alter table variants add column engine_version varchar;  -- e.g. 'vllm 0.32.0+cpu'; NULL when unknown

create table engine_metrics (
    run_id varchar,
    variant varchar,
    engine varchar,
    phase varchar,        -- perf | quality | all
    metric varchar,       -- kv_cache_usage_pct, requests_running, requests_waiting, spec_acceptance_rate, ...
    stat varchar,         -- mean | max (gauges over the reads) | delta (counters over the phase) | ratio | count
    value double,         -- in unit
    unit varchar,         -- pct | count | tokens | fraction
    readings integer,     -- metric reads the value comes from
    window_s double,      -- first to last read of the phase (s)
    description varchar,
    note varchar
);
