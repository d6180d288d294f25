-- stg_band: the band rule over v_history, shared by v_change_points and v_regressions. Each night's value of
-- each series (v_history.series_key, metric) against the mean of up to 7 previous nights of the same series
-- +/- max(3 x their sample std, 15 % of |mean|); 15 % is the run-to-run TTFT noise measured on a 2-core host,
-- so one earlier night is enough to compare with. It judges short and noisy histories, where Otava
-- (change_points) needs more nights. Outside the band on the worse side = regression, on the better side =
-- improvement. Columns: every v_history column, then
--   prior_runs                    number of previous nights in the band (1-7)
--   prior_mean, prior_std         their mean and sample std (std NULL with one night)
--   band_low, band_high           the band (metric's unit)
--   change_pct                    (value / prior_mean - 1) * 100
--   is_regression, is_improvement
-- Rows only for nights that have at least one previous night in their series.

with windowed as (
    select
        *,
        count(value) over w as prior_runs,
        avg(value) over w as prior_mean,
        stddev_samp(value) over w as prior_std
    from v_history
    window w as (
        partition by series_key, metric
        order by started_at, run_id
        rows between 7 preceding and 1 preceding
    )
),

banded as (
    select
        *,
        greatest(3 * coalesce(prior_std, 0), 0.15 * abs(prior_mean)) as half_width
    from windowed
    where prior_runs >= 1
),

final as (
    select
        * exclude (half_width),
        prior_mean - half_width as band_low,
        prior_mean + half_width as band_high,
        (value / nullif(prior_mean, 0) - 1) * 100 as change_pct,
        case when higher_is_better then value < prior_mean - half_width
            else value > prior_mean + half_width end as is_regression,
        case when higher_is_better then value > prior_mean + half_width
            else value < prior_mean - half_width end as is_improvement
    from banded
)

select * from final
