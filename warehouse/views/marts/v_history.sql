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
--   speculative, engine_args      what else set the variant apart (speculative decoding method, engine options
--                                 JSON), so two series of one engine and quantization can be told apart
--   unit                          tok/s | ms | % | J/token, or the quality metric's own (fraction, nats, ...)
--   n                             observations behind the value: a quality metric's items (quality_scores.n);
--                                 the ok requests of the scenario behind a latency or jitter figure (all repeats);
--                                 NULL for throughput and energy
--   repeats                       runs of that scenario (perf); 1 for quality
--   ci_half_width                 half-width of the figure's own 95 % interval over the repeats (ttft_ms_mean,
--                                 ttft_cv_pct; metric's unit); NULL under 2 repeats or for other figures
--   night                         1, 2, ...: the night's place in its series (series_key, metric)
-- Only ok variants of runs whose status is not 'failed'.

with ok_runs as (
    select run_id, hardware_id, config_name, started_at
    from runs
    where status <> 'failed'
),

headline as (
    select run_id, variant, ttft_ms_p50, num_ok, repeats from stg_headline_scenario
),

jitter as (
    select t.run_id, t.variant, s.num_ok, s.repeats
    from v_tradeoff as t
    join perf_summary as s on t.run_id = s.run_id and t.variant = s.variant and t.jitter_scenario = s.scenario
),

perf as (
    unpivot (
        select t.run_id, t.variant, t.best_output_tok_s, t.peak_output_tok_s, t.ttft_ms_mean, h.ttft_ms_p50,
            t.ttft_ms_p99, t.tpot_ms_mean, t.ttft_cv_pct, t.energy_j_per_token,
            h.num_ok as headline_n, h.repeats as headline_repeats, j.num_ok as jitter_n,
            j.repeats as jitter_repeats,
            (t.ttft_ms_mean_ci_high - t.ttft_ms_mean_ci_low) / 2 as ttft_ms_mean_half,
            (t.ttft_cv_pct_ci_high - t.ttft_cv_pct_ci_low) / 2 as ttft_cv_pct_half
        from v_tradeoff as t
        left join headline as h on t.run_id = h.run_id and t.variant = h.variant
        left join jitter as j on t.run_id = j.run_id and t.variant = j.variant
        where t.status = 'ok'
    )
    on best_output_tok_s, peak_output_tok_s, ttft_ms_mean, ttft_ms_p50, ttft_ms_p99, tpot_ms_mean, ttft_cv_pct,
        energy_j_per_token
    into name metric value value
),

perf_directed as (
    select run_id, variant, 'perf' as scope, metric,
        metric in ('best_output_tok_s', 'peak_output_tok_s') as higher_is_better, value,
        case
            when metric in ('best_output_tok_s', 'peak_output_tok_s') then 'tok/s'
            when metric = 'ttft_cv_pct' then '%'
            when metric = 'energy_j_per_token' then 'J/token'
            else 'ms'
        end as unit,
        case
            when metric = 'ttft_cv_pct' then jitter_n
            when metric like 'ttft_ms_%' or metric = 'tpot_ms_mean' then headline_n
        end as n,
        case
            when metric = 'ttft_cv_pct' then jitter_repeats
            when metric like 'ttft_ms_%' or metric = 'tpot_ms_mean' then headline_repeats
        end as repeats,
        case metric when 'ttft_ms_mean' then ttft_ms_mean_half when 'ttft_cv_pct' then ttft_cv_pct_half end
            as ci_half_width
    from perf
),

quality as (
    select s.run_id, s.variant, s.suite as scope, s.suite || '.' || s.metric as metric,
        coalesce(s.higher_is_better, true) as higher_is_better, s.value, s.unit, s.n, 1 as repeats,
        null::double as ci_half_width
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
        v.engine_version,
        v.speculative,
        v.engine_args,
        m.unit,
        m.n,
        m.repeats,
        m.ci_half_width
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
        end as known_cause,
        row_number() over w as night
    from keyed
    window w as (partition by series_key, metric order by started_at, run_id)
)

select * from final
