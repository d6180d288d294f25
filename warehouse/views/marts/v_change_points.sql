-- v_change_points: where a series changed, by either rule, one row per (series, metric, run, rule):
--   rule 'otava'  Apache Otava's e-divisive change point (change_points, computed at load time by
--                 warehouse/history.py): the series' mean shifted at this run, judged on the whole history with
--                 a t-test between the segments either side. Needs >= 6 nights; found a few nights after the
--                 step (first_seen_run_id says which night's load found it).
--   rule 'band'   this night's value is outside the band of up to 7 previous nights (stg_band), where Otava
--                 cannot speak yet: nights 3 to 5 of a series, a change larger than the figure's own noise; and
--                 not where Otava placed a change point within one night of it (one verdict per change).
-- Otava ignores a metric's direction; `direction` applies it (v_history.higher_is_better). Columns:
--   series_key, hardware_id, config_name, variant, engine, quantization   the series and how the run named it
--   speculative, engine_args      what else sets the variant apart (v_history)
--   unit, n                       the metric's unit; observations behind the night's value (v_history)
--   night                         the changed night's place in its series (1, 2, ...)
--   metric, higher_is_better
--   run_id, started_at (UTC)      the run where it changed (the first night after the change)
--   rule                          otava | band
--   mean_before, mean_after       metric's unit: otava, the segments' means; band, the previous nights' mean and
--                                 this night's value
--   std_before, std_after         otava: population std of the segments; band: sample std of the previous nights
--   n_before, n_after             nights behind each mean
--   change_pct                    (mean_after / mean_before - 1) * 100
--   p_value                       otava: two-sided t-test between the segments; band: NULL
--   direction                     regression | improvement
--   known_cause                   'engine version A -> B' when the engine's version changed at this run
--   first_seen_run_id             the run whose load first reported it (band: the run itself)
--   method                        the rule's settings

with otava as (
    select
        series_key, metric, run_id, 'otava' as rule, mean_before, mean_after, std_before, std_after, n_before,
        n_after, change_pct, p_value, first_seen_run_id, method
    from change_points
),

band as (
    select
        series_key, metric, run_id, 'band' as rule, prior_mean as mean_before, value as mean_after,
        prior_std as std_before, null::double as std_after, prior_runs as n_before, 1 as n_after, change_pct,
        null::double as p_value, run_id as first_seen_run_id,
        'band: mean of up to 7 previous nights +/- max(3 std, 15 %), nights 3-5, beyond the own noise' as method
    from stg_band as b
    where (is_regression or is_improvement)
        and not exists (
            select 1 from change_points as c join v_history as h using (series_key, metric, run_id)
            where c.series_key = b.series_key and c.metric = b.metric and abs(h.night - b.night) <= 1
        )
),

found as (
    select * from otava
    union all by name
    select * from band
),

final as (
    select
        h.series_key,
        h.hardware_id,
        h.config_name,
        h.variant,
        h.engine,
        h.quantization,
        h.speculative,
        h.engine_args,
        h.unit,
        h.n,
        h.night,
        h.metric,
        h.higher_is_better,
        f.run_id,
        h.started_at,
        f.rule,
        f.mean_before,
        f.mean_after,
        f.std_before,
        f.std_after,
        f.n_before,
        f.n_after,
        f.change_pct,
        f.p_value,
        case
            when f.mean_after = f.mean_before then null
            when (f.mean_after > f.mean_before) = h.higher_is_better then 'improvement'
            else 'regression'
        end as direction,
        h.known_cause,
        f.first_seen_run_id,
        f.method
    from found as f
    join v_history as h on f.series_key = h.series_key and f.metric = h.metric and f.run_id = h.run_id
)

select * from final
