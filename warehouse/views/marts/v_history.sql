-- v_history: every headline metric of every variant, one row per (run, variant, metric), so a
-- metric can be followed across nights on the same hardware. Columns:
--   hardware_id                   fingerprint of host, CPU model, core count and GPUs (runs)
--   config_name, variant, engine, quantization
--   metric                        best_output_tok_s, peak_output_tok_s (output tokens/s), ttft_ms_mean, ttft_ms_p99
--                                 (ms), jitter_pct (%), energy_j_per_token (J/token), or a
--                                 quality metric 'suite.metric' (own unit)
--   higher_is_better              direction of the metric
--   run_id, started_at (UTC)
--   value                         the run's value; NULL values are left out
-- Only ok variants of runs whose status is not 'failed'.

with ok_runs as (
    select run_id, hardware_id, config_name, started_at
    from runs
    where status <> 'failed'
),

perf as (
    unpivot (
        select run_id, variant, engine, quantization, best_output_tok_s, peak_output_tok_s, ttft_ms_mean, ttft_ms_p99,
            jitter_pct, energy_j_per_token
        from v_tradeoff
        where status = 'ok'
    )
    on best_output_tok_s, peak_output_tok_s, ttft_ms_mean, ttft_ms_p99, jitter_pct, energy_j_per_token
    into name metric value value
),

perf_directed as (
    select *, metric in ('best_output_tok_s', 'peak_output_tok_s') as higher_is_better
    from perf
),

quality as (
    select s.run_id, s.variant, v.engine, v.quantization, s.suite || '.' || s.metric as metric,
        coalesce(s.higher_is_better, true) as higher_is_better, s.value
    from quality_scores as s
    join variants as v on s.run_id = v.run_id and s.variant = v.variant
    where v.status = 'ok' and s.value is not null
),

metrics as (
    select run_id, variant, engine, quantization, metric, higher_is_better, value from perf_directed
    union all
    select run_id, variant, engine, quantization, metric, higher_is_better, value from quality
),

final as (
    select
        r.hardware_id,
        r.config_name,
        m.variant,
        m.engine,
        m.quantization,
        m.metric,
        m.higher_is_better,
        m.run_id,
        timezone('UTC', r.started_at) as started_at,
        m.value
    from metrics as m
    join ok_runs as r on m.run_id = r.run_id
)

select * from final
