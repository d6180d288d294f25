-- v_regressions: each night's value of each series against the band of the previous nights (stg_band), with
-- Otava's change point at that night where there is one (v_change_points, rule 'otava'). A night is a
-- regression when either rule says so on the worse side, an improvement on the better side; `rule` says
-- which. Series are keyed on what was measured (v_history.series_key), not on the config's name. Columns:
--   hardware_id, config_name, variant, metric, higher_is_better, run_id, started_at (UTC)
--   value                         this night's value (metric's unit)
--   prior_runs                    number of previous nights in the band (1-7)
--   prior_mean, prior_std         their mean and sample std (std NULL with one night)
--   band_low, band_high           the band (metric's unit)
--   change_pct                    (value / prior_mean - 1) * 100
--   is_regression, is_improvement   by either rule (the band's only on a series' nights 3-5 and beyond the
--                                 figure's own noise: stg_band.band_note says why it kept quiet)
--   series_key
--   rule                          band | otava | band+otava: which rule flagged this night; NULL: neither
--   otava_change_pct              Otava's change of the segments' means at this night (%)
--   otava_p_value                 its t-test p-value
--   otava_first_seen_run_id       the run whose load first found it (Otava needs nights after the step)
--   known_cause                   'engine version A -> B' when the engine's version changed at this night
-- Rows only for nights that have at least one previous night in their series.

with band as (
    select * from stg_band
),

otava as (
    select series_key, metric, run_id, change_pct, p_value, direction, first_seen_run_id
    from v_change_points
    where rule = 'otava'
),

final as (
    select
        b.hardware_id,
        b.config_name,
        b.variant,
        b.metric,
        b.higher_is_better,
        b.run_id,
        b.started_at,
        b.value,
        b.prior_runs,
        b.prior_mean,
        b.prior_std,
        b.band_low,
        b.band_high,
        b.change_pct,
        b.is_regression or coalesce(o.direction = 'regression', false) as is_regression,
        b.is_improvement or coalesce(o.direction = 'improvement', false) as is_improvement,
        b.series_key,
        case
            when (b.is_regression or b.is_improvement) and o.run_id is not null then 'band+otava'
            when o.run_id is not null then 'otava'
            when b.is_regression or b.is_improvement then 'band'
        end as rule,
        o.change_pct as otava_change_pct,
        o.p_value as otava_p_value,
        o.first_seen_run_id as otava_first_seen_run_id,
        b.known_cause
    from band as b
    left join otava as o on b.series_key = o.series_key and b.metric = o.metric and b.run_id = o.run_id
)

select * from final
