-- stg_band: the band rule over v_history, shared by v_change_points and v_regressions. Each night's value of
-- each series (v_history.series_key, metric) against the mean of up to 7 previous nights of the same series
-- +/- max(3 x their sample std, 15 % of |mean|); 15 % is the run-to-run TTFT noise measured on a 2-core host.
-- The band speaks only where Otava cannot yet (issue 35: one verdict per change):
--   - from 2 previous nights on: one earlier night is no baseline (its own noise is the whole band);
--   - while the series has fewer than 6 nights (warehouse.history.MIN_NIGHTS): from then on Otava's change points
--     (change_points) judge the series on its whole history;
--   - when the change is larger than the figure's own noise: the 95 % half-width of the night's value, widened
--     by sqrt(1 + 1 / prior_runs) for the noise of the prior mean. The half-width is the figure's interval over
--     its repeats (v_history.ci_half_width) where it has one, else for a rate (unit 'fraction') the binomial
--     spread 1.96 sqrt(p (1 - p) / n) at the pooled p of these nights and its n items, else for a CV (ttft_cv_pct)
--     1.96 cv / sqrt(2 (k - 1)) with k requests a repeat; other figures carry no noise of their own here.
-- Outside the band on the worse side = regression, on the better side = improvement. Columns: every v_history
-- column, then
--   prior_runs                    number of previous nights in the band (1-7)
--   prior_mean, prior_std         their mean and sample std (std NULL with one night)
--   band_low, band_high           the band (metric's unit)
--   change_pct                    (value / prior_mean - 1) * 100
--   own_half_width                the night's own noise as above (metric's unit); NULL when unknown
--   outside_band                  the value is outside the band (whether or not the band may judge it)
--   band_note                     why the band rule does not judge this night: 'one previous night',
--                                 'Otava judges series of 6+ nights', 'own noise +/- x covers the change'; NULL
--                                 when it judges
--   is_regression, is_improvement   the band's verdict (false where band_note says why it keeps quiet)
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
        greatest(3 * coalesce(prior_std, 0), 0.15 * abs(prior_mean)) as half_width,
        (value + prior_mean * prior_runs) / (prior_runs + 1) as pooled
    from windowed
    where prior_runs >= 1
),

noise as (
    select
        *,
        coalesce(
            ci_half_width,
            case
                when unit = 'fraction' and n > 0 and pooled between 0 and 1
                    then 1.96 * sqrt(pooled * (1 - pooled) / n)
                when metric = 'ttft_cv_pct' and n / greatest(repeats, 1) >= 2
                    then 1.96 * value / sqrt(2 * (n / greatest(repeats, 1) - 1))
            end
        ) as own_half_width,
        case when higher_is_better then value < prior_mean - half_width
            else value > prior_mean + half_width end as worse,
        case when higher_is_better then value > prior_mean + half_width
            else value < prior_mean - half_width end as better
    from banded
),

judged as (
    select
        *,
        case
            when prior_runs < 2 then 'one previous night'
            when night >= 6 then 'Otava judges series of 6+ nights'
            when abs(value - prior_mean) <= own_half_width * sqrt(1 + 1 / prior_runs)
                then 'own noise +/- ' || printf('%.3g', own_half_width * sqrt(1 + 1 / prior_runs))
                    || ' covers the change'
        end as band_note
    from noise
),

final as (
    select
        * exclude (half_width, pooled, worse, better, band_note, own_half_width),
        prior_mean - half_width as band_low,
        prior_mean + half_width as band_high,
        (value / nullif(prior_mean, 0) - 1) * 100 as change_pct,
        own_half_width,
        worse or better as outside_band,
        band_note,
        worse and band_note is null as is_regression,
        better and band_note is null as is_improvement
    from judged
)

select * from final
