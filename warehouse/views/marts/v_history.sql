-- v_history: every headline metric of every variant, one row per (run, variant, metric), so a metric can be
-- followed across nights. A series is keyed on what was measured (series_keys, warehouse/history.py), not on
-- a config's name: a renamed config keeps its history, a new model starts a new one. Columns:
--   hardware_id                   fingerprint of host, CPU model, core count and GPUs (runs)
--   config_name, variant, engine, quantization   as the run named them
--   metric                        best_output_tok_s, peak_output_tok_s (output tokens/s), ttft_ms_mean, ttft_ms_p50,
--                                 ttft_ms_p99 (ms, headline scenario), tpot_ms_mean (ms per output token, headline
--                                 scenario), ttft_cv_pct (%), energy_j_per_token (J/token), or a quality metric
--                                 'suite.metric' (own unit: gating metrics, fidelity KL, ...)
--   higher_is_better              direction of the metric
--   run_id, started_at (UTC)
--   value                         the run's value; NULL values are left out
--   series_key                    the series: sha256[:16] of variant_key, hardware_id and workload_key
--   scope                         'perf' or the suite the metric comes from (which workload keys it)
--   variant_key                   what served: artifact hash (or hosted model), engine, quantization,
--                                 speculative decoding, engine options
--   workload_key                  the perf sweep's defining fields, or the suite's spec and version
--   artifact_sha256, engine_version   of the variant that night
--   known_cause                   'engine version A -> B' when the engine's version differs from the series'
--                                 previous night (a known cause of a step there); NULL otherwise
-- Only ok variants of runs whose status is not 'failed'.

with ok_runs as (
    select run_id, hardware_id, config_name, started_at
    from runs
    where status <> 'failed'
),

headline as (
    select run_id, variant, ttft_ms_p50 from stg_headline_scenario
),

perf as (
    unpivot (
        select t.run_id, t.variant, t.best_output_tok_s, t.peak_output_tok_s, t.ttft_ms_mean, h.ttft_ms_p50,
            t.ttft_ms_p99, t.tpot_ms_mean, t.ttft_cv_pct, t.energy_j_per_token
        from v_tradeoff as t
        left join headline as h on t.run_id = h.run_id and t.variant = h.variant
        where t.status = 'ok'
    )
    on best_output_tok_s, peak_output_tok_s, ttft_ms_mean, ttft_ms_p50, ttft_ms_p99, tpot_ms_mean, ttft_cv_pct,
        energy_j_per_token
    into name metric value value
),

perf_directed as (
    select run_id, variant, 'perf' as scope, metric,
        metric in ('best_output_tok_s', 'peak_output_tok_s') as higher_is_better, value
    from perf
),

quality as (
    select s.run_id, s.variant, s.suite as scope, s.suite || '.' || s.metric as metric,
        coalesce(s.higher_is_better, true) as higher_is_better, s.value
    from quality_scores as s
    join variants as v on s.run_id = v.run_id and s.variant = v.variant
    where v.status = 'ok' and s.value is not null
),

metrics as (
    select * from perf_directed
    union all
    select * from quality
),

keyed as (
    select
        r.hardware_id,
        r.config_name,
        m.variant,
        v.engine,
        v.quantization,
        m.metric,
        m.higher_is_better,
        m.run_id,
        timezone('UTC', r.started_at) as started_at,
        m.value,
        k.series_key,
        m.scope,
        k.variant_key,
        k.workload_key,
        v.artifact_sha256,
        v.engine_version
    from metrics as m
    join ok_runs as r on m.run_id = r.run_id
    join variants as v on m.run_id = v.run_id and m.variant = v.variant
    join series_keys as k on m.run_id = k.run_id and m.variant = k.variant and m.scope = k.scope
),

final as (
    select
        *,
        case
            when row_number() over w > 1 and lag(engine_version) over w is distinct from engine_version
                then 'engine version ' || coalesce(lag(engine_version) over w, 'unknown') || ' -> '
                    || coalesce(engine_version, 'unknown')
        end as known_cause
    from keyed
    window w as (partition by series_key, metric order by started_at, run_id)
)

select * from final
