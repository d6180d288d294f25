-- v_quality_deltas: one row per (run_id, variant, suite, metric) of a non-reference variant: its
-- quality against the reference with a paired 95 % confidence interval. Columns:
--   run_id, variant, suite, metric
--   reference_value, value         the reference's and the variant's score over the samples both
--                                  have, in the metric's unit
--   delta                          value - reference_value (unit as above; fractions x100 = points)
--   ci_low, ci_high                paired bootstrap percentile CI of delta (tasks/stats.py)
--   p_value                        exact McNemar p-value (0/1 per-sample scores only), else NULL
--   n                              paired samples
--   retention_99, retention_999    keeps >= 99 % / >= 99.9 % of the reference score (MLPerf)
--   verdict                        better | worse | inconclusive (CI spans zero, or n < the
--                                  config's min_samples) | identical (every paired sample equal) |
--                                  no_ci (no per-sample statistic) | no_data
--   unit, higher_is_better, reference_variant, confidence, method
-- The bootstrap is computed in Python at the end of each variant's suites and stored in
-- quality_deltas; this view only selects it, with ok variants only.

with deltas as (
    select d.*
    from quality_deltas as d
    join variants as v on d.run_id = v.run_id and d.variant = v.variant
    where v.status = 'ok'
),

final as (
    select
        run_id,
        variant,
        suite,
        metric,
        reference_value,
        value,
        delta,
        ci_low,
        ci_high,
        p_value,
        n,
        retention_99,
        retention_999,
        verdict,
        unit,
        higher_is_better,
        reference_variant,
        confidence,
        method
    from deltas
)

select * from final
