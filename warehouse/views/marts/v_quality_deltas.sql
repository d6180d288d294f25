-- v_quality_deltas: one row per (run_id, variant, suite, metric) of a non-reference variant: its
-- quality against the reference with a paired 95 % confidence interval. Columns:
--   run_id, variant, suite, metric
--   reference_value, value         the reference's and the variant's score over the samples both
--                                  have, in the metric's unit
--   delta                          value - reference_value (unit as above; fractions x100 = points)
--   ci_low, ci_high                paired CI of delta at `confidence` (tasks/quality/deltas.py): Tango's score
--                                  interval for 0/1 scores, else a BCa bootstrap; [0, 0] when
--                                  identical. Per metric, not adjusted for the family
--   p_value                        raw two-sided p of the row's test: exact McNemar (0/1 scores),
--                                  else a paired sign-flip permutation test; NULL: no test
--   n                              paired samples
--   retention_99, retention_999    value / reference_value (reference / value when lower is
--                                  better) >= 0.99 / >= 0.999, as v_retention (MLPerf)
--   verdict                        better | worse (the CI excludes zero AND p_value_adjusted <=
--                                  1 - confidence) | inconclusive (otherwise, or n < the config's
--                                  min_samples) | identical (every paired sample equal) |
--                                  no_ci (no per-sample statistic) | no_data
--   unit, higher_is_better, reference_variant, confidence, method
--   p_value_adjusted               Holm's step-down adjustment of p_value over the family: every
--                                  row of this (run_id, variant) with a p_value; the verdict uses it
--   p_family_size                  number of tests in that family
-- Intervals and tests are computed in Python at the end of each variant's suites and stored
-- in quality_deltas; this view only selects them, with ok variants only.

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
        method,
        p_value_adjusted,
        p_family_size
    from deltas
)

select * from final
