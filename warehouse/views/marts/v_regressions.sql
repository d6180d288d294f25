-- v_regressions: each run's value of each metric (v_history) against the band of the previous
-- nights on the same hardware, config and variant. Rule: the band is the mean of up to 7 previous
-- runs +/- max(3 x their sample std, 15 % of |mean|) — 15 % is the run-to-run noise measured on
-- TTFT on a 2-core host, so one earlier night is enough to compare with. A value outside the band
-- on the worse side is a regression, on the better side an improvement. Columns:
--   hardware_id, config_name, variant, metric, higher_is_better, run_id, started_at (UTC)
--   value                         this run's value (metric's unit)
--   prior_runs                    number of previous runs in the band (1-7)
--   prior_mean, prior_std         their mean and sample std (std NULL with one run)
--   band_low, band_high           the band (metric's unit)
--   change_pct                    (value / prior_mean - 1) * 100
--   is_regression, is_improvement
-- Rows only for runs that have at least one previous run.

with windowed as (
    select
        *,
        count(value) over w as prior_runs,
        avg(value) over w as prior_mean,
        stddev_samp(value) over w as prior_std
    from v_history
    window w as (
        partition by hardware_id, config_name, variant, metric
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
        hardware_id,
        config_name,
        variant,
        metric,
        higher_is_better,
        run_id,
        started_at,
        value,
        prior_runs,
        prior_mean,
        prior_std,
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
